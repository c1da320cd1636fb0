"""Writing a file so that its name only ever holds a complete file (the one atomic write)."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_write(target: str | Path, *, durable: bool = True) -> Iterator[Path]:
    """A new, empty temporary file beside `target` for the block to write (by its path); when the
    block ends, it is flushed to disk (`durable`) and renamed over `target` in one step; when the
    block raises, it is removed and `target` is left as it was. A crash leaves at most a hidden
    `.<name>.*.tmp` beside it, never a half-written `target`; concurrent writers each rename a
    whole file of their own."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
        if durable:
            with open(temporary, "rb+") as written:
                os.fsync(written.fileno())
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def reserve(path: str | Path, size: int) -> None:
    """Give `path` `size` bytes of real disk blocks before it is written through a memory map.

    A sparse file (`truncate`) that is filled through a map on a full disk kills the process with
    SIGBUS at the page that finds no block; reserved first, a full disk is an OSError (ENOSPC)
    here, which a build reports. File systems without fallocate fall back to the sparse file."""
    with open(path, "r+b") as handle:
        try:
            os.posix_fallocate(handle.fileno(), 0, size)
        except OSError as error:
            if error.errno in (errno.EOPNOTSUPP, errno.EINVAL):
                handle.truncate(size)
                return
            raise
