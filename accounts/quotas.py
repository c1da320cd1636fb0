"""Daily quotas of a person: chat turns (questions), LLM tokens and upload bytes a day.

A limit comes from the person's own `Quota` row where it sets one, else the most generous of their
groups' rows that set one, else the setting (`QUOTA_QUESTIONS_PER_DAY`, `QUOTA_TOKENS_PER_DAY`,
`QUOTA_UPLOAD_BYTES_PER_DAY`; 0: no limit). A day is the portal's `TIME_ZONE` day; what was used is
counted where it is kept (`chat.usage` for turns and tokens, `corpus.services.corpora` for uploads),
and a refusal says the limit and when it resets (`QuotaExceeded`, a 429 with `Retry-After`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q
from django.utils import timezone

from accounts.models import Quota
from core.errors import ApplicationError

KINDS = ("questions_per_day", "tokens_per_day", "upload_bytes_per_day")
SETTINGS = {"questions_per_day": "QUOTA_QUESTIONS_PER_DAY", "tokens_per_day": "QUOTA_TOKENS_PER_DAY",
            "upload_bytes_per_day": "QUOTA_UPLOAD_BYTES_PER_DAY"}
WORDS = {
    "questions_per_day": "questions",
    "tokens_per_day": "LLM tokens",
    "upload_bytes_per_day": "upload bytes",
}


class QuotaExceeded(ApplicationError):
    """A person's daily limit is used up: try again after `retry_after` seconds (the next day)."""

    code = "daily_quota_exceeded"
    status = 429

    def __init__(self, message: str, *, retry_after: int, details: dict) -> None:
        super().__init__(message, {**details, "retry_after": retry_after})
        self.retry_after = retry_after


@dataclass(frozen=True)
class DailyLimits:
    """None: no limit."""

    questions_per_day: int | None
    tokens_per_day: int | None
    upload_bytes_per_day: int | None


def day_bounds(now: datetime | None = None) -> tuple[datetime, datetime]:
    """The start of today and of tomorrow, in the portal's time zone."""
    local = timezone.localtime(now or timezone.now())
    start = local.replace(hour=0, minute=0, second=0, microsecond=0)
    return start, timezone.make_aware(start.replace(tzinfo=None) + timedelta(days=1), local.tzinfo)


def quota_limits(*, user: AbstractBaseUser) -> DailyLimits:
    rows = list(Quota.objects.filter(Q(user=user) | Q(group__in=user.groups.all())))  # one query
    own = next((row for row in rows if row.user_id is not None), None)
    groups = [row for row in rows if row.group_id is not None]
    limits = {}
    for kind in KINDS:
        if own is not None and getattr(own, kind) is not None:
            value = getattr(own, kind)
        elif any(getattr(row, kind) is not None for row in groups):
            values = [getattr(row, kind) for row in groups if getattr(row, kind) is not None]
            value = 0 if 0 in values else max(values)  # 0 is no limit: the most generous of all
        else:
            value = getattr(settings, SETTINGS[kind])
        limits[kind] = value or None
    return DailyLimits(**limits)


def quota_check(*, user: AbstractBaseUser, kind: str, used: int, adding: int = 1, subject: str = "",
                limits: DailyLimits | None = None) -> None:
    """Raise QuotaExceeded when `used` + `adding` of `kind` would pass the person's limit today
    (`subject` begins its message: what was refused; `limits`: theirs, when the caller has read them)."""
    limit = getattr(limits or quota_limits(user=user), kind)
    if limit is None or used + adding <= limit:
        return
    now = timezone.now()
    _, resets = day_bounds(now)
    retry_after = max(1, math.ceil((resets - now).total_seconds()))
    message = (
        f"this would pass your daily quota of {limit:,} {WORDS[kind]} ({used:,} used today). It resets at "
        f"{timezone.localtime(resets):%Y-%m-%d %H:%M %Z}; an administrator can raise it."
    )
    raise QuotaExceeded(f"{subject}{message}" if subject else message[0].upper() + message[1:],
                        retry_after=retry_after, details={"quota": kind, "limit": limit, "used": used,
                                                          "resets_at": resets.isoformat()})
