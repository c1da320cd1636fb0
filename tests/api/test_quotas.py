"""Daily quotas (accounts.quotas): which limit applies to a person (their own, their groups', the
setting), the refusal on every chat surface (the conversations API, the OpenAI-compatible endpoint and
the websocket, through the real app and llama.cpp) and on uploads, and the next day's first turn
passing. "The next day" is made by moving the day's records back a day, not the clock."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connections
from django.db.models import F

from accounts.models import Quota
from accounts.quotas import QuotaExceeded, quota_limits
from accounts.services.tokens import api_token_create
from chat.models import Message, TurnRecord
from chat.services import conversation_create
from chat.usage import turn_quota_check, turn_record_create
from corpus.models import Dataset
from tests.plugins.api import error_of, token_client
from tests.plugins.chat import events_until, make_corpus, open_socket
from tests.plugins.portal import TEXTS, jsonl_bytes

QUESTION = "How does a generator function pause at yield and resume where it left off?"


def _turns(user, count: int) -> None:  # noqa: ANN001
    for _ in range(count):
        turn_record_create(
            user_id=user.pk,
            surface="chat",
            status="complete",
            model="m",
            server="s",
            usage=None,
            first_token_seconds=0.5,
            memories=2,
        )


def _yesterday() -> None:
    TurnRecord.objects.update(created=F("created") - timedelta(days=1))


def test_a_persons_limit_is_their_own_then_their_groups_most_generous_then_the_setting(settings, owner):
    settings.QUOTA_QUESTIONS_PER_DAY, settings.QUOTA_TOKENS_PER_DAY = 5, 0
    assert (quota_limits(user=owner).questions_per_day, quota_limits(user=owner).tokens_per_day) == (5, None)
    small, large = Group.objects.create(name="small"), Group.objects.create(name="large")
    Quota.objects.create(group=small, questions_per_day=2, tokens_per_day=100)
    Quota.objects.create(group=large, questions_per_day=20)
    owner.groups.add(small)
    assert (quota_limits(user=owner).questions_per_day, quota_limits(user=owner).tokens_per_day) == (2, 100)
    owner.groups.add(large)
    assert quota_limits(user=owner).questions_per_day == 20
    Quota.objects.create(user=owner, questions_per_day=1)
    assert quota_limits(user=owner).questions_per_day == 1 and quota_limits(user=owner).tokens_per_day == 100


def test_a_groups_quota_counts_its_members_turns_and_resets_the_next_day(settings, owner, member, readers):
    Quota.objects.create(group=readers, questions_per_day=2)
    _turns(member, 2)
    with pytest.raises(QuotaExceeded) as refused:
        turn_quota_check(user=member)
    assert refused.value.details["limit"] == 2 and refused.value.details["used"] == 2
    assert 0 < refused.value.retry_after <= 24 * 3600 and "2 questions" in refused.value.message
    turn_quota_check(user=owner)  # not in the group: the setting's default, no limit
    _yesterday()
    turn_quota_check(user=member)


def test_tokens_count_prompt_and_answer(settings, owner):
    settings.QUOTA_TOKENS_PER_DAY = 1000
    from engine.llm.stream import Usage

    turn_record_create(
        user_id=owner.pk,
        surface="openai",
        status="complete",
        model="m",
        server="s",
        usage=Usage(prompt_tokens=700, completion_tokens=299),
        first_token_seconds=None,
        memories=0,
    )
    turn_quota_check(user=owner)
    turn_record_create(
        user_id=owner.pk,
        surface="openai",
        status="complete",
        model="m",
        server="s",
        usage=Usage(prompt_tokens=1, completion_tokens=0),
        first_token_seconds=None,
        memories=0,
    )
    with pytest.raises(QuotaExceeded) as refused:
        turn_quota_check(user=owner)
    assert refused.value.details == {"quota": "tokens_per_day", "limit": 1000, "used": 1000,
                                     "resets_at": refused.value.details["resets_at"],
                                     "retry_after": refused.value.retry_after}


def test_uploads_past_the_daily_bytes_are_429_and_the_first_is_kept(settings, corpus, owner):
    first = jsonl_bytes(TEXTS)
    settings.QUOTA_UPLOAD_BYTES_PER_DAY = len(first) + 10
    client = token_client(owner)
    url = f"/api/v1/corpora/{corpus.pk}/datasets/"
    assert (
        client.post(url, {"file": SimpleUploadedFile("a.jsonl", first)}, format="multipart").status_code
        == 201
    )
    refused = client.post(
        url, {"file": SimpleUploadedFile("b.jsonl", jsonl_bytes(TEXTS[:3]))}, format="multipart"
    )
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert error_of(refused)["code"] == "daily_quota_exceeded" and "b.jsonl" in error_of(refused)["message"]
    assert list(Dataset.objects.values_list("name", flat=True)) == ["a.jsonl"]
    Dataset.objects.update(uploaded_at=F("uploaded_at") - timedelta(days=1))
    assert client.post(url, {"file": SimpleUploadedFile("b.jsonl", jsonl_bytes(TEXTS[:3]))},
                       format="multipart").status_code == 201


@pytest.mark.service
def test_over_the_question_quota_the_api_and_openai_endpoint_answer_429_until_the_next_day(
        chat_settings, live_api, owner, pydoc_build):
    chat_settings.QUOTA_QUESTIONS_PER_DAY = 1
    corpus = make_corpus(owner, pydoc_build)
    secret = api_token_create(user=owner, name="quota")[1]
    base = f"{live_api.url}/api/v1"
    with httpx.Client(headers={"Authorization": f"Bearer {secret}"}, timeout=120) as http:
        conversation = http.post(f"{base}/conversations/", json={"corpora": [corpus.pk]}).json()["id"]
        assert (
            http.post(
                f"{base}/conversations/{conversation}/messages/", json={"content": QUESTION}
            ).status_code
            == 201
        )
        refused = http.post(f"{base}/conversations/{conversation}/messages/", json={"content": "And send()?"})
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) > 0
        assert (
            error_of(refused)["code"] == "daily_quota_exceeded"
            and "1 questions" in error_of(refused)["message"]
        )
        completion = {
            "model": f"corpus-{corpus.pk}",
            "messages": [{"role": "user", "content": QUESTION}],
            "max_tokens": 16,
        }
        openai_refused = http.post(f"{base}/chat/completions", json=completion)
        assert openai_refused.status_code == 429 and "Retry-After" in openai_refused.headers
        assert (
            Message.objects.filter(conversation_id=conversation).count() == 2
        )  # nothing of the refused turn
        _yesterday()
        assert http.post(f"{base}/chat/completions", json=completion).status_code == 200
    records = TurnRecord.objects.order_by("id")
    assert [record.surface for record in records] == ["chat", "openai"]
    assert records[1].prompt_tokens > 0 and records[1].server and records[1].corpus_ids == [corpus.pk]


@pytest.mark.service
@pytest.mark.django_db(transaction=True)
async def test_over_the_quota_the_websocket_says_so_and_stores_nothing(chat_settings, users, pydoc_build):
    owner = users[0]
    chat_settings.QUOTA_QUESTIONS_PER_DAY = 1
    corpus = await database_sync_to_async(make_corpus)(owner, pydoc_build)
    conversation = await database_sync_to_async(conversation_create)(user=owner, corpus_ids=[corpus.pk])
    await database_sync_to_async(_turns)(owner, 1)
    try:
        socket, connected, _ = await open_socket(owner, conversation.pk)
        assert connected
        await socket.receive_json_from()  # chat.ready
        await socket.send_json_to({"type": "chat.send", "content": QUESTION})
        events = await events_until(socket, "chat.done", "chat.error")
        await socket.disconnect()
        assert events[-1]["code"] == "daily_quota_exceeded" and events[-1]["retry_after"] > 0
        assert await database_sync_to_async(Message.objects.filter(conversation=conversation).count)() == 0
    finally:
        await database_sync_to_async(connections.close_all)()
