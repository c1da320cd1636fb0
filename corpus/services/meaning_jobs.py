"""The meaning channel read in the background (`engine.meaning`): a corpus is searchable by HDC and
words as soon as its build serves; its segments are then read by the sentence encoder, one at a
time, by `corpus.tasks.encode_meaning` on a queue of its own (`settings.CELERY_MEANING_QUEUE`).

* Its own queue, not a priority: Celery's priorities order the messages waiting in a queue, but a
  worker slot that has taken a corpus's encoding (minutes to hours on two cores) is held until it
  ends, so a build or append queued after it would wait whatever its priority. A worker of its own
  (Procfile's `meaning`, one task at a time, started by `./portal run` with the rest) never holds
  a slot of the build worker; its encoder shares the cores with builds and searches.
* After a full build or an append serves (`meaning_queue`, called by the build runner), every
  segment of the state without meaning rows is marked pending on its row (`IndexBuild.meaning`)
  and the task queued. An append whose state's segments are all read reads its own memories
  before it serves (`build_phases.MeaningRows`), so the state stays whole.
* The task (`meaning_run`) is idempotent and resumable: it claims one segment at a time with a
  conditional UPDATE (pending, or running under a worker that is gone or silent for
  `BUILD_STALE_SECONDS`), reads only segments without rows (a file already there with the right
  count is taken as it is), writes the file atomically, and records its progress on the row
  (memories read, the encoder's seconds: the pages' rate and time left). A redelivered or second
  task finds nothing to claim. A segment that stops serving (a full build replaced the state) is
  dropped mid-way. Reading the base build also measures the rule searches fuse the channel under
  (`engine.gate.channel_evidence` on its own held-out self-queries), as the build did when it read
  its memories inline: until then searches use HDC and words, and after it rows not read yet are
  absent from the channel's ranking (`engine.meaning.MeaningIndex.partial`).
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from pathlib import Path

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from corpus.events import corpus_group, send_event
from corpus.memory_rows import build_memory_texts
from corpus.models import Corpus, IndexBuild
from corpus.object_store import build_key, object_store
from corpus.services.build_liveness import owner_alive, process_identity
from corpus.services.build_phases import BuildJob, BuildReporter
from corpus.services.builds import meaning_rate
from corpus.serving import model_for, tokenizer_for
from engine.channels import MEANING, WORDS
from engine.gate import channel_evidence
from engine.lexical import WordIndex
from engine.meaning import MEANING_FILE, MeaningChannel, MeaningError, MeaningIndex, write_meaning

logger = logging.getLogger(__name__)
MEANING_TASK = "corpus.tasks.encode_meaning"
Meaning = IndexBuild.Meaning
UNREAD = (Meaning.NONE, Meaning.FAILED)


def meaning_wanted(build: IndexBuild | None) -> bool:
    """A serving build whose corpus reads by meaning: its own parameters say (the setting applies
    from the build that recorded it; late interaction has no word channel to follow)."""
    if build is None:
        return False
    params = build.params
    return bool(params.meaning_channel and not params.late_interaction)


def meaning_queue(*, corpus_id: int) -> int:
    """Mark the state's segments without meaning rows pending and queue the task once committed.
    Returns how many segments wait; 0 (nothing queued) for a corpus without the channel."""
    corpus = Corpus.objects.select_related("active_build").get(pk=corpus_id)
    if not meaning_wanted(corpus.active_build):
        return 0
    serving = corpus.serving_build_ids
    segments = IndexBuild.objects.filter(pk__in=serving)
    segments.filter(meaning__in=UNREAD).update(meaning=Meaning.PENDING, meaning_error="")
    waiting = segments.filter(meaning__in=(Meaning.PENDING, Meaning.RUNNING)).count()
    if waiting:
        transaction.on_commit(lambda: current_app.signature(MEANING_TASK, args=(corpus_id,)).delay())
    return waiting


def meaning_run(*, corpus_id: int, segments: int | None = None) -> int:
    """Read the corpus's waiting segments by meaning, base first, one claim at a time (at most
    `segments` of them; None: all). Returns how many it took up; never raises for a segment
    that fails (its error stays on its row)."""
    read = 0
    while segments is None or read < segments:
        corpus = Corpus.objects.filter(pk=corpus_id).first()
        if corpus is None:
            return read
        segment = _claim(corpus.serving_build_ids)
        if segment is None:
            return read
        try:
            _read(segment, base=segment.pk == corpus.active_build_id)
        except Exception as error:
            logger.exception("build %s of corpus %s: reading by meaning failed", segment.pk, corpus_id)
            IndexBuild.objects.filter(pk=segment.pk, meaning=Meaning.RUNNING).update(
                meaning=Meaning.FAILED, meaning_error=f"{type(error).__name__}: {error}"[:10000])
        read += 1
        _tell(corpus_id)
    return read


def _claim(serving: list[int]) -> IndexBuild | None:
    """The first segment of `serving` that waits, claimed by this process (a conditional UPDATE:
    another task claiming it at once finds nothing); None when none waits."""
    stale = timezone.now() - timedelta(seconds=settings.BUILD_STALE_SECONDS)
    rows = IndexBuild.objects.filter(pk__in=serving, status=IndexBuild.Status.SUCCEEDED).filter(
        Q(meaning=Meaning.PENDING) | Q(meaning=Meaning.RUNNING))
    by_id = {row.pk: row for row in rows}
    for build_id in serving:
        row = by_id.get(build_id)
        if row is None:
            continue
        beat = row.meaning_heartbeat
        lapsed = beat is None or beat < stale or owner_alive(row.meaning_worker) is False
        if row.meaning == Meaning.RUNNING and not lapsed:
            continue  # another live task reads it
        claim = IndexBuild.objects.filter(pk=row.pk, meaning=row.meaning, meaning_heartbeat=beat)
        if claim.update(meaning=Meaning.RUNNING, meaning_heartbeat=timezone.now(),
                        meaning_worker=process_identity(), meaning_done=0,
                        meaning_total=row.documents or 0, meaning_seconds=0.0, meaning_error=""):
            row.refresh_from_db()
            return row
    return None


def _mine(build: IndexBuild) -> QuerySet[IndexBuild]:
    """The segment's row while this task's claim holds (another task may have taken it over)."""
    return IndexBuild.objects.filter(pk=build.pk, meaning=Meaning.RUNNING,
                                     meaning_worker=build.meaning_worker)


class _Progress:
    """The row's progress and heartbeat, written at most every `BUILD_PROGRESS_INTERVAL`; whether the
    segment still serves and is still this task's, asked as often (False: stop)."""

    def __init__(self, build: IndexBuild) -> None:
        self.build, self.started, self.last, self.stopped = build, time.monotonic(), 0.0, False

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last < settings.BUILD_PROGRESS_INTERVAL and done < total:
            return
        self.last = now
        self.stopped = not _mine(self.build).update(meaning_done=done, meaning_total=total,
                                       meaning_heartbeat=timezone.now(),
                                       meaning_seconds=round(now - self.started, 3))
        if not self.stopped:
            corpus = Corpus.objects.filter(pk=self.build.corpus_id).first()
            self.stopped = corpus is None or self.build.pk not in corpus.serving_build_ids
            _tell(self.build.corpus_id)

    def should_cancel(self) -> bool:
        return self.stopped


