"""A model per conversation: the conversation's model is the one its turns go to (the server pool
routes by model), each answer records the model that wrote it, an unknown model is a clear 400, and
another user's conversation (and its model) stays out of reach."""

from __future__ import annotations

import json

import pytest

from chat.models import Conversation, Message
from tests.plugins.api import error_of, token_client

# Nothing listens on port 9: a turn of the model served there is refused by the real network stack,
# which shows that the turn went to that server and not to the llama.cpp one.
DOWN = "http://127.0.0.1:9"


@pytest.fixture
def two_models(chat_settings, llama_server):
    chat_settings.LLM_SERVERS = json.dumps([{"url": llama_server.base_url, "model": "gemma", "slots": 2},
                                            {"url": DOWN, "model": "other", "slots": 1}])
    return chat_settings


def test_an_unknown_model_is_a_clear_400_and_an_outsider_gets_404(two_models, owner, outsider):
    client = token_client(owner)
    refused = client.post("/api/v1/conversations/", {"model": "gpt-9"}, format="json")
    assert refused.status_code == 400
    error = error_of(refused)
    assert error["code"] == "llm_model_unknown" and error["details"]["models"] == ["gemma", "other"]
    assert not Conversation.objects.filter(owner=owner).exists()
    created = client.post("/api/v1/conversations/", {"model": "other"}, format="json")
    assert created.status_code == 201 and created.json()["model"] == "other"
    conversation = created.json()["id"]
    bad = client.patch(f"/api/v1/conversations/{conversation}/", {"model": "gpt-9"}, format="json")
    assert bad.status_code == 400 and error_of(bad)["code"] == "llm_model_unknown"
    assert Conversation.objects.get(pk=conversation).model == "other"
    stranger = token_client(outsider)
    assert stranger.get(f"/api/v1/conversations/{conversation}/").status_code == 404
    assert stranger.patch(f"/api/v1/conversations/{conversation}/", {"model": "gemma"},
                          format="json").status_code == 404
    assert Conversation.objects.get(pk=conversation).model == "other"
    back = client.patch(f"/api/v1/conversations/{conversation}/", {"model": ""}, format="json")
    assert back.status_code == 200 and back.json()["model"] == ""


def test_the_conversations_model_answers_and_is_recorded(two_models, transactional_db, owner):
    client = token_client(owner)
    conversation = client.post("/api/v1/conversations/", {}, format="json").json()["id"]
    answered = client.post(
        f"/api/v1/conversations/{conversation}/messages/", {"content": "hello"}, format="json"
    )
    assert answered.status_code == 201, answered.content
    answer = Message.objects.filter(conversation_id=conversation, role="assistant").last()
    assert answer.status == "complete" and answer.model == "gemma"  # blank: the pool's default model

    assert client.patch(f"/api/v1/conversations/{conversation}/", {"model": "other"},
                        format="json").status_code == 200
    refused = client.post(
        f"/api/v1/conversations/{conversation}/messages/", {"content": "again"}, format="json"
    )
    # The turn went to the server of "other", which refuses: not answered by the llama.cpp one.
    assert refused.status_code == 503 and error_of(refused)["code"] == "llm_unreachable"
    answer = Message.objects.filter(conversation_id=conversation, role="assistant").last()
    assert answer.status == "error" and answer.model == "other" and "127.0.0.1:9" in answer.error


def test_the_page_offers_the_models_saves_one_and_exports_it(two_models, client, owner, outsider):
    conversation = Conversation.objects.create(owner=owner)
    Message.objects.create(conversation=conversation, role="user", content="hi")
    Message.objects.create(conversation=conversation, role="assistant", content="hello", model="other")
    client.force_login(owner)
    page = client.get(f"/chat/{conversation.pk}/").content.decode()
    assert '<select name="model">' in page
    assert page.index(">gemma (default)</option>") < page.index(">other</option>")
    client.post(f"/chat/{conversation.pk}/settings/", {"model": "other", "token_budget": "500"})
    assert Conversation.objects.get(pk=conversation.pk).model == "other"
    refused = client.post(f"/chat/{conversation.pk}/settings/", {"model": "gpt-9"}, follow=True)
    assert "is not one you may use" in refused.content.decode()
    assert Conversation.objects.get(pk=conversation.pk).model == "other"
    assert "_Model: other_" in client.get(f"/chat/{conversation.pk}/export.md").content.decode()
    jsonl = json.loads(client.get(f"/chat/{conversation.pk}/export.jsonl").content)
    assert jsonl["conversations"][1]["model"] == "other"
    client.force_login(outsider)
    assert client.post(f"/chat/{conversation.pk}/settings/", {"model": "gemma"}).status_code == 404
    assert Conversation.objects.get(pk=conversation.pk).model == "other"
