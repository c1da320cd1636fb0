"""Whether the rows and the files of each corpus agree: what a corpus's serving state needs on
this machine (or in the object store), whether every dataset's upload is kept, and what is missing.

A database restored without its files, or files restored from before the rows (a build the rows
say serves, removed since by the cleanup), leaves corpora whose rows point at segments that are
not there. Nothing here changes anything: the corpus page shows the report with a rebuild from the
datasets, searches of such a corpus are a clear error (`corpus.segment_cache.SegmentFilesMissing`),
and the processes log it when they start (`corpora_files_log`), so it is never a 500 and never a
half-active build.

A dataset whose upload is gone (deleted under DATA_DIR, or from the object store) still serves
what was built from it, but a rebuild, a merge or a download cannot include it: the same report
names it, for every corpus with datasets, so it is found before a team needs it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.core import checks
from django.db import DatabaseError, connections
from django.db.models import Q

from core.errors import ApplicationError
from corpus.files import build_dir
from corpus.models import Corpus, Dataset, IndexBuild, Memory
from corpus.object_store import MANIFEST, ObjectStoreUnavailable, build_key, object_store, verify_local
from corpus.segment_cache import local_segment_dir
from corpus.serving import model_for

logger = logging.getLogger(__name__)


@dataclass
class CorpusFiles:
    """What a corpus lacks. `segments`: one line per segment whose files are not here; `datasets`:
    the names of datasets whose uploaded file is gone `uploads_place` (a rebuild needs them);
    `uploads_unknown`: why the object store could not say."""

    corpus_id: int
    name: str
    segments: list[str] = field(default_factory=list)
    model: str = ""
    datasets: list[str] = field(default_factory=list)
    rows: list[str] = field(default_factory=list)
    uploads_place: str = "on this machine"
    uploads_unknown: str = ""

    @property
    def broken(self) -> bool:
        """It cannot serve."""
        return bool(self.segments or self.model or self.rows)

    @property
    def uploads_lost(self) -> bool:
        """It may serve, but a rebuild cannot bring back all of it."""
        return bool(self.datasets or self.uploads_unknown)

    @property
    def has_problems(self) -> bool:
        return self.broken or self.uploads_lost

    @property
    def can_rebuild(self) -> bool:
        """A full build from the datasets brings the corpus back: it has datasets, all present."""
        return not self.uploads_lost and Dataset.objects.filter(corpus_id=self.corpus_id).exists()

    def lines(self) -> list[str]:
        missing = [*self.segments, *([self.model] if self.model else []), *self.rows]
        if self.datasets:
            plural = len(self.datasets) > 1
            missing.append(f"the uploaded file{'s' if plural else ''} of dataset{'s' if plural else ''} "
                           f"{', '.join(repr(n) for n in self.datasets)}, {self.uploads_place} "
                           f"(upload {'them' if plural else 'it'} again to rebuild)")
        if self.uploads_unknown:
            missing.append(self.uploads_unknown)
        return missing

    def summary(self) -> str:
        """One line for the commands and the log: what the corpus cannot do, and what it lacks."""
        what = "cannot serve" if self.broken else "cannot be rebuilt whole"
        return f"corpus {self.corpus_id} ({self.name!r}) {what}: {'; '.join(self.lines())}"


def _segment_missing(build: IndexBuild, *, deep: bool) -> str:
    """'' when the segment's files are here (or in the store), else what is missing."""
    label = f"{build.get_kind_display().lower()} #{build.number}"
    published = (build.parameters or {}).get("published")
    store = object_store()
    directory = (
        local_segment_dir(build) if store is None or not published else build_dir(build.corpus_id, build.pk)
    )
    if store is not None and published:
        if (directory / MANIFEST).is_file() and not (deep and verify_local(directory, published)):
            return ""
        if not deep:
            return ""  # fetched on first use; a deep check asks the store
        try:
            absent = [
                name
                for name in published
                if not store.exists(f"{build_key(build.corpus_id, build.pk)}/{name}")
            ]
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
    """What `corpus` lacks to serve, and which of its uploads are gone. `deep` also checks every
    segment file's sha256, the object store's objects and each segment's memory rows (slower:
    `manage.py check_restore`)."""
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
    _uploads_check(corpus, report)
    return report


def _uploads_check(corpus: Corpus, report: CorpusFiles) -> None:
    """Name the datasets whose upload is not where a build reads it, with the size it was uploaded
    with: under DATA_DIR, or with a store in the store (where every machine's builds fetch it
    from; one listing per corpus). Sizes, not checksums: reading every upload would make the check
    as slow as a backup, and a fetch for a build is checked whole anyway."""
    datasets = list(corpus.datasets.order_by("pk"))
    store = object_store()
    if store is None:
        for dataset in datasets:
            path = Path(settings.DATA_DIR) / dataset.file.name
            if not path.is_file() or path.stat().st_size != dataset.size:
                report.datasets.append(dataset.name)
        return
    report.uploads_place = "in the object store"
    try:
        stored = store.sizes(f"corpora/{corpus.pk}/datasets") if datasets else {}
    except ObjectStoreUnavailable as error:
        report.uploads_unknown = f"the object store cannot say whether its uploads are kept ({error.message})"
        return
    report.datasets = [d.name for d in datasets if stored.get(d.file.name) != d.size]


def corpora_files_reports(*, deep: bool = False) -> list[CorpusFiles]:
    """The report of every corpus that serves something or has datasets, and lacks what it needs."""
    corpora = Corpus.objects.filter(Q(active_build__isnull=False) | Q(datasets__isnull=False)).distinct()
    return [report for corpus in corpora.order_by("pk")
            if (report := corpus_files_report(corpus=corpus, deep=deep)).has_problems]


def corpora_files_log() -> list[CorpusFiles]:
    """At a process's start: log each corpus whose files are missing. Never stops the start (the
    pages say it and offer a rebuild); a database not migrated yet is not checked."""
    try:
        reports = corpora_files_reports()
    except DatabaseError:
        return []
    for report in reports:
        logger.warning("%s. %s", report.summary(), _advice(report))
    return reports


def _advice(report: CorpusFiles) -> str:
    if report.broken:
        return "Restore its files (manage.py restore), or rebuild it from its datasets on its page."
    return "Restore the uploads from a backup (manage.py restore), or upload them again on its page."


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
    # W010: a corpus that cannot serve; W011: one that serves but whose uploads are gone.
    return [checks.Warning(r.summary(), hint=_advice(r), id="hdrag.W010" if r.broken else "hdrag.W011")
            for r in reports]
