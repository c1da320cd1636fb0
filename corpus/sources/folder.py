"""A folder on the server, only under SOURCE_ROOTS: nothing outside it is read, symlinks included."""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings

from corpus.sources.reading import (
    Fetched,
    Known,
    PathFilter,
    Progress,
    Scan,
    SourceRefused,
    SourceUnavailable,
    hashed_copy,
    local_name,
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


class FolderReader:
    def __init__(self, *, location: str, filters: PathFilter) -> None:
        self.location = location
        self.filters = filters

    def scan(self, *, known: dict[str, Known], workdir: Path, progress: Progress) -> Scan:
        root = folder_root_check(self.location)
        if not root.is_dir():
            raise SourceUnavailable(f"The folder {self.location} does not exist or is not a folder.")
        scan = Scan()
        files = sorted(self._files(root))
        for number, (relative, path) in enumerate(files):
            progress(number, len(files))
            self._one(root, relative, path, known.get(relative), scan, workdir, number)
        return scan

    @staticmethod
    def _files(root: Path) -> list[tuple[str, Path]]:
        found = []
        for directory, _, names in os.walk(root, onerror=_raise):  # symlinked folders are not entered
            for name in names:
                path = Path(directory) / name
                found.append((path.relative_to(root).as_posix(), path))
        return found

    def _one(self, root: Path, relative: str, path: Path, known: Known | None, scan: Scan,
             workdir: Path, number: int) -> None:
        if not self.filters.wants(relative):
            return
        real = path.resolve()
        if not real.is_relative_to(root):
            scan.failed.append((relative, "a symlink that leads outside the source's folder"))
            return
        try:
            stat = real.stat()
            version = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
            if known is not None and known.version == version:
                scan.unchanged.add(relative)
                return
            target = local_name(workdir, number, relative)
            with open(real, "rb") as handle:
                sha256 = hashed_copy(iter(lambda: handle.read(1 << 20), b""), target, limit=settings.UPLOAD_MAX_BYTES)
        except (OSError, ValueError) as error:
            scan.failed.append((relative, str(error)))
            return
        scan.fetched.append(Fetched(relative, target, sha256, version, url=f"file://{real}"))


def _raise(error: OSError) -> None:
    raise SourceUnavailable(f"The folder cannot be read: {error.strerror} ({error.filename}).")
