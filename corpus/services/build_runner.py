"""The body of the build task (`corpus.tasks.run_build`): claim a queued build or append, run its
phases, and activate it, or end it through `build_liveness.build_discard`.

* A job is a list of phases declared as data (`PIPELINES`, the phases: `build_phases`): a full
  build reads the corpus's datasets, loads the model, encodes the index, checks its rows, writes
  its channels (late interaction, or exact words) and publishes; an append reads its new datasets,
  loads the same model by identity, encodes a segment on the state's statistics, checks its rows,
  writes its meaning rows where its state has them and publishes. One runner runs either list.
  After a job serves, its state's segments without meaning rows are read in the background
  (`corpus.services.meaning_jobs`).
* A build runs once: the task claims its row with a conditional UPDATE queued -> running, so a
  redelivered or duplicated task message finds nothing to claim and does nothing.
* A job is visible to searches only after it completed, its memory rows are in and it verified:
  then one UPDATE of the corpus row, in the same transaction as the status change (a full build
  replaces the state, an append adds its segment). A failure, cancellation or dead worker never
  touches the state; the failed job's files and memory rows are removed and its error stays on the row.
* While it runs, `build_liveness.BuildHeartbeat` keeps its heartbeat fresh and
  `build_phases.BuildReporter` writes its progress and watches for a cancellation, which the
  runner also checks between phases.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from corpus.build_parameters import BuildParameters
from corpus.chroma import store_for
from corpus.events import send_build_event, send_event
from corpus.models import Corpus, Dataset, IndexBuild
from corpus.services.appends import append_activate
from corpus.services.build_liveness import (
    BuildHeartbeat,
    build_discard,
    builds_sweep_dead_owners,
    process_identity,
)
from corpus.services.build_phases import (
    AppendDatasets,
    BuildJob,
    BuildReporter,
    CheckRows,
    CorpusDatasets,
    EncodeBuild,
    EncodeSegment,
    FetchDatasets,
    FillLateInteraction,
    LoadModel,
    MeaningRows,
    Phase,
    Publish,
    WordChannel,
)
from corpus.services.builds import after_job, corpus_parameters
from corpus.services.corpora import datasets_retire_replaced
from corpus.services.meaning_jobs import meaning_queue
from engine.build import BuildCancelled
from engine.text_store import text_store_prune

logger = logging.getLogger(__name__)
Kind, Status = IndexBuild.Kind, IndexBuild.Status


def build_run(*, build_id: int) -> IndexBuild | None:
    """Run a queued build to the end. Returns None when there was nothing to claim (already
    claimed by another delivery, cancelled while queued, or deleted). Never raises for a failing
    build: the error is stored on the row."""
    now = timezone.now()
    claimed = IndexBuild.objects.filter(pk=build_id, status=Status.QUEUED).update(
        status=Status.RUNNING, started=now, heartbeat=now, phase="starting", worker=process_identity())
    if not claimed:
        # A redelivery after the pool child running it was killed (acks late, rejected on worker
        # loss) finds its build "running": fail it now rather than after BUILD_STALE_SECONDS.
        if builds_sweep_dead_owners(IndexBuild.objects.filter(pk=build_id)):
            return IndexBuild.objects.get(pk=build_id)
        logger.info("build %s: nothing to claim (already claimed, cancelled or deleted)", build_id)
        return None
    build = IndexBuild.objects.select_related("corpus").get(pk=build_id)
    send_build_event(build, op="started")
    heartbeat = BuildHeartbeat(build.pk)
    heartbeat.start()
    try:
        _run(build, PIPELINES[build.kind])
    except BuildCancelled:
        build_discard(build, status=Status.CANCELLED, error="Cancelled.")
    except Exception as error:
        logger.exception("build %s of corpus %s failed", build.pk, build.corpus_id)
        build_discard(build, status=Status.FAILED, error=f"{type(error).__name__}: {error}")
    finally:
        heartbeat.stopped.set()
        heartbeat.join()
    build.refresh_from_db()
    if build.status == Status.SUCCEEDED:
        meaning_queue(corpus_id=build.corpus_id)  # its segments without meaning rows, in the background
        after_job(corpus_id=build.corpus_id)
    return build


@dataclass(frozen=True)
class Pipeline:
    """A kind of job declared as data: its phases, in order; how it becomes the corpus's state
    (`activate(job, timings)`, one transaction that raises BuildCancelled when the job was cancelled
    meanwhile); then what follows the switch (phases that must not fail: the job already serves)."""

    phases: tuple[Phase, ...]
    activate: Callable[[BuildJob, dict[str, float]], None]
    after: tuple[Phase, ...] = ()


def _run(build: IndexBuild, pipeline: Pipeline) -> None:
    """Run `pipeline` on a claimed job: its phases, a cancellation check before each, then its
    activation, timed with the rest, and what follows it."""
    job = BuildJob(build=build, reporter=BuildReporter(build),
                   values=build.params if build.parameters else corpus_parameters(build.corpus))
    for phase in pipeline.phases:
        if job.reporter.should_cancel():
            raise BuildCancelled(f"{build.kind} {build.pk} cancelled")
        if phase.applies(job):
            phase.run(job)
    if job.reporter.should_cancel():
        raise BuildCancelled(f"{build.kind} {build.pk} cancelled")
    job.reporter.close_phase()
    timings = {**job.result.manifest.get("timings", {}),
               **{f"portal_{name}": seconds for name, seconds in job.reporter.timings.items()},
               "memory_insert": round(job.writer.seconds, 3),
               "memory_rows_per_second": round(job.writer.rows_per_second)}
    activation = time.monotonic()
    pipeline.activate(job, timings)
    # The switch itself, so the phases on the stats page add up to the whole job.
    timings["portal_activation"] = round(time.monotonic() - activation, 3)
    IndexBuild.objects.filter(pk=build.pk).update(timings=timings)
    for phase in pipeline.after:
        if phase.applies(job):
            phase.run(job)


def _activate_append(job: BuildJob, timings: dict[str, float]) -> None:
    append_activate(build=job.build, result=job.result, timings=timings, parameters=job.values)


class PruneTextRecords(Phase):
    """Drop older builds' late-interaction records once this build serves, where it or the build it
    replaced had the channel. Only logged on failure: no search reads them (searches filter on the
    active build), and the next switch prunes again."""

    def applies(self, job: BuildJob) -> bool:
        return job.values.late_interaction or job.replaced.late_interaction

    def run(self, job: BuildJob) -> None:
        corpus_id, keep = job.build.corpus_id, job.build.pk
        try:
            pruned = text_store_prune(store=store_for(corpus_id), keep_build_ids=[keep])
        except Exception:  # noqa: BLE001 - the new build is active and correct; leftovers only cost space
            logger.warning("corpus %s: pruning text records of builds other than %s failed", corpus_id, keep,
                           exc_info=True)
        else:
            logger.info("corpus %s: pruned %d text records of builds other than %s", corpus_id, pruned, keep)


def _activate_build(job: BuildJob, timings: dict[str, float]) -> None:
    """Mark the build succeeded and make it the corpus's active build, in one transaction, then
    tell the pages. `job.replaced`: the parameters of the build it replaced (all defaults for none)."""
    build, result, parameters = job.build, job.result, job.values
    corpus_id = build.corpus_id
    counts = {s["source_id"]: s["documents"] for s in result.manifest["sources"]}
    with transaction.atomic():
        # Locked, so a cancel or sweep racing with activation either lands before (we stop) or
        # finds the build succeeded (and leaves it alone).
        row = IndexBuild.objects.select_for_update().get(pk=build.pk)
        if row.status != Status.RUNNING or row.cancel_requested:
            raise BuildCancelled(f"build {build.pk} cancelled before activation")
        previous = BuildParameters.from_json(
            Corpus.objects.filter(pk=corpus_id).values_list("active_build__parameters", flat=True).first())
        IndexBuild.objects.filter(pk=build.pk).update(
            status=Status.SUCCEEDED, finished=timezone.now(), phase="done", done=result.documents,
            total=result.documents, documents=result.documents, duplicates=result.duplicates,
            vocab_size=result.vocab_size, timings=timings, parameters=parameters.to_json(),
            heartbeat=timezone.now())
        # A full build holds every dataset: it replaces the whole state, appends included (a merge).
        Corpus.objects.filter(pk=corpus_id).update(active_build_id=build.pk, active_appends=[])
        datasets_retire_replaced(dataset_ids=parameters.dataset_ids or [])
        for dataset_id, documents in counts.items():
            Dataset.objects.filter(pk=dataset_id).update(record_count=documents, record_count_exact=True)
    build.refresh_from_db()
    send_build_event(build, op="finished")
    send_event(f"corpus-{corpus_id}", op="activated", build_id=build.pk)
    job.replaced = previous


# The two kinds of job (paperless-ngx's consume plugins are the model: a pipeline as a list). The
# document readers of other formats go after FetchDatasets; a phase applies only where its corpus
# setting is on (late interaction and the exact words are alternatives).
PIPELINES = {
    Kind.BUILD: Pipeline(
        phases=(CorpusDatasets(), FetchDatasets(), LoadModel(), EncodeBuild(), CheckRows(),
                FillLateInteraction(), WordChannel(), Publish()),
        activate=_activate_build, after=(PruneTextRecords(),)),
    Kind.APPEND: Pipeline(
        phases=(AppendDatasets(), FetchDatasets(), LoadModel(), EncodeSegment(), CheckRows(),
                MeaningRows(), Publish()),
        activate=_activate_append),
}
