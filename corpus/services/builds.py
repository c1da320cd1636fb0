"""Index builds: start, cancel, queue what follows a job, clean up old ones.

Lifecycle: queued -> running -> succeeded | failed | cancelled. At most one queued/running build
per corpus (a partial unique index in the database). The task's body, which claims, runs and
activates a build, is `corpus.services.build_runner`; the heartbeat, the worker's liveness and the
sweep of builds whose worker is gone are `corpus.services.build_liveness`.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from celery import current_app
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.errors import ApplicationError, ConflictError
from core.runtime import default_gguf, engine_config
from corpus.build_parameters import BuildParameters
from corpus.corpus_settings import settings_declared
from corpus.events import send_build_event
from corpus.files import build_dir
from corpus.memory_rows import memories_delete_for_build
from corpus.models import Corpus, IndexBuild
from corpus.object_store import unpublish_build
from corpus.services.appends import RUN_BUILD_TASK, append_start, appends_allowed, merge_due
from corpus.services.build_liveness import builds_sweep_stale
from corpus.serving import forget_build

logger = logging.getLogger(__name__)
Status = IndexBuild.Status


class BuildAlreadyActive(ConflictError):
    code = "build_active"


class BuildNotCancellable(ConflictError):
    code = "build_finished"


def corpus_parameters(corpus: Corpus) -> BuildParameters:
    """The corpus's engine settings as a build of it now would record them: each setting declared
    `rebuild` (corpus.corpus_settings), the model's path on this machine and the engine's
    components to drop."""
    recorded = {setting.name: getattr(corpus, setting.name)
                for setting in settings_declared() if setting.rebuild}
    recorded["gguf_path"] = str(Path(corpus.gguf_path) if corpus.gguf_path else default_gguf())
    recorded["hdc_drop_components"] = engine_config().hdc_drop_components
    return BuildParameters.from_json(recorded)


def build_start(*, corpus: Corpus, user: AbstractBaseUser | None) -> IndexBuild:
    """Create a queued build and queue its task once the row is committed."""
    builds_sweep_stale(corpus_id=corpus.pk)
    if not corpus.datasets.exists():
        raise ApplicationError("Upload at least one dataset before building the index.")
    try:
        with transaction.atomic():
            build = IndexBuild.objects.create(corpus=corpus, created_by=user,
                                              parameters=corpus_parameters(corpus).to_json())
            # By name: the task module imports this one (tasks call services), not the other way.
            transaction.on_commit(lambda: current_app.signature(RUN_BUILD_TASK, args=(build.pk,)).delay())
    except IntegrityError:
        raise BuildAlreadyActive("A build of this corpus is already queued or running; "
                                 "wait for it to finish or cancel it first.") from None
    send_build_event(build, op="queued")
    return build


def build_cancel(*, build: IndexBuild) -> IndexBuild:
    """A queued build is cancelled at once (its task will find nothing to claim); a running one
    is flagged and stops at the engine's next batch boundary."""
    now = timezone.now()
    if IndexBuild.objects.filter(pk=build.pk, status=Status.QUEUED).update(
        status=Status.CANCELLED, cancel_requested=True, finished=now, error="Cancelled before it started."
    ):
        build.refresh_from_db()
        send_build_event(build, op="finished")
        return build
    if not IndexBuild.objects.filter(pk=build.pk, status=Status.RUNNING).update(cancel_requested=True):
        raise BuildNotCancellable(
            f"Build {build.pk} is {build.status}; only queued or running builds can be cancelled.",
            {"status": build.status},
        )
    build.refresh_from_db()
    send_build_event(build, op="progress")
    return build


