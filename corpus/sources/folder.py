"""A folder on the server, only under SOURCE_ROOTS: nothing outside it is read, symlinks included."""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings

from corpus.sources.reading import (
    Listed,
    PathFilter,
    Scan,
    SourceReader,
    SourceRefused,
    SourceUnavailable,
    hashed_copy,
)


def folder_root_check(location: str) -> Path:
    """The folder's real path, when it lies under one of SOURCE_ROOTS (after resolving every
    symlink); else SourceRefused naming the roots."""
    roots = [Path(r).resolve() for r in settings.SOURCE_ROOTS]
    if not roots:
        raise SourceRefused("No folder may be a source: the administrator has set no SOURCE_ROOTS.")
    path = Path(location)
    if not path.is_absolute():
        raise SourceRefused(f"{location[:200]!r} is not an absolute path.")
    try:
        real = path.resolve()
    except (OSError, ValueError) as error:
        raise SourceRefused(f"{location[:200]!r} cannot be read: {error}") from None
    if not any(real == root or real.is_relative_to(root) for root in roots):
        raise SourceRefused(f"{location[:200]!r} is outside the folders sources may read "
                            f"({', '.join(str(r) for r in roots)}).")
    return real


class FolderReader(SourceReader):
    def __init__(self, *, location: str, filters: PathFilter) -> None:
        self.location = location
        self.filters = filters

    def listing(self, scan: Scan) -> list[Listed]:
        root = folder_root_check(self.location)
        if not root.is_dir():
            raise SourceUnavailable(f"The folder {self.location} does not exist or is not a folder.")
        listed = []
        for directory, _, names in os.walk(root, onerror=_raise):  # symlinked folders are not entered
            for name in names:
                path = Path(directory) / name
                listed.append(_listed(root, path.relative_to(root).as_posix(), path))
        return sorted(listed, key=lambda item: item.path)

    def fetch(self, item: Listed, target: Path) -> tuple[str, dict, str]:
        with open(item.locator, "rb") as handle:
            sha256 = hashed_copy(
                iter(lambda: handle.read(1 << 20), b""), target, limit=settings.UPLOAD_MAX_BYTES
            )
        return sha256, item.version, f"file://{item.locator}"


def _listed(root: Path, relative: str, path: Path) -> Listed:
    """A file by its real path, with its size and mtime as its version."""
    real = path.resolve()
    if not real.is_relative_to(root):
        return Listed(relative, {}, problem="a symlink that leads outside the source's folder")
    try:
        stat = real.stat()
    except OSError as error:
        return Listed(relative, {}, problem=str(error))
    return Listed(relative, {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}, locator=real)


def _raise(error: OSError) -> None:
    raise SourceUnavailable(f"The folder cannot be read: {error.strerror} ({error.filename}).")
