"""The chat's periodic task: the retention of the records a team lead reads (Celery beat, daily)."""

from __future__ import annotations

from celery import shared_task

from accounts.audit import audit_prune
from chat.usage import turn_records_prune


@shared_task(name="chat.tasks.records_prune")
def records_prune() -> dict[str, int]:
    """Delete turn records past `USAGE_RETENTION_DAYS` and audit events past `AUDIT_RETENTION_DAYS`."""
    return {"turn_records": turn_records_prune(), "audit_events": audit_prune()}
