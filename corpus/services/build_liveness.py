"""Whether a running build still has a worker, and ending the ones that lost it.

* A running build writes a heartbeat every BUILD_HEARTBEAT_SECONDS from a side thread
  (`BuildHeartbeat`). One whose heartbeat is older than BUILD_STALE_SECONDS lost its worker
  (killed, machine gone); the sweep (`builds_sweep_stale`: on worker start, before each new build,
  `manage.py builds_sweep`) marks it failed and cleans it, which also frees the corpus for a new build.
* A build also records the process running it (`process_identity`: host, pid and the start time
  `/proc` gives); when that process is on the same host and gone (`owner_alive`), the sweep and a
  redelivery of its task fail it at once, without waiting for BUILD_STALE_SECONDS.
* `build_discard` is the one way a build that will never serve ends (failed, cancelled, swept):
  its error on the row, its memory rows, text records and files removed.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import threading
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.db.models import Q, QuerySet
from django.utils import timezone

from corpus.chroma import store_for
from corpus.events import send_build_event
from corpus.files import build_dir
from corpus.memory_rows import memories_delete_for_build
from corpus.models import IndexBuild
from corpus.object_store import unpublish_build
from corpus.serving import forget_build
from engine.text_store import text_store_delete_build

logger = logging.getLogger(__name__)
Status = IndexBuild.Status


class BuildHeartbeat(threading.Thread):
    """Touches the build's heartbeat while the build runs; dies with the worker, which is the point."""

    def __init__(self, build_id: int) -> None:
        super().__init__(name=f"build-{build_id}-heartbeat", daemon=True)
        self.build_id = build_id
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopped.wait(settings.BUILD_HEARTBEAT_SECONDS):
                try:
                    IndexBuild.objects.filter(pk=self.build_id, status=Status.RUNNING).update(
                        heartbeat=timezone.now()
                    )
                except Exception:  # noqa: BLE001 - a missed beat is retried; the build must go on
                    logger.warning("heartbeat of build %s failed", self.build_id, exc_info=True)
        finally:
            connection.close()


def build_discard(build: IndexBuild, *, status: str, error: str) -> None:
    """End a build that will never serve: store the error, then drop its memory rows and files."""
    IndexBuild.objects.filter(pk=build.pk, status=Status.RUNNING).update(
        status=status, error=error[:10000], finished=timezone.now())
    memories_delete_for_build(build_id=build.pk)
    if build.params.late_interaction:
        _delete_text_records(build)
    directory = build_dir(build.corpus_id, build.pk)
    forget_build(directory)
    shutil.rmtree(directory, ignore_errors=True)
    unpublish_build(corpus_id=build.corpus_id, build_id=build.pk)
    build.refresh_from_db()
    send_build_event(build, op="finished")


def _delete_text_records(build: IndexBuild) -> None:
    """Best effort: a fill removes its own records when it fails, but a build can also fail after
    its fill (cancelled at activation) or die in it (swept). Records left here are never searched
    (searches filter on the active build) and the next activation's prune removes them."""
    try:
        text_store_delete_build(store=store_for(build.corpus_id), build_id=build.pk)
    except Exception:  # noqa: BLE001 - the build's error on its row matters more than this cleanup
        logger.warning("build %s: deleting its text records failed", build.pk, exc_info=True)


def _proc_start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), which tells a
    live process from a later one that reuses its pid; "" when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def process_identity() -> str:
    """`host:pid:start time` of this process, stored on the build it runs."""
    return f"{socket.gethostname()}:{os.getpid()}:{_proc_start_time(os.getpid())}"


def owner_alive(worker: str) -> bool | None:
    """Whether the process named by `process_identity()` still runs: None when it is not on this
    host (or unknown), so only heartbeats can tell."""
    host, _, rest = worker.partition(":")
    pid, _, started = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit() or not Path("/proc/self/stat").exists():
        return None
    return bool(started) and _proc_start_time(int(pid)) == started


def builds_sweep_dead_owners(builds: QuerySet[IndexBuild]) -> list[int]:
    """Fail the running builds among `builds` whose worker process, on this host, is gone."""
    swept = []
    for build in builds.filter(status=Status.RUNNING).exclude(worker=""):
        if owner_alive(build.worker) is False:
            build_discard(build, status=Status.FAILED,
                          error="The worker process running this build died (killed, or out of memory); "
                                "the previous index stays active. Start a new build.")
            swept.append(build.pk)
            logger.warning("build %s: its worker %s is gone, marked failed", build.pk, build.worker)
    return swept


def builds_sweep_stale(*, corpus_id: int | None = None) -> list[int]:
    """Fail running builds whose worker is gone: a process on this host that no longer runs, or
    one anywhere that stopped sending heartbeats. Returns their ids."""
    running = (
        IndexBuild.objects.all() if corpus_id is None else IndexBuild.objects.filter(corpus_id=corpus_id)
    )
    swept = builds_sweep_dead_owners(running)
    cutoff = timezone.now() - timedelta(seconds=settings.BUILD_STALE_SECONDS)
    stale = IndexBuild.objects.filter(status=Status.RUNNING).filter(
        Q(heartbeat__lt=cutoff) | Q(heartbeat__isnull=True, started__lt=cutoff))
    if corpus_id is not None:
        stale = stale.filter(corpus_id=corpus_id)
    for build in stale:
        seen = build.heartbeat or build.started
        message = (
            f"The worker running this build stopped responding (last heartbeat {seen:%Y-%m-%d %H:%M:%S} "
            f"UTC); the previous index stays active. Start a new build."
        )
        build_discard(build, status=Status.FAILED, error=message)
        swept.append(build.pk)
        logger.warning("build %s: no heartbeat since %s, marked failed", build.pk, seen)
    return swept
