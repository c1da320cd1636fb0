"""This machine's copies of index segments (builds and appends), fetched from the object store.

A segment lives in `DATA_DIR/corpora/<corpus>/builds/<build>/` on every machine: where a worker
wrote it, or where a web process (or a worker appending to it) fetched it from the object store
(`corpus.object_store`, `BUILD_STORAGE_URL`). The row's `build_dir` is where the worker wrote it
and means nothing on another machine; `segment_path` is what every reader uses.

With a store, `segment_path` fetches a segment this machine lacks (every file checked against the
size and sha256 recorded at publish, the manifest last), and checks the files of a segment once
per process before it is memory-mapped: a file corrupted in the cache is fetched again. Fetched
segments count against `SEGMENT_CACHE_BYTES`; past it, the least recently used segments that no
corpus serves are deleted (never one that serves: a search may be reading it).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from pathlib import Path

from django.conf import settings

from core.errors import ApplicationError
from corpus.files import build_dir
from corpus.models import Corpus, IndexBuild
from corpus.object_store import MANIFEST, fetch_build, object_store, verify_local
from corpus.serving import forget_build

logger = logging.getLogger(__name__)
_USED = ".used"  # touched on every use: the cache's recency
_checked: set[tuple[int, float]] = set()  # (build id, manifest mtime) whose files this process checked
_locks: dict[int, threading.Lock] = {}
_locks_guard = threading.Lock()


class SegmentFilesMissing(ApplicationError):
    """A segment the rows say serves is not on this machine (a database restored without its
    files): a clear 503 naming it, never a traceback (corpus.integrity reports every such corpus)."""

    code = "index_files_missing"
    status = 503


def _lock(build_id: int) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(build_id, threading.Lock())


def local_segment_dir(build: IndexBuild) -> Path:
    """Where a segment is on a machine without a store: the directory the row names, or its place
    under this DATA_DIR when the row's is gone (a DATA_DIR moved or restored to another path)."""
    canonical = build_dir(build.corpus_id, build.pk)
    if build.build_dir and (
        (Path(build.build_dir) / MANIFEST).is_file() or not (canonical / MANIFEST).is_file()
    ):
        return Path(build.build_dir)
    return canonical


def segment_path(build: IndexBuild) -> Path:
    """This machine's directory of `build`, complete and checked (see the module docstring).
    Raises ObjectStoreUnavailable when it must be fetched and the store cannot give it."""
    published = build.params.published
    if object_store() is None or not published:
        # One machine: where the worker wrote it (the row says; builds made by tools elsewhere too).
        directory = local_segment_dir(build)
        if not (directory / MANIFEST).is_file():
            # The path is for the log only: a user of the chat or the API is not shown the server's files.
            logger.warning("build %s: index files missing at %s", build.pk, directory)
            raise SegmentFilesMissing(
                f"The index files of {build.get_kind_display().lower()} #{build.number} of this corpus are "
                "missing: restore them, or rebuild the corpus from its datasets on its page.",
                {"corpus_id": build.corpus_id, "build_id": build.pk},
            )
        return directory
    directory = build_dir(build.corpus_id, build.pk)
    with _lock(build.pk):
        manifest = directory / MANIFEST
        if not manifest.is_file():
            started = time.monotonic()
            fetch_build(
                corpus_id=build.corpus_id, build_id=build.pk, directory=directory, published=published
            )
            logger.info("build %s: fetched %d files (%.1f MB) in %.2f s", build.pk, len(published),
                        sum(f["bytes"] for f in published.values()) / 1e6, time.monotonic() - started)
            _checked.add((build.pk, manifest.stat().st_mtime))
            evict(keep={build.pk})
        elif (build.pk, manifest.stat().st_mtime) not in _checked:
            bad = verify_local(directory, published)
            if bad:
                logger.warning(
                    "build %s: cached files %s differ from what was published; fetching them again",
                    build.pk,
                    bad,
                )
                forget_build(directory)
                for name in bad:
                    (directory / name).unlink(missing_ok=True)
                manifest.unlink(missing_ok=True)
                fetch_build(
                    corpus_id=build.corpus_id, build_id=build.pk, directory=directory, published=published
                )
            _checked.add((build.pk, manifest.stat().st_mtime))
        (directory / _USED).touch()
    return directory


def _size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file())


def evict(*, keep: set[int] = frozenset()) -> list[int]:
    """Delete the least recently used segments past SEGMENT_CACHE_BYTES, never one a corpus serves
    (nor those in `keep`). Returns the ids deleted."""
    root = Path(settings.DATA_DIR) / "corpora"
    cached: list[tuple[float, int, Path, int]] = []
    for used in root.glob(f"*/builds/*/{_USED}"):
        directory = used.parent
        if directory.name.isdigit():
            cached.append((used.stat().st_mtime, int(directory.name), directory, _size(directory)))
    total = sum(size for *_, size in cached)
    if total <= settings.SEGMENT_CACHE_BYTES:
        return []
    serving = {
        i
        for ids in Corpus.objects.exclude(active_build=None).values_list("active_build_id", "active_appends")
        for i in [ids[0], *(ids[1] or [])]
    }
    running = set(
        IndexBuild.objects.filter(status__in=IndexBuild.ACTIVE_STATUSES).values_list("pk", flat=True)
    )
    deleted = []
    for _, build_id, directory, size in sorted(cached):
        if total <= settings.SEGMENT_CACHE_BYTES:
            break
        if build_id in serving or build_id in running or build_id in keep:
            continue
        forget_build(directory)
        shutil.rmtree(directory, ignore_errors=True)
        total -= size
        deleted.append(build_id)
    if total > settings.SEGMENT_CACHE_BYTES:
        logger.warning("segment cache holds %.1f GB of serving segments, over SEGMENT_CACHE_BYTES (%.1f GB)",
                       total / 1e9, settings.SEGMENT_CACHE_BYTES / 1e9)
    return deleted

