"""A folder on the server, only under SOURCE_ROOTS: nothing outside it is read, symlinks included."""

from __future__ import annotations

import grp
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
    def __init__(self, *, location: str, filters: PathFilter, posix_groups: bool = False) -> None:
        self.location = location
        self.filters = filters
        self.posix_groups = posix_groups  # a file's group is part of its version (a chgrp is a change)

    def listing(self, scan: Scan) -> list[Listed]:
        root = folder_root_check(self.location)
        if not root.is_dir():
            raise SourceUnavailable(f"The folder {self.location} does not exist or is not a folder.")
        listed = []
        for directory, _, names in os.walk(root, onerror=_raise):  # symlinked folders are not entered
            for name in names:
                path = Path(directory) / name
                listed.append(_listed(root, path.relative_to(root).as_posix(), path, self.posix_groups))
        return sorted(listed, key=lambda item: item.path)

    def fetch(self, item: Listed, target: Path) -> tuple[str, dict, str]:
        with open(item.locator, "rb") as handle:
            sha256 = hashed_copy(
                iter(lambda: handle.read(1 << 20), b""), target, limit=settings.UPLOAD_MAX_BYTES
            )
        return sha256, item.version, f"file://{item.locator}"


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:  # a group this machine does not name: its number
        return str(gid)


def _listed(root: Path, relative: str, path: Path, posix_groups: bool = False) -> Listed:
    """A file by its real path, with its size and mtime as its version (and its POSIX group's
    name, where the source reads it: `corpus.sources.readers`)."""
    real = path.resolve()
    if not real.is_relative_to(root):
        return Listed(relative, {}, problem="a symlink that leads outside the source's folder")
    try:
        stat = real.stat()
    except OSError as error:
        return Listed(relative, {}, problem=str(error))
    version = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    if posix_groups:
        version["group"] = _group_name(stat.st_gid)
    return Listed(relative, version, locator=real)


def _raise(error: OSError) -> None:
    raise SourceUnavailable(f"The folder cannot be read: {error.strerror} ({error.filename}).")
