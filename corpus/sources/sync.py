"""One sync of a source: read what changed, store it as datasets, index it in one job.

A sync compares each document of the source with what the corpus holds for its path:

* new: stored as a dataset and appended;
* changed (another content hash): stored as a dataset that *replaces* the old one
  (`Dataset.replaces`): the old one serves until the append holding the new one activates, and
  that activation deletes it in the same transaction (`datasets_retire_replaced`), so no search
  sees both versions or neither;
* removed at the source: its dataset is deleted (hidden from searches at once, its rows leave at
  the next merge);
* unchanged: not read past its version or hash.

The index changes through the corpus's one job at a time (an append, or the first build), so a
sync never interleaves with a build or merge of the corpus. Nothing is changed before the source
was read to the end: an unreachable source fails the sync with its reason on the row and the
corpus keeps every document; one that would remove more than half of the source's documents stops
for the owner's confirmation. A document that cannot be read or stored is named in `failures` and
keeps its old version.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path, PurePosixPath

from django.conf import settings
from django.core.files import File
from django.db import transaction
from django.utils import timezone

from core.outbound import OutboundRefused, OutboundUnresolved
from corpus.events import corpus_group, send_event
from corpus.models import Corpus, Dataset
from corpus.services.appends import append_start, appends_allowed, covered_dataset_ids
from corpus.services.builds import BuildAlreadyActive, build_start
from corpus.services.corpora import DatasetRejected, dataset_delete, dataset_upload
from corpus.sources.folder import FolderReader
from corpus.sources.git import GitReader
from corpus.sources.models import Source, SourceDocument
from corpus.sources.readers import readers_apply
from corpus.sources.reading import Fetched, Known, PathFilter, Reader, Scan, SourceRefused, SourceUnavailable
from corpus.sources.s3 import S3Reader
from corpus.sources.selectors import source_state
from corpus.sources.web import WebReader

logger = logging.getLogger(__name__)
PROGRESS_INTERVAL = 0.5


def source_reader(source: Source) -> Reader:
    filters = PathFilter.from_text(source.include, source.exclude)
    if source.kind == Source.Kind.FOLDER:
        return FolderReader(location=source.location, filters=filters, posix_groups=source.posix_groups)
    if source.kind == Source.Kind.GIT:
        return GitReader(
            url=source.location,
            branch=source.branch,
            token=source.token,
            clone_dir=Path(settings.DATA_DIR) / "sources" / str(source.pk) / "clone.git",
            filters=filters,
        )
    if source.kind == Source.Kind.WEB:
        return WebReader(
            start_url=source.location,
            path_prefix=source.path_prefix,
            sitemap_url=source.sitemap_url,
            max_pages=source.max_pages,
            max_depth=source.max_depth,
            filters=filters,
        )
    return S3Reader(
        location=source.location, endpoint_url=source.endpoint_url, token=source.token, filters=filters
    )


class _Progress:
    def __init__(self, source: Source) -> None:
        self.source, self.last = source, 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last < PROGRESS_INTERVAL:
            return
        self.last = now
        Source.objects.filter(pk=self.source.pk).update(done=done, total=total)
        self.source.done, self.source.total = done, total
        send_event(corpus_group(self.source.corpus_id), op="source", source=source_state(self.source))


def source_sync_run(*, source_id: int, confirm: bool = False) -> Source | None:
    """Run a queued sync to its end; None when there was nothing to claim (a redelivered task).
    Never raises for a failing source: the reason is stored on its row."""
    now = timezone.now()
    if not Source.objects.filter(pk=source_id, status=Source.Status.QUEUED).update(
            status=Source.Status.RUNNING, sync_started=now, sync_finished=None, error="", done=0, total=0):
        return None
    source = Source.objects.select_related("corpus", "created_by").get(pk=source_id)
    started = time.monotonic()
    workdir = Path(settings.DATA_DIR) / "tmp" / f"source-{source.pk}-{int(started * 1000)}"
    outcome: dict = {"failures": []}
    try:
        known = {d.path: Known(d.sha256, d.version) for d in source.documents.all()}
        progress = _Progress(source)
        scan = source_reader(source).scan(known=known, workdir=workdir, progress=progress)
        removed = sorted(set(known) - scan.present)
        if known and len(removed) * 2 > len(known) and not confirm:
            outcome |= {"status": Source.Status.CONFIRM, "error": (
                f"This sync would remove {len(removed)} of the source's {len(known)} documents; nothing was "
                "changed. If the source really lost them, confirm the sync.")}
        else:
            outcome |= _apply(source, scan, removed, progress) | {"status": Source.Status.SUCCEEDED}
            outcome["failures"] = [{"name": n, "reason": r} for n, r in [*scan.failed, *outcome["failures"]]]
            if source.cursor != scan.cursor:
                outcome["cursor"] = scan.cursor
    except (SourceUnavailable, SourceRefused, OutboundRefused, OutboundUnresolved) as error:
        outcome |= {"status": Source.Status.FAILED, "error": error.message}
    except Exception as error:  # noqa: BLE001 - the row says it failed; the log has the trace
        logger.exception("sync of source %s failed", source.pk)
        # Only the type: an exception's text may quote what was fetched.
        reason = f"{type(error).__name__} (the log has the details)"
        outcome |= {"status": Source.Status.FAILED, "error": reason}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    Source.objects.filter(pk=source.pk).update(sync_finished=timezone.now(),
                                               sync_seconds=round(time.monotonic() - started, 3), **outcome)
    source.refresh_from_db()
    send_event(corpus_group(source.corpus_id), op="source", source=source_state(source))
    return source


def _apply(source: Source, scan: Scan, removed: list[str], progress: _Progress) -> dict:
    """Store the new and changed documents, delete the removed ones, queue the job that indexes
    them. Returns the counts and the documents that could not be stored."""
    documents = {d.path: d for d in source.documents.select_related("dataset", "dataset__replaces")}
    covered = covered_dataset_ids(source.corpus)
    counts = {"added": 0, "changed": 0, "removed": 0, "failures": []}
    for number, fetched in enumerate(scan.fetched):
        progress(number, len(scan.fetched))
        document = documents.get(fetched.path)
        if document is not None and document.sha256 == fetched.sha256 and document.dataset is not None:
            SourceDocument.objects.filter(pk=document.pk).update(version=fetched.version, url=fetched.url)
            if source.posix_groups:  # the same content, maybe another group
                document.version = fetched.version
                readers_apply(source, [document])
            continue
        try:
            _store(source, fetched, document, covered)
        except DatasetRejected:
            # The upload check's reason may quote the document; a source's failure never does.
            reason = f"not a readable {fetched.file.suffix or 'text'} document"
            counts["failures"].append((fetched.path, reason))
            continue
        counts["changed" if document is not None else "added"] += 1
    for path in removed:
        document = documents[path]
        with transaction.atomic():
            _forget(document.dataset)
            document.delete()
        counts["removed"] += 1
    if counts["added"] or counts["changed"]:
        _index(source.corpus)
    return counts


def _store(source: Source, fetched: Fetched, document: SourceDocument | None, covered: set[int]) -> None:
    """One new or changed document as a dataset, with its SourceDocument row, in one transaction."""
    current = document.dataset if document is not None else None
    replaces = current
    if current is not None and current.pk not in covered:
        # The current version was never served (its job has not run): the new one replaces what serves.
        replaces = current.replaces
    with transaction.atomic():
        if replaces is not None and replaces.sha256 == fetched.sha256:
            dataset = replaces  # back to the version that serves
        else:
            name = PurePosixPath(fetched.path).name or "index"
            if PurePosixPath(name).suffix.lower() != fetched.file.suffix:
                name += fetched.file.suffix
            with open(fetched.file, "rb") as handle:
                dataset = dataset_upload(corpus=source.corpus, user=source.created_by, replaces=replaces,
                                         uploaded_file=File(handle, name=name), name=name)
            # Upload names are base names; a source's document is named by its path.
            dataset.name = f"{source.name}/{fetched.path}"[-255:]
            Dataset.objects.filter(pk=dataset.pk).update(name=dataset.name)
        if current is not None and current.pk != dataset.pk and current.pk not in covered:
            dataset_delete(dataset=current)
        stored, _ = SourceDocument.objects.update_or_create(source=source, path=fetched.path, defaults={
            "dataset": dataset, "sha256": fetched.sha256, "version": fetched.version, "url": fetched.url})
        readers_apply(source, [stored])  # in the same transaction: never searchable without its readers


def _forget(dataset: Dataset | None) -> None:
    """A removed document's dataset leaves at once, with the version it was waiting to replace."""
    if dataset is None:
        return
    if dataset.replaces is not None:
        dataset_delete(dataset=dataset.replaces)
    dataset_delete(dataset=dataset)


def _index(corpus: Corpus) -> None:
    """Queue the job that makes the stored documents searchable: the first build, or an append (a
    full build for a late-interaction corpus). When another job of the corpus runs, its end
    appends them (`builds.after_job`)."""
    corpus = Corpus.objects.select_related("active_build").get(pk=corpus.pk)
    try:
        if corpus.active_build_id is None or not appends_allowed(corpus):
            build_start(corpus=corpus, user=None)
        else:
            append_start(corpus=corpus, user=None)
    except BuildAlreadyActive:
        logger.info("corpus %s: a job runs; its end indexes the synced documents", corpus.pk)
