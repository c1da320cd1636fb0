"""The runner of builds and appends (corpus.services.build_runner): two lists of the same phases,
one skeleton, one way to find the model. Real builds on the real Gemma tokenizer, tasks inline."""

from __future__ import annotations

import dataclasses

import pytest

from core.runtime import default_gguf
from corpus.models import IndexBuild, Memory
from corpus.services import build_runner
from corpus.services.appends import append_start
from corpus.services.build_phases import BuildJob, FetchDatasets, Phase
from corpus.services.build_runner import PIPELINES, build_run
from corpus.services.builds import build_cancel, build_start
from corpus.serving import model_identity
from tests.plugins.portal import TEXTS, build_now, upload

pytestmark = pytest.mark.service  # PostgreSQL
Kind, Status = IndexBuild.Kind, IndexBuild.Status
NEW = ["Quokkas are small marsupials that live on Rottnest Island off the coast of Western Australia."]


@dataclasses.dataclass
class Reading(Phase):
    """A reader of another format would stand here: it sees the job's datasets and reports a phase."""

    seen: list[tuple[str, list[str]]]

    def run(self, job: BuildJob) -> None:
        job.reporter.progress("reading", 0, len(job.datasets))
        self.seen.append((job.build.kind, [d.name for d in job.datasets]))
        job.reporter.progress("reading", len(job.datasets), len(job.datasets))


class CancelHere(Phase):
    """The user cancels between two phases."""

    def run(self, job: BuildJob) -> None:
        build_cancel(build=IndexBuild.objects.get(pk=job.build.pk))
        job.reporter.last_cancel_check = 0.0  # the throttle would wait half a second to look again


def inserted(kind: str, phase: Phase, *, after: type[Phase]) -> build_runner.Pipeline:
    pipeline = PIPELINES[kind]
    at = next(i for i, p in enumerate(pipeline.phases) if type(p) is after) + 1
    return dataclasses.replace(pipeline, phases=(*pipeline.phases[:at], phase, *pipeline.phases[at:]))


def test_a_phase_in_both_lists_runs_in_a_build_and_an_append(corpus, owner, dataset, monkeypatch,
                                                              django_capture_on_commit_callbacks):
    seen: list[tuple[str, list[str]]] = []
    reading = Reading(seen)
    monkeypatch.setitem(PIPELINES, Kind.BUILD, inserted(Kind.BUILD, reading, after=FetchDatasets))
    monkeypatch.setitem(PIPELINES, Kind.APPEND, inserted(Kind.APPEND, reading, after=FetchDatasets))
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == Status.SUCCEEDED, build.error
    new = upload(corpus, owner, NEW, name="new.jsonl")
    with django_capture_on_commit_callbacks(execute=True):
        append = append_start(corpus=corpus, user=owner)
    append.refresh_from_db()
    assert append.status == Status.SUCCEEDED, append.error
    assert seen == [(Kind.BUILD, [dataset.name]), (Kind.APPEND, [new.name])]
    # The runner's skeleton is the same for both: the phase's time and the switch's are on each row.
    for job in (build, append):
        assert {"portal_reading", "portal_activation", "memory_insert"} <= set(job.timings), job.timings


def test_a_cancellation_between_phases_stops_before_the_next(corpus, owner, dataset, monkeypatch,
                                                             django_capture_on_commit_callbacks):
    first = build_now(corpus, owner, django_capture_on_commit_callbacks)
    seen: list[tuple[str, list[str]]] = []
    monkeypatch.setitem(PIPELINES, Kind.BUILD, inserted(Kind.BUILD, CancelHere(), after=FetchDatasets))
    monkeypatch.setitem(PIPELINES, Kind.BUILD, inserted(Kind.BUILD, Reading(seen), after=CancelHere))
    second = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert second.status == Status.CANCELLED and second.error == "Cancelled."
    assert seen == [] and second.build_dir == ""  # LoadModel, after it, never ran
    assert corpus.active_build_id == first.pk and not Memory.objects.filter(build=second).exists()


def test_a_build_queued_elsewhere_finds_the_packaged_model_here_and_its_append_the_same(
        corpus, owner, dataset, django_capture_on_commit_callbacks):
    """A web process on another machine queued the build with its own path of the packaged model:
    the worker finds the model here, and records it by identity; the append resolves it by that
    identity, the same way."""
    with django_capture_on_commit_callbacks(execute=False):
        queued = build_start(corpus=corpus, user=owner)
    elsewhere = "/elsewhere/models/" + default_gguf().name
    IndexBuild.objects.filter(pk=queued.pk).update(parameters={**queued.parameters, "gguf_path": elsewhere})
    build = build_run(build_id=queued.pk)
    assert build.status == Status.SUCCEEDED, build.error
    identity = model_identity(default_gguf())
    assert build.parameters["gguf_path"] == str(default_gguf()) != elsewhere
    assert {k: build.parameters[k] for k in identity} == identity
    upload(corpus, owner, NEW, name="new.jsonl")
    corpus.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        append = append_start(corpus=corpus, user=owner)
    append.refresh_from_db()
    assert append.status == Status.SUCCEEDED, append.error
    assert {k: append.parameters[k] for k in identity} == identity
    assert append.documents == len(NEW) and build.documents == len(TEXTS)
