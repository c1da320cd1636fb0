"""What the usage page and `GET /api/v1/usage/` show a team lead (staff): questions a day and per
corpus, active people, answers per model and server, time to first token, grounding and feedback,
the share of questions that found no memory, and the slowest builds, over the last `days` days, from
the portal's own records (`TurnRecord`, `AnswerFeedback`, `IndexBuild`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from django.contrib.auth import get_user_model
from django.db.models import Count, DurationField, ExpressionWrapper, F, QuerySet, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from accounts.quotas import day_bounds, quota_limits
from chat.models import AnswerFeedback, TurnRecord
from corpus.models import Corpus, IndexBuild

DAYS_CHOICES = (7, 30, 90, 365)
SLOWEST_BUILDS = 10
GROUNDING_BUCKETS = (("grounded", 0.8, 1.01), ("partly", 0.4, 0.8), ("not grounded", 0.0, 0.4))


@dataclass
class UsageReport:
    days: int
    start: date
    daily: list[dict] = field(default_factory=list)  # {"day", "questions", "people", "tokens"}
    corpora: list[dict] = field(default_factory=list)  # {"corpus", "questions"}, most asked first
    models: list[dict] = field(default_factory=list)  # {"model", "server", "answers"}
    first_token_p50_ms: float | None = None
    first_token_p95_ms: float | None = None
    grounding: dict[str, int] = field(default_factory=dict)
    feedback: dict[str, int] = field(default_factory=dict)
    questions: int = 0
    people: int = 0
    no_memory_share: float | None = None
    slowest_builds: list[dict] = field(default_factory=list)
    # {"user", "user_id", "questions", "tokens", "today_questions", "today_tokens", "limits"}, most active
    # first
    askers: list[dict] = field(default_factory=list)


def _percentile(values: list[float], share: float) -> float | None:
    """The nearest-rank percentile of `values` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, int(share * len(ordered) + 0.999999) - 1))], 1)


def usage_report(*, days: int) -> UsageReport:
    today, _ = day_bounds()
    start = today - timedelta(days=days - 1)
    turns = TurnRecord.objects.filter(created__gte=start)
    report = UsageReport(days=days, start=timezone.localtime(start).date())
    _daily(report, turns)
    _corpora(report, turns)
    report.models = [
        {"model": row["model"] or "–", "server": row["server"] or "–", "answers": row["answers"]}
        for row in turns.values("model", "server").annotate(answers=Count("id")).order_by("-answers")
    ]
    first_tokens = list(turns.exclude(first_token_ms=None).values_list("first_token_ms", flat=True))
    report.first_token_p50_ms, report.first_token_p95_ms = (
        _percentile(first_tokens, 0.5),
        _percentile(first_tokens, 0.95),
    )
    grounding = list(turns.values_list("grounding", flat=True))
    report.grounding = {
        name: sum(1 for g in grounding if g is not None and low <= g < high)
        for name, low, high in GROUNDING_BUCKETS
    } | {"nothing to check": grounding.count(None)}
    rated = Counter(AnswerFeedback.objects.filter(updated__gte=start).values_list("rating", flat=True))
    report.feedback = {"up": rated[AnswerFeedback.Rating.UP], "down": rated[AnswerFeedback.Rating.DOWN]}
    searched = [memories for memories, corpora in turns.values_list("memories", "corpus_ids") if corpora]
    report.no_memory_share = round(searched.count(0) / len(searched), 3) if searched else None
    report.slowest_builds = _slowest_builds(start)
    report.askers = _askers(turns, today)
    return report


def _askers(turns: QuerySet[TurnRecord], today: datetime, limit: int = 50) -> list[dict]:
    """Each person's questions and tokens in the range and today, beside their daily limits."""
    tokens = Sum(F("prompt_tokens") + F("completion_tokens"))
    rows = list(turns.exclude(user=None).values("user").annotate(questions=Count("id"), tokens=tokens)
                .order_by("-questions")[:limit])
    today_rows = {
        row["user"]: row
        for row in turns.filter(created__gte=today, user__in=[r["user"] for r in rows])
        .values("user")
        .annotate(questions=Count("id"), tokens=tokens)
    }
    users = get_user_model().objects.in_bulk([row["user"] for row in rows])
    return [
        {
            "user": users[row["user"]].get_username(),
            "user_id": row["user"],
            "questions": row["questions"],
            "tokens": row["tokens"] or 0,
            "today_questions": today_rows.get(row["user"], {}).get("questions", 0),
            "today_tokens": today_rows.get(row["user"], {}).get("tokens") or 0,
            "limits": quota_limits(user=users[row["user"]]),
        }
        for row in rows
    ]


def _daily(report: UsageReport, turns: QuerySet[TurnRecord]) -> None:
    rows = {row["day"]: row for row in turns.annotate(day=TruncDate("created")).values("day").annotate(
        questions=Count("id"), people=Count("user", distinct=True),
        tokens=Sum(F("prompt_tokens") + F("completion_tokens"))).order_by("day")}
    empty = {"questions": 0, "people": 0, "tokens": 0}
    report.daily = [
        {"day": day, "questions": row["questions"], "people": row["people"], "tokens": row["tokens"] or 0}
        for day, row in (
            (day, rows.get(day, empty))
            for day in (report.start + timedelta(days=n) for n in range(report.days))
        )
    ]
    report.questions = sum(row["questions"] for row in report.daily)
    report.people = turns.exclude(user=None).values("user").distinct().count()


def _corpora(report: UsageReport, turns: QuerySet[TurnRecord]) -> None:
    asked = Counter(corpus_id for ids in turns.values_list("corpus_ids", flat=True) for corpus_id in ids)
    names = dict(Corpus.objects.filter(pk__in=asked).values_list("pk", "name"))
    report.corpora = [{"corpus": names.get(corpus_id, f"deleted corpus #{corpus_id}"), "questions": count}
                      for corpus_id, count in asked.most_common()]


def _slowest_builds(start: datetime) -> list[dict]:
    took = ExpressionWrapper(F("finished") - F("started"), output_field=DurationField())
    builds = (
        IndexBuild.objects.filter(
            finished__gte=start, started__isnull=False, status=IndexBuild.Status.SUCCEEDED
        )
        .annotate(took=took)
        .select_related("corpus")
        .order_by("-took")[:SLOWEST_BUILDS]
    )
    return [
        {
            "corpus": build.corpus.name,
            "number": build.number,
            "kind": build.kind,
            "documents": build.documents,
            "seconds": round(build.took.total_seconds(), 1),
            "finished": build.finished,
        }
        for build in builds
    ]