def after_job(*, corpus_id: int) -> IndexBuild | None:
    """After a successful build or append: queue what the corpus needs next. A merge (a full build)
    when the state is due one (`appends.merge_due`); else an append of the datasets uploaded while
    the job ran, when the corpus indexes uploads at once. Returns the queued job, if any."""
    corpus = Corpus.objects.select_related("active_build").get(pk=corpus_id)
    try:
        if merge_due(corpus):
            logger.info("corpus %s: %d segments, merging", corpus_id, len(corpus.serving_build_ids))
            return build_start(corpus=corpus, user=None)
        # A corpus with sources indexes what they synced meanwhile whatever its upload setting.
        indexes = settings.INDEX_ON_UPLOAD and corpus.append_on_upload or corpus.sources.exists()
        if indexes and appends_allowed(corpus):
            return append_start(corpus=corpus, user=None)
    except BuildAlreadyActive:
        pass
    return None


def index_after_upload(*, corpus: Corpus, user: AbstractBaseUser | None) -> IndexBuild | None:
    """After datasets were stored: queue what makes them searchable without a click, when the
    corpus indexes uploads at once (`INDEX_ON_UPLOAD` and `Corpus.append_on_upload`): its first
    build, or an append onto its state; a full build for a late-interaction corpus is left to the
    user. None when nothing was queued (another job runs: its end appends them, `after_job`)."""
    if not (settings.INDEX_ON_UPLOAD and corpus.append_on_upload):
        return None
    corpus = Corpus.objects.select_related("active_build").get(pk=corpus.pk)
    if corpus.active_build_id is None:
        if IndexBuild.objects.filter(corpus=corpus, status__in=IndexBuild.ACTIVE_STATUSES).exists():
            return None
        try:
            return build_start(corpus=corpus, user=user)
        except BuildAlreadyActive:
            return None
    if not appends_allowed(corpus):
        return None
    return append_start(corpus=corpus, user=user)  # None when nothing is pending


def builds_cleanup(*, keep: int = 2, corpus_id: int | None = None) -> list[int]:
    """Delete finished builds beyond the `keep` newest of each corpus (never the active one,
    never a queued or running one): rows, memory rows, then files. Returns the deleted ids."""
    deleted = []
    corpora = Corpus.objects.all() if corpus_id is None else Corpus.objects.filter(pk=corpus_id)
    for corpus in corpora:
        finished = corpus.builds.exclude(status__in=IndexBuild.ACTIVE_STATUSES).order_by("-created", "-id")
        serving = set(corpus.serving_build_ids)
        for build in finished[keep:]:
            if build.pk in serving:
                continue
            build_id, directory = build.pk, build_dir(corpus.pk, build.pk)
            memories_delete_for_build(build_id=build_id)
            build.delete()
            forget_build(directory)
            shutil.rmtree(directory, ignore_errors=True)
            unpublish_build(corpus_id=corpus.pk, build_id=build_id)
            deleted.append(build_id)
    return deleted


# Memories a second the meaning channel's encoder reads on two cores (docs/retrieval-measurements.md:
# 52.5 and 56.2 memories a second, `bench.build --docs 5000` and `--docs 20000 --meaning`) until a
# build on this installation has measured its own.
MEANING_RATE_ESTIMATE = 50.0
MEANING_BYTES_PER_MEMORY = 388  # 384 int8 codes and a float32 scale
# A build's rate counts as measured from this many memories (below, loading the model dominates).
MEANING_RATE_MIN_MEMORIES = 500


def meaning_rate() -> tuple[float, bool]:
    """(memories a second, measured?): the meaning channel's rate on the newest build or segment of
    at least `MEANING_RATE_MIN_MEMORIES` read by meaning (`IndexBuild.meaning_seconds`: the model's
    loading and the encoder), else `MEANING_RATE_ESTIMATE`."""
    rows = (IndexBuild.objects.filter(meaning=IndexBuild.Meaning.DONE, meaning_seconds__gt=0,
                                      meaning_done__gte=MEANING_RATE_MIN_MEMORIES)
            .order_by("-finished", "-id")
            .values_list("meaning_done", "meaning_seconds")[:1])
    for done, seconds in rows:
        return done / seconds, True
    return MEANING_RATE_ESTIMATE, False
