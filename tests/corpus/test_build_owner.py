"""A build whose worker process died is failed as soon as that is known (its task is redelivered, a new
build is started), not BUILD_STALE_SECONDS later. The dead worker is a real process that exited."""

from __future__ import annotations

import subprocess

from django.utils import timezone

from corpus.models import IndexBuild
from corpus.services.build_liveness import _proc_start_time, owner_alive, process_identity
from corpus.services.builds import build_start
from corpus.tasks import run_build

Status = IndexBuild.Status


def _dead_worker() -> str:
    """The identity a real, now exited, process had (as the build claim records it)."""
    child = subprocess.Popen(["sleep", "30"])
    identity = process_identity().rsplit(":", 2)[0] + f":{child.pid}:{_proc_start_time(child.pid)}"
    child.kill()
    child.wait()
    return identity


def _running(corpus, worker: str) -> IndexBuild:  # noqa: ANN001
    now = timezone.now()
    return IndexBuild.objects.create(
        corpus=corpus, status=Status.RUNNING, started=now, heartbeat=now, worker=worker
    )


def test_owner_alive_tells_live_dead_and_foreign_processes():
    assert owner_alive(process_identity()) is True
    assert owner_alive(_dead_worker()) is False
    assert owner_alive("another-host:1:12345") is None
    assert owner_alive("") is None


def test_a_redelivered_build_of_a_dead_worker_fails_at_once(corpus, owner, dataset):
    build = _running(corpus, _dead_worker())
    assert run_build.apply(args=[build.pk]).get() == Status.FAILED
    build.refresh_from_db()
    assert build.status == Status.FAILED and "worker process running this build died" in build.error
    assert build_start(corpus=corpus, user=owner).status == Status.QUEUED


def test_a_new_build_sweeps_a_dead_workers_build_first(corpus, owner, dataset):
    build = _running(corpus, _dead_worker())
    assert build_start(corpus=corpus, user=owner).status == Status.QUEUED
    build.refresh_from_db()
    assert build.status == Status.FAILED


def test_a_live_or_foreign_workers_build_is_left_running(corpus, owner, dataset):
    for worker in (process_identity(), "another-host:4242:99"):
        build = _running(corpus, worker)
        assert run_build.apply(args=[build.pk]).get() == "not-claimed"
        build.refresh_from_db()
        assert build.status == Status.RUNNING
        build.delete()
