"""Whether the rows and the files of each corpus agree: what a corpus's serving state needs on
this machine (or in the object store), and what is missing.

A database restored without its files, or files restored from before the rows (a build the rows
say serves, removed since by the cleanup), leaves corpora whose rows point at segments that are
not there. Nothing here changes anything: the corpus page shows the report with a rebuild from the
datasets, searches of such a corpus are a clear error (`corpus.segment_cache.SegmentFilesMissing`),
and the processes log it when they start (`corpora_files_log`), so it is never a 500 and never a
half-active build.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.core import checks
from django.db import DatabaseError, connections

from core.errors import ApplicationError
from corpus.files import build_dir
from corpus.models import Corpus, Dataset, IndexBuild, Memory
from corpus.object_store import MANIFEST, ObjectStoreUnavailable, build_key, object_store, verify_local
from corpus.segment_cache import local_segment_dir
from corpus.serving import model_for

logger = logging.getLogger(__name__)


@dataclass
class CorpusFiles:
    """What a corpus's serving state lacks. `segments`: one line per segment whose files are not
    here; `datasets`: the names of datasets whose uploaded file is gone (a rebuild needs them)."""

    corpus_id: int
    name: str
    segments: list[str] = field(default_factory=list)
    model: str = ""
    datasets: list[str] = field(default_factory=list)
    rows: list[str] = field(default_factory=list)

    @property
    def broken(self) -> bool:
        return bool(self.segments or self.model or self.rows)

    @property
    def can_rebuild(self) -> bool:
        """A full build from the datasets brings the corpus back: it has datasets, all present."""
        return not self.datasets and Dataset.objects.filter(corpus_id=self.corpus_id).exists()

    def lines(self) -> list[str]:
        missing = [*self.segments, *([self.model] if self.model else []), *self.rows]
        if self.datasets:
            missing.append(f"the files of dataset{'s' if len(self.datasets) > 1 else ''} "
                           f"{', '.join(repr(n) for n in self.datasets)} (upload them again to rebuild)")
        return missing


def _segment_missing(build: IndexBuild, *, deep: bool) -> str:
    """'' when the segment's files are here (or in the store), else what is missing."""
    label = f"{build.get_kind_display().lower()} #{build.number}"
    published = (build.parameters or {}).get("published")
    store = object_store()
    directory = local_segment_dir(build) if store is None or not published else build_dir(build.corpus_id, build.pk)
    if store is not None and published:
        if (directory / MANIFEST).is_file() and not (deep and verify_local(directory, published)):
            return ""
        if not deep:
            return ""  # fetched on first use; a deep check asks the store
        try:
            absent = [name for name in published if not store.exists(f"{build_key(build.corpus_id, build.pk)}/{name}")]
        except ObjectStoreUnavailable as error:
            return f"{label}: the object store cannot say ({error.message})"
        return f"{label}: {', '.join(absent)} missing in the object store" if absent else ""
    if not (directory / MANIFEST).is_file():
        return f"{label}: its index files are missing ({directory} has no {MANIFEST})"
    if deep and published:
        bad = verify_local(directory, published)
        if bad:
            return f"{label}: {', '.join(bad)} differ from what was published"
    return ""


def corpus_files_report(*, corpus: Corpus, deep: bool = False) -> CorpusFiles:
    """What `corpus` lacks to serve. `deep` also checks every file's sha256, the object store's
    objects and each segment's memory rows (slower: `manage.py check_restore`)."""
    report = CorpusFiles(corpus_id=corpus.pk, name=corpus.name)
    ids = corpus.serving_build_ids
    segments = IndexBuild.objects.in_bulk(ids)
    for build_id in ids:
        build = segments.get(build_id)
        if build is None:
            report.segments.append(f"segment {build_id}: no such build row")
            continue
        missing = _segment_missing(build, deep=deep)
        if missing:
            report.segments.append(missing)
        if deep and build.documents is not None:
            rows = Memory.objects.filter(build_id=build_id).count()
            if rows != build.documents:
                report.rows.append(f"build #{build.number}: {rows} memory rows, {build.documents} expected")
    if ids and segments.get(ids[0]) is not None:
        try:
            model_for(segments[ids[0]].params)
        except ApplicationError as error:
            report.model = error.message
    store = object_store()
    for dataset in corpus.datasets.all():
        path = Path(settings.DATA_DIR) / dataset.file.name
        if path.is_file() or store is not None:
            continue  # with a store, an upload lives there; a build fetches it
        report.datasets.append(dataset.name)
    return report


def corpora_files_reports(*, deep: bool = False) -> list[CorpusFiles]:
    """The report of every corpus that serves something and lacks what it needs."""
    corpora = Corpus.objects.exclude(active_build=None).order_by("pk")
    return [report for corpus in corpora if (report := corpus_files_report(corpus=corpus, deep=deep)).broken]


def corpora_files_log() -> list[CorpusFiles]:
    """At a process's start: log each corpus whose files are missing. Never stops the start (the
    pages say it and offer a rebuild); a database not migrated yet is not checked."""
    try:
        reports = corpora_files_reports()
    except DatabaseError:
        return []
    for report in reports:
        logger.warning("corpus %s (%r) cannot serve: %s. Its page offers a rebuild from its datasets.",
                       report.corpus_id, report.name, "; ".join(report.lines()))
    return reports


def corpora_files_log_soon() -> threading.Thread:
    """`corpora_files_log` on a thread of its own, which closes its connection when done: the web
    server imports its application inside its event loop, where the ORM may not run."""

    def check() -> None:
        try:
            corpora_files_log()
        except Exception:  # noqa: BLE001 - a start check never stops the start
            logger.warning("checking the corpora's files at start failed", exc_info=True)
        finally:
            connections.close_all()

    thread = threading.Thread(target=check, name="corpora-files-check", daemon=True)
    thread.start()
    return thread


def corpora_files_check(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    """`manage.py check --database default` and `migrate` (what `./portal run` starts with)."""
    if not kwargs.get("databases"):
        return []
    try:
        reports = corpora_files_reports()
    except DatabaseError:
        return []  # before the first migrate
    return [checks.Warning(f"corpus {r.corpus_id} ({r.name!r}) cannot serve: {'; '.join(r.lines())}",
                           hint="Restore its files (manage.py restore), or rebuild it from its datasets on its page.",
                           id="hdrag.W010") for r in reports]
