"""Appends: new datasets searchable in seconds, without a full build (docs/segments.md).

A corpus's searchable state is its active (full) build plus `Corpus.active_appends`, the append
segments on top of it, oldest first. An append is an `IndexBuild` of kind "append": the same job
row (one queued or running job per corpus, so appends, builds and merges of one corpus never run
at once), the same task, heartbeat, sweep and clean-up as a build (`corpus.services.builds`,
`build_runner`, `build_liveness`), but its worker encodes only the new datasets, with the
state's frozen statistics (`engine.segments.append_segment`), and its activation appends its id
to `active_appends` in one UPDATE of the corpus row. A full build replaces the whole state (and
empties the list): that is the merge.

What a state covers: the datasets each of its segments recorded (`BuildParameters.dataset_ids`;
a build made before it recorded them covers the datasets uploaded before it started). Deleting a
dataset hides its rows at once, in every segment, through the search's dataset filter; its rows
leave at the next merge.
"""

from __future__ import annotations

from celery import current_app
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.errors import ApplicationError
from corpus.build_parameters import BuildParameters
from corpus.events import send_build_event, send_event
from corpus.models import Corpus, Dataset, IndexBuild
from corpus.segment_cache import segment_path
from corpus.services.corpora import datasets_retire_replaced
from engine.build import BuildCancelled, BuildResult

RUN_BUILD_TASK = "corpus.run_build"  # corpus.tasks.run_build: builds and appends alike
Kind, Status = IndexBuild.Kind, IndexBuild.Status


def state_segments(corpus: Corpus) -> list[IndexBuild]:
    """The segments of the corpus's state as build rows, base first."""
    ids = corpus.serving_build_ids
    rows = {b.pk: b for b in IndexBuild.objects.filter(pk__in=ids)}
    return [rows[i] for i in ids if i in rows]


def covered_dataset_ids(corpus: Corpus) -> set[int]:
    """The datasets the corpus's state holds (see the module docstring)."""
    covered: set[int] = set()
    for segment in state_segments(corpus):
        recorded = segment.params.dataset_ids
        if recorded is not None:
            covered.update(recorded)
        elif segment.started is not None:
            before = corpus.datasets.filter(uploaded_at__lte=segment.started)
            covered.update(before.values_list("pk", flat=True))
    return covered


def pending_datasets(corpus: Corpus) -> list[Dataset]:
    """The corpus's datasets that its state does not hold yet, oldest first."""
    covered = covered_dataset_ids(corpus)
    return [d for d in corpus.datasets.order_by("pk") if d.pk not in covered]


def appends_allowed(corpus: Corpus) -> bool:
    """Whether new datasets can be appended: an active build whose format and channels allow it
    (late interaction fills per-build token vectors, so its corpora take a full build)."""
    base = corpus.active_build
    return base is not None and not base.params.late_interaction and not corpus.late_interaction


def append_start(*, corpus: Corpus, user: AbstractBaseUser | None,
                 datasets: list[Dataset] | None = None) -> IndexBuild | None:
    """Queue an append of `datasets` (default: every pending one) onto the corpus's state.

    Returns the queued job, or None when there is nothing to append or another job of the corpus
    is queued or running (that job's end queues the append: `builds.after_job`)."""
    if not appends_allowed(corpus):
        raise ApplicationError("This corpus needs a full build to index new datasets "
                               "(it has no active build, or uses late interaction).")
    datasets = pending_datasets(corpus) if datasets is None else datasets
    if not datasets:
        return None
    base = corpus.active_build
    parameters = base.params.for_append(dataset_ids=[d.pk for d in datasets], base_build=base.pk,
                                        previous=[int(i) for i in corpus.active_appends or []]).to_json()
    try:
        with transaction.atomic():
            job = IndexBuild.objects.create(corpus=corpus, kind=Kind.APPEND, created_by=user,
                                            parameters=parameters)
            transaction.on_commit(lambda: current_app.signature(RUN_BUILD_TASK, args=(job.pk,)).delay())
    except IntegrityError:
        return None
    send_build_event(job, op="queued")
    return job


def append_datasets(build: IndexBuild) -> list[Dataset]:
    """The datasets an append job will encode: those it was queued for that still exist."""
    wanted = list(build.params.dataset_ids or ())
    found = {d.pk: d for d in Dataset.objects.filter(pk__in=wanted)}
    datasets = [found[i] for i in wanted if i in found]
    if not datasets:
        raise ApplicationError("its datasets were deleted before it ran")
    return datasets


def append_state(build: IndexBuild) -> list[int]:
    """The segments of the state an append job was queued on, base build first."""
    params = build.params
    return [params.base_build, *params.previous]


def append_previous_dir(build: IndexBuild) -> str:
    """The build directory of the state's newest segment when the append was queued; refuses to
    run when the state changed since (the append's rows would be numbered after the wrong rows)."""
    corpus = Corpus.objects.get(pk=build.corpus_id)
    expected = append_state(build)
    if corpus.serving_build_ids != expected:
        raise ApplicationError("the corpus's index changed since this append was queued; "
                               "its datasets will be appended to the new one")
    return str(segment_path(IndexBuild.objects.get(pk=expected[-1])))


def append_activate(*, build: IndexBuild, result: BuildResult, timings: dict,
                    parameters: BuildParameters) -> None:
    """Mark the append succeeded and add it to the corpus's state, in one transaction; its row
    records `parameters` and its segment."""
    expected = append_state(build)
    with transaction.atomic():
        row = IndexBuild.objects.select_for_update().get(pk=build.pk)
        if row.status != Status.RUNNING or row.cancel_requested:
            raise BuildCancelled(f"append {build.pk} cancelled before activation")
        corpus = Corpus.objects.select_for_update().get(pk=build.corpus_id)
        if corpus.serving_build_ids != expected:
            raise ApplicationError("the corpus's index changed while this append ran")
        IndexBuild.objects.filter(pk=build.pk).update(
            status=Status.SUCCEEDED, finished=timezone.now(), phase="done", done=result.documents,
            total=result.documents, documents=result.documents, duplicates=result.duplicates,
            vocab_size=result.vocab_size, timings=timings, heartbeat=timezone.now(),
            parameters=parameters.replace(segment=result.manifest.get("segment", {}),
                                          published=parameters.published or {}).to_json())
        Corpus.objects.filter(pk=corpus.pk).update(active_appends=[*expected[1:], build.pk])
        datasets_retire_replaced(dataset_ids=parameters.dataset_ids or [])
        for source in result.manifest["sources"]:
            Dataset.objects.filter(pk=source["source_id"]).update(record_count=source["documents"],
                                                                  record_count_exact=True)
    build.refresh_from_db()
    send_build_event(build, op="finished")
    send_event(f"corpus-{build.corpus_id}", op="activated", build_id=build.pk)


def merge_due(corpus: Corpus) -> bool:
    """Whether the state should be merged into one full build: more than SEGMENT_LIMIT segments,
    or appends holding more than SEGMENT_MERGE_PERCENT % of the full build's documents."""
    segments = state_segments(corpus)
    if len(segments) <= 1:
        return False
    if len(segments) > settings.SEGMENT_LIMIT:
        return True
    appended = sum(s.documents or 0 for s in segments[1:])
    return appended * 100 > settings.SEGMENT_MERGE_PERCENT * max(segments[0].documents or 0, 1)