def _read(build: IndexBuild, *, base: bool) -> None:
    """One claimed segment: its rows (read unless a whole file is there), published beside its
    other files, the base build's fusion rule measured, then the row marked read."""
    directory, total = Path(build.build_dir), build.documents or 0
    first_row = int((build.params.segment or {}).get("row_offset", 0))
    index = _existing(directory, total)
    progress = _Progress(build)
    if index is None:
        progress(0, total)
        texts = build_memory_texts(build_id=build.pk, first_row=first_row)
        index = write_meaning(texts, directory, total=total, progress=progress,
                              should_cancel=progress.should_cancel)
        if index is None:
            logger.info("build %s: reading by meaning stopped (no longer serving, or claimed again)",
                        build.pk)
            _mine(build).update(meaning=Meaning.NONE, meaning_done=0)
            return
    values = build.params
    if base and values.meaning_fusion is None:
        values = values.replace(meaning_fusion=_measure_rule(build, index))
    published = _publish(build, directory / MEANING_FILE)
    if published:
        values = values.replace(published={**(values.published or {}), **published})
    _mine(build).update(
        meaning=Meaning.DONE, meaning_done=total, meaning_total=total, parameters=values.to_json(),
        meaning_seconds=round(time.monotonic() - progress.started, 3), meaning_heartbeat=timezone.now())


