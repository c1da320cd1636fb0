"""What every kind of source shares: what a scan returns, the path filters, the errors, and the
scan itself (`SourceReader`).

A kind's reader (`folder.py`, `git.py`, `web.py`, `s3.py`) lists the documents its source holds
and compares each with what the corpus holds for its path (`Known`): a document whose version
(blob id, ETag, Last-Modified, size and mtime) is unchanged is not read again; any other one is
copied to a local file and hashed (`Fetched`), and the sync decides from the hash. The folder,
Git and S3 readers only say how to list their source and how to read one document
(`SourceReader.listing`, `.fetch`); the web reader finds its pages by reading them (their links),
so it scans on its own.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Protocol
from urllib.parse import ParseResult, urlparse

from core.errors import ApplicationError
from engine.dataset_formats import FORMAT_BY_SUFFIX

# The file types the upload path reads; a source's other files are not documents.
READABLE_SUFFIXES = frozenset(FORMAT_BY_SUFFIX)
Progress = Callable[[int, int], None]


class SourceUnavailable(ApplicationError):
    """The source cannot be read (unreachable, refused, bad token, a failed clone): the sync fails
    with this reason and the corpus keeps every document it had."""

    code = "source_unavailable"
    status = 502


class SourceRefused(ApplicationError):
    """A source's settings that the portal will not read (a path outside SOURCE_ROOTS, a scheme)."""

    code = "source_refused"


def url_parts(url: str) -> tuple[ParseResult, str]:
    """(the parsed URL, its host), or SourceRefused for one that does not parse."""
    try:
        parsed = urlparse(url)
        return parsed, parsed.hostname or ""
    except ValueError:
        raise SourceRefused(f"{url[:200]!r} is not a URL.") from None


@dataclass(frozen=True)
class Known:
    """What the corpus holds for a path of the source."""

    sha256: str
    version: dict


@dataclass(frozen=True)
class Fetched:
    """A document read into a local file: new, or changed by its version (its hash decides)."""

    path: str
    file: Path
    sha256: str
    version: dict
    url: str


@dataclass
class Scan:
    """One pass over the source. Present paths: unchanged, fetched and failed ones; a known path
    that is none of those was removed at the source."""

    unchanged: set[str] = field(default_factory=set)
    fetched: list[Fetched] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    cursor: dict = field(default_factory=dict)

    @property
    def present(self) -> set[str]:
        return self.unchanged | {f.path for f in self.fetched} | {path for path, _ in self.failed}


class Reader(Protocol):
    def scan(self, *, known: dict[str, Known], workdir: Path, progress: Progress) -> Scan: ...


@dataclass(frozen=True)
class Listed:
    """A document as its source lists it: its path, what the listing says of its version (unchanged
    when every key of it equals the known version's), what reading it takes (`locator`), and why
    it cannot be read, if it cannot (`problem`: named in the sync's failures)."""

    path: str
    version: dict
    locator: Any = None
    problem: str = ""


class SourceReader:
    """The scan of a source that can be listed: list it, keep the paths the filters want, skip the
    documents whose version is unchanged, read the others into `workdir`. A kind says how to list
    (`listing`) and how to read one document (`fetch`), or every wanted one at once (`read`)."""

    filters: PathFilter
    # What `fetch` raises for one document that cannot be read: it is named, the others go on.
    read_errors: tuple[type[Exception], ...] = (OSError, ValueError)

    def listing(self, scan: Scan) -> list[Listed]:
        """Every document of the source (it may set `scan.cursor`); SourceUnavailable when the
        source cannot be listed."""
        raise NotImplementedError

    def fetch(self, item: Listed, target: Path) -> tuple[str, dict, str]:
        """Copy the document to `target`: its (sha256, version, url)."""
        raise NotImplementedError

    def scan(self, *, known: dict[str, Known], workdir: Path, progress: Progress) -> Scan:
        scan = Scan()
        wanted = []
        for item in self.listing(scan):
            if not self.filters.wants(item.path):
                continue
            previous = known.get(item.path)
            if item.problem:
                scan.failed.append((item.path, item.problem))
            elif previous is not None and all(previous.version.get(k) == v for k, v in item.version.items()):
                scan.unchanged.add(item.path)
            else:
                wanted.append(item)
        self.read(wanted, scan, workdir, progress)
        return scan

    def read(self, wanted: list[Listed], scan: Scan, workdir: Path, progress: Progress) -> None:
        for number, item in enumerate(wanted):
            progress(number, len(wanted))
            target = local_name(workdir, number, item.path)
            try:
                sha256, version, url = self.fetch(item, target)
            except self.read_errors as error:
                scan.failed.append((item.path, str(error)))
                continue
            scan.fetched.append(Fetched(item.path, target, sha256, version, url=url))


@dataclass(frozen=True)
class PathFilter:
    """Include and exclude globs over a document's path (`*` also crosses `/`), and the readable
    file types. No include pattern: every readable file."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    @classmethod
    def from_text(cls, include: str, exclude: str) -> PathFilter:
        def patterns(text: str) -> tuple[str, ...]:
            return tuple(p.strip() for p in text.replace(",", "\n").splitlines() if p.strip())
        return cls(patterns(include), patterns(exclude))

    def wants(self, path: str, *, any_suffix: bool = False) -> bool:
        if not any_suffix and PurePosixPath(path).suffix.lower() not in READABLE_SUFFIXES:
            return False
        if self.include and not any(fnmatch.fnmatchcase(path, p) for p in self.include):
            return False
        return not any(fnmatch.fnmatchcase(path, p) for p in self.exclude)


def hashed_copy(chunks: object, target: Path, *, limit: int) -> str:
    """Write `chunks` (an iterable of bytes) to `target`, at most `limit` bytes; returns the sha256."""
    digest = hashlib.sha256()
    size = 0
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as out:
        for chunk in chunks:  # type: ignore[attr-defined]
            size += len(chunk)
            if size > limit:
                raise ValueError(f"larger than the upload limit ({limit:,} bytes)")
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


def local_name(workdir: Path, index: int, path: str, suffix: str = "") -> Path:
    """A local file for the index-th document read, keeping its suffix (the upload path reads by it)."""
    return workdir / f"{index:06d}{suffix or PurePosixPath(path).suffix.lower()}"
