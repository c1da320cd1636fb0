"""Feedback on answers: the owner rates an answer through the API and the websocket, nobody else can
(404, outsiders learn nothing), and staff alone read the rated answers, worst first, on their page,
in the API and in the exports (403 for everyone else)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from channels.db import database_sync_to_async
from django.db import connections
from django.test import Client

from chat.models import AnswerFeedback
from chat.services import conversation_create, message_create_assistant, message_create_user
from tests.plugins.api import error_of, token_client
from tests.plugins.chat import open_socket
from tests.plugins.portal import login

QUESTION = "Which statement binds a name in the enclosing scope?"
COMMENT = "=HYPERLINK(\"http://example.invalid\") it named global, not nonlocal"


def _answered(user):  # noqa: ANN001, ANN202 - the conversation and its answer
    conversation = conversation_create(user=user, corpus_ids=[])
    message_create_user(conversation_id=conversation.pk, content=QUESTION)
    answer = message_create_assistant(conversation_id=conversation.pk, content="The global statement.",
                                      status="complete", model="qwen")
    return conversation, answer


@pytest.mark.django_db
def test_the_owner_rates_an_answer_and_nobody_else_can(owner, outsider, staff):
    conversation, answer = _answered(owner)
    url = f"/api/v1/conversations/{conversation.pk}/messages/{answer.pk}/feedback/"
    rated = token_client(owner).put(url, {"rating": "down", "comment": COMMENT}, format="json")
    assert rated.status_code == 200 and rated.json() == {"rating": "down", "comment": COMMENT}
    listed = token_client(owner).get(f"/api/v1/conversations/{conversation.pk}/messages/").json()["results"]
    assert [m["feedback"] for m in listed] == [None, {"rating": "down", "comment": COMMENT}]
    for other in (outsider, staff):  # staff read ratings on their page, but rate only their own answers
        assert token_client(other).put(url, {"rating": "up"}, format="json").status_code == 404
    question = listed[0]["id"]
    user_turn = f"/api/v1/conversations/{conversation.pk}/messages/{question}/feedback/"
    assert token_client(owner).put(user_turn, {"rating": "up"}, format="json").status_code == 404
    bad = token_client(owner).put(url, {"rating": "meh"}, format="json")
    assert bad.status_code == 400 and "rating" in error_of(bad)["details"]
    assert AnswerFeedback.objects.get().rating == AnswerFeedback.Rating.DOWN
    assert token_client(owner).put(url, {"rating": None}, format="json").status_code == 204
    assert not AnswerFeedback.objects.exists()


@pytest.mark.django_db
def test_staff_read_the_worst_first_and_export_them_others_get_403(owner, member, staff):
    conversation, answer = _answered(owner)
    _, liked = _answered(member)
    token_client(member).put(f"/api/v1/conversations/{liked.conversation_id}/messages/{liked.pk}/feedback/",
                             {"rating": "up"}, format="json")
    token_client(owner).put(f"/api/v1/conversations/{conversation.pk}/messages/{answer.pk}/feedback/",
                            {"rating": "down", "comment": COMMENT}, format="json")
    records = token_client(staff).get("/api/v1/feedback/").json()["results"]
    assert [r["rating"] for r in records] == ["down", "up"]
    assert (
        records[0]["question"] == QUESTION
        and records[0]["comment"] == COMMENT
        and records[0]["model"] == "qwen"
    )
    assert token_client(staff).get("/api/v1/feedback/", {"rating": "up"}).json()["count"] == 1
    page = login(staff).get("/chat/feedback/")
    assert (
        page.status_code == 200 and QUESTION in page.content.decode() and "HYPERLINK" in page.content.decode()
    )
    rows = list(csv.DictReader(io.StringIO(login(staff).get("/chat/feedback/export.csv").content.decode())))
    assert rows[0]["question"] == QUESTION and rows[0]["comment"].startswith("'=HYPERLINK")  # never a formula
    lines = login(staff).get("/chat/feedback/export.jsonl").content.decode().splitlines()
    assert [json.loads(line)["rating"] for line in lines] == ["down", "up"]
    for user in (owner, member):
        assert token_client(user).get("/api/v1/feedback/").status_code == 403
        for path in ("/chat/feedback/", "/chat/feedback/export.csv", "/chat/feedback/export.jsonl"):
            assert login(user).get(path).status_code == 403
    assert Client().get("/chat/feedback/").status_code == 302  # anonymous: to the login page


@pytest.mark.django_db(transaction=True)
async def test_the_websocket_rates_answers_of_its_own_conversation_only(users):
    owner, other, _ = users
    try:
        conversation, answer = await database_sync_to_async(_answered)(owner)
        _, foreign = await database_sync_to_async(_answered)(other)
        socket, connected, _ = await open_socket(owner, conversation.pk)
        assert connected
        await socket.receive_json_from()  # chat.ready
        await socket.send_json_to({"type": "chat.feedback", "message": answer.pk, "rating": "down",
                                   "comment": "wrong scope"})
        assert await socket.receive_json_from() == {"type": "chat.feedback", "message": answer.pk,
                                                    "feedback": {"rating": "down", "comment": "wrong scope"}}
        await socket.send_json_to({"type": "chat.feedback", "message": foreign.pk, "rating": "up"})
        assert (await socket.receive_json_from())["code"] == "not_found"
        await socket.send_json_to({"type": "chat.feedback", "message": "x", "rating": "up"})
        assert (await socket.receive_json_from())["code"] == "invalid"
        await socket.disconnect()
        ratings = await database_sync_to_async(
            lambda: list(AnswerFeedback.objects.values_list("message", "rating"))
        )()
        assert ratings == [(answer.pk, -1)]
    finally:
        await database_sync_to_async(connections.close_all)()
