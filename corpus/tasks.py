"""Celery tasks: take ids, call services. Queued with transaction.on_commit by the services."""

from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import worker_ready

from corpus.integrity import corpora_files_log
from corpus.services.build_liveness import builds_sweep_stale
from corpus.services.build_runner import build_run
from corpus.services.builds import RUN_BUILD_TASK
from corpus.services.meaning_jobs import MEANING_TASK, meaning_resume, meaning_run
from corpus.sources.services import SYNC_TASK, sources_sync_due
from corpus.sources.sync import source_sync_run

logger = logging.getLogger(__name__)


@shared_task(name=RUN_BUILD_TASK)
def run_build(build_id: int) -> str:
    build = build_run(build_id=build_id)
    return build.status if build is not None else "not-claimed"


@shared_task(name=MEANING_TASK)
def encode_meaning(corpus_id: int) -> int:
    """A corpus's segments read by meaning (routed to `settings.CELERY_MEANING_QUEUE`)."""
    return meaning_run(corpus_id=corpus_id)


@worker_ready.connect
def sweep_on_worker_start(**kwargs: object) -> None:
    """A worker that starts after a crash finds the builds the crash left "running", and queues
    again the reading by meaning it left unfinished (its claims lapse: `meaning_jobs`)."""
    swept = builds_sweep_stale()
    if swept:
        logger.warning("marked stale builds failed: %s", swept)
    resumed = meaning_resume()
    if resumed:
        logger.info("reading by meaning queued again for %d corpora", resumed)
    corpora_files_log()


@shared_task(name=SYNC_TASK)
def sync_source(source_id: int, confirm: bool = False) -> str:
    source = source_sync_run(source_id=source_id, confirm=confirm)
    return source.status if source is not None else "not-claimed"


@shared_task(name="corpus.tasks.sync_sources_due")
def sync_sources_due() -> int:
    """Celery beat's every-minute call: queue the sources whose interval has passed."""
    return len(sources_sync_due())
