"""A chat turn's record (`TurnRecord`, written when the turn ends on any surface) and the daily
quotas of turns and LLM tokens it is counted against (`accounts.quotas`)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, F, Sum
from django.utils import timezone

from accounts.quotas import day_bounds, quota_check, quota_limits
from chat.models import Conversation, TurnRecord
from engine.llm.stream import Usage


def turn_quota_check(*, user: AbstractBaseUser) -> None:
    """Raise `QuotaExceeded` (429) when the person has used today's turns or LLM tokens; nothing is
    read when they have no limit."""
    limits = quota_limits(user=user)
    if limits.questions_per_day is None and limits.tokens_per_day is None:
        return
    start, _ = day_bounds()
    today = TurnRecord.objects.filter(user=user, created__gte=start).aggregate(
        turns=Count("id"), tokens=Sum(F("prompt_tokens") + F("completion_tokens")))
    quota_check(user=user, kind="questions_per_day", used=today["turns"], limits=limits)
    quota_check(user=user, kind="tokens_per_day", used=today["tokens"] or 0, limits=limits)


def turn_record_create(*, user_id: int | None, surface: str, status: str, model: str, server: str,
                       usage: Usage | None, first_token_seconds: float | None, memories: int,
                       grounding: float | None = None, message_id: int | None = None,
                       conversation_id: int | None = None, corpus_ids: Iterable[int] = ()) -> TurnRecord:
    """Record one ended turn; a conversation's turn is its owner's and names the corpora the
    conversation searched."""
    if (
        conversation_id is not None
    ):  # its owner and corpora in one query: a row per corpus (one with None: none)
        rows = list(Conversation.objects.filter(pk=conversation_id).values_list("owner_id", "corpora"))
        user_id, corpus_ids = rows[0][0], [corpus for _, corpus in rows if corpus is not None]
    return TurnRecord.objects.create(
        user_id=user_id, surface=surface, status=status, model=model, server=server, message_id=message_id,
        corpus_ids=sorted(corpus_ids), prompt_tokens=usage.prompt_tokens if usage else 0,
        completion_tokens=usage.completion_tokens if usage else 0, memories=memories, grounding=grounding,
        first_token_ms=None if first_token_seconds is None else round(first_token_seconds * 1000, 1))


def turn_records_prune(*, now: datetime | None = None) -> int:
    """Delete the turn records older than `USAGE_RETENTION_DAYS` (0: keep every one); returns how many."""
    if not settings.USAGE_RETENTION_DAYS:
        return 0
    before = (now or timezone.now()) - timedelta(days=settings.USAGE_RETENTION_DAYS)
    deleted, _ = TurnRecord.objects.filter(created__lt=before).delete()
    return deleted
