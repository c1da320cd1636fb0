"""The usage page and API (chat.usage_report) over records made by the real services: the numbers a
team lead reads (questions a day and per corpus, people, answers per model and server, time to first
token, grounding, feedback, questions that found no memory, the slowest builds), plots drawn inline
with nothing from outside, a CSV, and 403 for everyone but staff."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta

import pytest
from django.db.models import F
from django.test import Client
from django.utils import timezone

from chat.feedback import feedback_set
from chat.models import TurnRecord
from chat.services import conversation_create, message_create_assistant, message_create_user
from chat.usage import turn_record_create
from engine.llm.stream import Usage
from tests.plugins.api import token_client
from tests.plugins.portal import build_now, login

pytestmark = pytest.mark.django_db


def _turn(
    user,
    *,
    corpus=None,
    first_token: float,
    memories: int,
    grounding: float | None,
    model: str = "qwen",
    server: str = "http://llm-a:8081",
    days_ago: int = 0,
) -> TurnRecord:  # noqa: ANN001
    record = turn_record_create(
        user_id=user.pk,
        surface="openai",
        status="complete",
        model=model,
        server=server,
        usage=Usage(prompt_tokens=100, completion_tokens=20),
        first_token_seconds=first_token,
        memories=memories,
        grounding=grounding,
        corpus_ids=[corpus.pk] if corpus else [],
    )
    TurnRecord.objects.filter(pk=record.pk).update(created=F("created") - timedelta(days=days_ago))
    return record


def test_the_report_counts_what_happened(data_dir, celery_eager, owner, member, staff, corpus, dataset,
                                        django_capture_on_commit_callbacks):
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    for seconds, memories, grounding in ((0.2, 2, 0.9), (0.4, 0, None), (0.6, 3, 0.5), (1.0, 1, 0.1)):
        _turn(owner, corpus=corpus, first_token=seconds, memories=memories, grounding=grounding)
    _turn(
        member,
        first_token=3.0,
        memories=0,
        grounding=None,
        model="gemma",
        server="http://llm-b:8081",
        days_ago=2,
    )
    _turn(member, first_token=3.0, memories=0, grounding=None, days_ago=40)  # outside 30 days
    conversation = conversation_create(user=owner, corpus_ids=[])
    message_create_user(conversation_id=conversation.pk, content="Why?")
    answer = message_create_assistant(conversation_id=conversation.pk, content="Because.", status="complete")
    feedback_set(user=owner, message_id=answer.pk, rating="down", comment="vague")

    report = token_client(staff).get("/api/v1/usage/", {"days": 30}).json()
    assert (report["questions"], report["people"]) == (5, 2)
    assert [row["questions"] for row in report["daily"][-3:]] == [1, 0, 4]
    assert report["daily"][-1] == {
        "day": str(timezone.localdate()),
        "questions": 4,
        "people": 1,
        "tokens": 480,
    }
    assert report["corpora"] == [{"corpus": corpus.name, "questions": 4}]
    assert {(m["model"], m["server"], m["answers"]) for m in report["models"]} == {
        ("qwen", "http://llm-a:8081", 4), ("gemma", "http://llm-b:8081", 1)}
    assert (report["first_token_p50_ms"], report["first_token_p95_ms"]) == (600.0, 3000.0)
    assert report["grounding"] == {"grounded": 1, "partly": 1, "not grounded": 1, "nothing to check": 2}
    assert report["no_memory_share"] == 0.25  # one of the four questions to a corpus found nothing
    assert report["feedback"] == {"up": 0, "down": 1}
    assert (
        report["slowest_builds"][0]["corpus"] == corpus.name
        and report["slowest_builds"][0]["number"] == build.number
    )
    assert [
        (a["user"], a["questions"], a["today_questions"], a["today_tokens"]) for a in report["askers"]
    ] == [("owner", 4, 4, 480), ("member", 1, 0, 0)]
    assert report["askers"][0]["limits"] == {"questions_per_day": None, "tokens_per_day": None,
                                             "upload_bytes_per_day": None}
    assert token_client(staff).get("/api/v1/usage/", {"days": 365}).json()["questions"] == 6
    assert token_client(staff).get("/api/v1/usage/", {"days": 12}).status_code == 400

    page = login(staff).get("/chat/usage/").content.decode()
    assert page.count('<svg class="chart"') == 3 and f"<title>{timezone.localdate():%m-%d}: 4</title>" in page
    assert not re.search(r'(src|href)="https?://', page)  # nothing from outside the portal
    rows = list(csv.DictReader(io.StringIO(login(staff).get("/chat/usage/export.csv").content.decode())))
    assert len(rows) == 30 and rows[-1] == {"day": str(timezone.localdate()), "questions": "4", "people": "1",
                                            "tokens": "480"}


def test_only_staff_read_usage_and_an_empty_range_says_so(owner, member, staff):
    for user in (owner, member):
        assert token_client(user).get("/api/v1/usage/").status_code == 403
        assert login(user).get("/chat/usage/").status_code == 403
        assert login(user).get("/chat/usage/export.csv").status_code == 403
    assert Client().get("/chat/usage/").status_code == 302
    page = login(staff).get("/chat/usage/", {"days": 7}).content.decode()
    assert "No questions in these 7 days" in page