def _existing(directory: Path, total: int) -> MeaningIndex | None:
    """The segment's meaning rows already written (a task that died after writing them), if whole."""
    try:
        index = MeaningIndex.for_build(directory)
    except MeaningError:
        return None
    return index if index is not None and index.count == total else None


def _measure_rule(build: IndexBuild, index: MeaningIndex):  # engine.fusion.FusionChoice
    """How searches fuse the channel with HDC and words, from the build's own self-queries."""
    job = BuildJob(build=build, reporter=BuildReporter(build), values=build.params)
    job.out_dir = Path(build.build_dir)
    job.tokenizer = tokenizer_for(model_for(job.values))
    target = job.target(channels={WORDS: WordIndex.for_build(job.out_dir), MEANING: MeaningChannel(index)},
                        rules={WORDS: job.values.word_fusion} if job.values.word_fusion else {})
    return channel_evidence(retriever=job.retriever(), target=target, channel=MEANING)


def _publish(build: IndexBuild, path: Path) -> dict[str, dict]:
    """The meaning file in the object store beside the build's others (`BUILD_STORAGE_URL`)."""
    store = object_store()
    if store is None:
        return {}
    return {path.name: store.put(f"{build_key(build.corpus_id, build.pk)}/{path.name}", path)}


def _tell(corpus_id: int) -> None:
    send_event(corpus_group(corpus_id), op="meaning", meaning=meaning_state(corpus_id))


def meaning_state(corpus_id: int) -> dict:
    """The state's meaning phase, JSON-safe: its segments read and waiting, memories read of all,
    the encoder's rate on them and the time left at that rate (None before it has one)."""
    corpus = Corpus.objects.filter(pk=corpus_id).first()
    serving = corpus.serving_build_ids if corpus is not None else []
    rows = list(IndexBuild.objects.filter(pk__in=serving).values(
        "meaning", "meaning_done", "meaning_seconds", "documents", "meaning_error"))
    statuses = [row["meaning"] for row in rows]
    total = sum(row["documents"] or 0 for row in rows if row["meaning"])
    done = sum((row["documents"] or 0) if row["meaning"] == Meaning.DONE else row["meaning_done"]
               for row in rows if row["meaning"])
    seconds = sum(row["meaning_seconds"] for row in rows if row["meaning"] in (Meaning.DONE, Meaning.RUNNING))
    read = sum(row["meaning_done"] for row in rows if row["meaning"] == Meaning.RUNNING) + sum(
        row["documents"] or 0 for row in rows if row["meaning"] == Meaning.DONE and row["meaning_seconds"])
    rate = read / seconds if seconds > 0 and read else (meaning_rate()[0] if total > done else None)
    return {"segments": sum(1 for s in statuses if s), "segments_read": statuses.count(Meaning.DONE),
            "waiting": sum(1 for s in statuses if s in (Meaning.PENDING, Meaning.RUNNING)),
            "failed": statuses.count(Meaning.FAILED), "done": done, "total": total,
            "rate": round(rate, 1) if rate else None,
            "seconds_left": round((total - done) / rate) if rate and total > done else 0,
            "errors": [row["meaning_error"] for row in rows if row["meaning_error"]]}


def meaning_resume() -> int:
    """A meaning worker's start: queue the task again for every corpus with a segment waiting or
    left running by a worker that is gone (its claim lapses; see `_claim`). Returns the corpora."""
    corpora = sorted(set(IndexBuild.objects.filter(meaning__in=(Meaning.PENDING, Meaning.RUNNING))
                         .values_list("corpus_id", flat=True)))
    for corpus_id in corpora:
        current_app.signature(MEANING_TASK, args=(corpus_id,)).delay()
    return len(corpora)
