"""The audit trail: who did what, when and from which address, written by each action itself
(`audit_record`), append-only (`AuditEvent` refuses a change or a deletion; only the retention,
`audit_prune`, removes rows older than `AUDIT_RETENTION_DAYS`).

The actor and address of an action in a request come from that request: `AuditContextMiddleware`
keeps it in a context variable for the services below it (an API token's user included: DRF sets the
request's user once it has authenticated). Sign-ins, failed ones and lockouts come from the signals of
Django's auth and of django-axes; staff's changes to users and groups in the admin from the admin's own
log (`LogEntry`); everything else from the service that did it."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from datetime import date, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from accounts.models import AuditEvent
from accounts.throttle import client_address
from core.errors import ApplicationError
from core.spreadsheet import spreadsheet_cell

ACTIONS = {
    "sign_in": "signed in",
    "sign_in_failed": "failed to sign in",
    "locked_out": "locked out",
    "deactivated": "deactivated by a blocked group",
    "token_created": "created an API token",
    "token_revoked": "revoked an API token",
    "corpus_created": "created a corpus",
    "corpus_shared": "shared a corpus",
    "corpus_unshared": "unshared a corpus",
    "corpus_visibility": "changed a corpus's visibility",
    "corpus_deleted": "deleted a corpus",
    "source_created": "created a source",
    "source_synced": "synced a source",
    "source_deleted": "deleted a source",
    "document_deleted": "deleted a document",
    "source_readers_changed": "changed who reads a source's documents",
    "conversation_exported": "exported a conversation",
    "admin_change": "changed a user or group in the admin",
}
_request: ContextVar[HttpRequest | None] = ContextVar("audit_request", default=None)


class AuditContextMiddleware:
    """Keeps the request for `audit_record` while its view runs."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        token = _request.set(request)
        try:
            return self.get_response(request)
        finally:
            _request.reset(token)


def audit_record(*, action: str, target: str = "", actor: AbstractBaseUser | None = None,
                 request: HttpRequest | None = None, **details: Any) -> AuditEvent:
    """Append one event; the actor and address default to the current request's (none: a task)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown audit action {action!r}")
    request = request or _request.get()
    if actor is None and request is not None:
        user = getattr(request, "user", None)
        actor = user if user is not None and user.is_authenticated else None
    return AuditEvent.objects.create(
        actor=actor,
        actor_name=actor.get_username() if actor is not None else "",
        action=action,
        target=target[:300],
        address=client_address(request) if request is not None else None,
        details=details,
    )


def audit_prune(*, now: Any = None) -> int:
    """Delete the events older than `AUDIT_RETENTION_DAYS` (0: keep every one); returns how many."""
    if not settings.AUDIT_RETENTION_DAYS:
        return 0
    before = (now or timezone.now()) - timedelta(days=settings.AUDIT_RETENTION_DAYS)
    deleted, _ = AuditEvent.objects.filter(created__lt=before).delete()
    return deleted


def audit_events(
    *, action: str = "", actor: str = "", since: str = "", until: str = ""
) -> QuerySet[AuditEvent]:
    """The trail, newest first, narrowed by action, actor (part of a username) and dates (YYYY-MM-DD,
    inclusive); a malformed date is an ApplicationError naming it."""
    events = AuditEvent.objects.all()
    if action:
        events = events.filter(action=action)
    if actor:
        events = events.filter(actor_name__icontains=actor)
    for name, value, lookup in (
        ("since", since, "created__date__gte"),
        ("until", until, "created__date__lte"),
    ):
        if value:
            try:
                events = events.filter(**{lookup: date.fromisoformat(value)})
            except ValueError:
                raise ApplicationError(f"{name} must be a date like 2026-01-31.", {name: value}) from None
    return events.order_by("-created", "-id")


def audit_export(events: Iterable[AuditEvent]) -> str:
    """The events as CSV, one row each (a cell a spreadsheet would read as a formula quoted as text)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["created", "actor", "action", "target", "address", "details"])
    for event in events:
        row = [event.created.isoformat(), event.actor_name, event.action, event.target, event.address or "",
               json.dumps(event.details, ensure_ascii=False, sort_keys=True)]
        writer.writerow([spreadsheet_cell(cell) for cell in row])
    return out.getvalue()
