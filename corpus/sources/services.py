"""Source writes: create, delete, queue a sync, and the schedule (Celery beat) that queues the due ones.

The sync itself is `corpus.sources.sync.source_sync_run`, run by the task `corpus.sync_source`.
"""

from __future__ import annotations

import shutil
from datetime import timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from accounts.audit import audit_record
from core.errors import ApplicationError, ConflictError
from core.outbound import url_check
from corpus.events import corpus_group, send_event
from corpus.models import Corpus
from corpus.services.corpora import dataset_delete
from corpus.sources.folder import folder_root_check
from corpus.sources.git import git_url_check
from corpus.sources.models import Source
from corpus.sources.readers import rules_check
from corpus.sources.s3 import s3_source_check
from corpus.sources.selectors import source_state
from corpus.sources.web import web_url_check

SYNC_TASK = "corpus.sync_source"  # corpus.tasks.sync_source
SOURCE_FIELDS = ("branch", "token", "endpoint_url", "path_prefix", "sitemap_url", "max_pages", "max_depth",
                 "include", "exclude", "interval_minutes", "reader_rules", "posix_groups")
# A sync left "running" this long lost its worker: a new one may start.
STALE_SYNC = timedelta(hours=6)


class SourceSyncActive(ConflictError):
    code = "sync_active"


class SourceNameTaken(ConflictError):
    code = "name_taken"


def _location_check(kind: str, location: str, options: dict[str, Any]) -> str:
    """The location to store; refuses what the readers would refuse, and every address the
    outbound policy can already see is refused (the sync checks each connection again)."""
    location = location.strip()
    if kind == Source.Kind.FOLDER:
        return str(folder_root_check(location))
    if kind == Source.Kind.GIT:
        url_check(git_url_check(location))
        return location
    if kind == Source.Kind.WEB:
        url_check(web_url_check(location))
        if options.get("sitemap_url"):
            url_check(web_url_check(options["sitemap_url"]))
        return location
    if kind == Source.Kind.S3:
        endpoint = options.get("endpoint_url", "")
        s3_source_check(location=location, endpoint_url=endpoint, token=options.get("token", ""))
        if endpoint:
            url_check(endpoint)
        return location
    raise ApplicationError(f"Unknown source kind {kind!r}.", {"kind": [k.value for k in Source.Kind]})


def source_create(*, corpus: Corpus, user: AbstractBaseUser | None, name: str, kind: str, location: str,
                  **options: Any) -> Source:
    """A new source of `corpus` (not synced yet); `options` are any of SOURCE_FIELDS. Refuses a
    folder outside SOURCE_ROOTS (symlinks resolved), a URL with credentials in it, a bad scheme, an
    address the outbound policy refuses (core.outbound), an S3 source without its own credentials
    or at the portal's own storage."""
    unknown = sorted(set(options) - set(SOURCE_FIELDS))
    if unknown:
        raise ValueError(f"unknown source settings: {', '.join(unknown)}")
    name = name.strip()
    if not name or "/" in name:
        raise ApplicationError("A source needs a name without '/'.", {"name": name})
    if "reader_rules" in options:
        options["reader_rules"] = rules_check(options["reader_rules"])
    if options.get("posix_groups") and kind != Source.Kind.FOLDER:
        raise ApplicationError("Only a folder source can take a file's POSIX group as its readers.",
                               {"posix_groups": True})
    source = Source(corpus=corpus, created_by=user, name=name, kind=kind,
                    location=_location_check(kind, location, options), **options)
    try:
        source.full_clean(exclude=["corpus", "created_by"], validate_unique=False)
    except ValidationError as error:
        # The token's value never goes back in an error.
        raise ApplicationError("Invalid source settings.",
                               {k: v for k, v in error.message_dict.items() if k != "token"}) from None
    try:
        source.save()
    except IntegrityError:
        raise SourceNameTaken(f"This corpus already has a source named {name!r}.", {"name": name}) from None
    audit_record(action="source_created", target=_source_target(source), kind=kind, location=source.location)
    return source


def _source_target(source: Source) -> str:
    return f"{source.name} of corpus #{source.corpus_id}"


def source_delete(*, source: Source) -> int:
    """Delete the source and its documents from the corpus (they leave searches at once, their
    rows at the next merge). Refused while it syncs. Returns how many documents left."""
    with transaction.atomic():
        locked = Source.objects.select_for_update().get(pk=source.pk)
        if locked.is_active:
            raise SourceSyncActive(f"{source.name} is syncing; delete it when the sync has ended.")
        datasets = [d.dataset for d in locked.documents.select_related("dataset") if d.dataset is not None]
        for dataset in datasets:
            if dataset.replaces is not None:
                dataset_delete(dataset=dataset.replaces)
            dataset_delete(dataset=dataset)
        corpus_id = locked.corpus_id
        audit_record(action="source_deleted", target=_source_target(locked), documents=len(datasets))
        locked.delete()
        clone = settings.DATA_DIR / "sources" / str(source.pk)
        transaction.on_commit(lambda: shutil.rmtree(clone, ignore_errors=True))
    send_event(corpus_group(corpus_id), op="source_deleted", source_id=source.pk)
    return len(datasets)


def source_sync_start(*, source: Source, confirm: bool = False) -> Source:
    """Queue a sync of the source (once committed). One sync per source at a time: a second one
    while it is queued or running is refused (409). `confirm`: go on with a sync that removes more
    than half of the source's documents (one that stopped to ask)."""
    stale = timezone.now() - STALE_SYNC
    claimed = Source.objects.filter(Q(pk=source.pk) & (~Q(status__in=Source.ACTIVE_STATUSES)
                                                       | Q(sync_started__lt=stale))).update(
        status=Source.Status.QUEUED, done=0, total=0)
    if not claimed:
        raise SourceSyncActive(f"A sync of {source.name} is already queued or running.")
    transaction.on_commit(lambda: current_app.signature(SYNC_TASK, args=(source.pk,),
                                                       kwargs={"confirm": confirm}).delay())
    audit_record(action="source_synced", target=_source_target(source), confirm=confirm)
    source.refresh_from_db()
    send_event(corpus_group(source.corpus_id), op="source", source=source_state(source))
    return source


def sources_sync_due() -> list[int]:
    """Queue a sync of every source whose interval has passed since its last sync began (Celery
    beat calls this every minute). Returns the ids queued."""
    now = timezone.now()
    queued = []
    for source in Source.objects.filter(interval_minutes__gt=0).exclude(status__in=Source.ACTIVE_STATUSES):
        if (
            source.sync_started is None
            or source.sync_started + timedelta(minutes=source.interval_minutes) <= now
        ):
            try:
                source_sync_start(source=source)
            except SourceSyncActive:
                continue
            queued.append(source.pk)
    return queued
