"""Per-group model rights and the admin's default model (chat.model_rights), seen from the outsider's
side: a model kept for a group is not offered to anyone else (page, conversations API, websocket), and
choosing it is a clear error that stores nothing. Two real llama.cpp servers, two models: the
conversation's model is the one that answers."""

from __future__ import annotations

import json

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import Group
from django.test import Client

from chat.model_rights import ModelUnknown, model_for_turn, models_for
from chat.models import Conversation, LLMModel, Message
from tests.plugins.api import error_of, token_client
from tests.plugins.chat import events_until, open_socket
from tests.plugins.llama import slot_tasks

# Port 9 has no listener: servers named there are never reached (these tests refuse before any turn).
UNREACHED = [{"url": "http://127.0.0.1:9", "model": "small"}, {"url": "http://127.0.0.2:9", "model": "big"},
             {"url": "http://127.0.0.3:9", "model": "huge"}]


@pytest.fixture
def team(db) -> Group:
    return Group.objects.create(name="team")


@pytest.fixture
def kept_for_team(settings, team, owner):
    """`big` is the team's (the owner is in it), `huge` the admin's default and open to everyone."""
    settings.LLM_SERVERS = json.dumps(UNREACHED)
    owner.groups.add(team)
    LLMModel.objects.create(name="big").groups.add(team)
    LLMModel.objects.create(name="huge", is_default=True)
    return settings


def test_with_no_rights_set_everyone_may_use_every_served_model(settings, owner, outsider):
    settings.LLM_SERVERS = json.dumps(UNREACHED)
    assert models_for(owner) == models_for(outsider) == ["small", "big", "huge"]
    assert model_for_turn(outsider, "") == "small"  # the first server's model, as before any setting


def test_a_model_kept_for_a_group_is_offered_to_its_members_only(kept_for_team, owner, outsider, staff):
    assert models_for(owner) == ["huge", "small", "big"]  # the admin's default first
    assert models_for(outsider) == ["huge", "small"]
    assert models_for(staff) == ["huge", "small", "big"]  # a superuser may use every model
    assert model_for_turn(outsider, "") == "huge" and model_for_turn(owner, "big") == "big"
    with pytest.raises(ModelUnknown) as refused:
        model_for_turn(outsider, "big")
    assert refused.value.details == {"model": "big", "models": ["huge", "small"]}
    # A default kept for a group is not the outsider's default: his first model is.
    LLMModel.objects.filter(name="huge").update(is_default=False)
    LLMModel.objects.filter(name="big").update(is_default=True)
    assert models_for(owner)[0] == "big" and model_for_turn(outsider, "") == "small"
    # Every model kept from him: a clear error, not a turn sent to a model he may not use.
    LLMModel.objects.create(name="small").groups.add(Group.objects.get(name="team"))
    LLMModel.objects.filter(name="huge").get().groups.add(Group.objects.get(name="team"))
    with pytest.raises(ModelUnknown, match="There is no LLM model you may use"):
        model_for_turn(outsider, "")


def test_the_api_refuses_a_model_kept_for_another_group(kept_for_team, owner, outsider):
    stranger = token_client(outsider)
    refused = stranger.post("/api/v1/conversations/", {"model": "big"}, format="json")
    assert refused.status_code == 400
    assert error_of(refused)["code"] == "llm_model_unknown"
    assert error_of(refused)["details"]["models"] == ["huge", "small"]
    assert not Conversation.objects.filter(owner=outsider).exists()
    mine = stranger.post("/api/v1/conversations/", {"model": "small"}, format="json").json()["id"]
    assert (
        stranger.patch(f"/api/v1/conversations/{mine}/", {"model": "big"}, format="json").status_code == 400
    )
    assert Conversation.objects.get(pk=mine).model == "small"
    created = token_client(owner).post("/api/v1/conversations/", {"model": "big"}, format="json")
    assert created.status_code == 201 and created.json()["model"] == "big"


def test_a_turn_of_a_model_no_longer_his_is_refused_and_stores_nothing(
    kept_for_team, transactional_db, owner, team
):
    client = token_client(owner)
    conversation = client.post("/api/v1/conversations/", {"model": "big"}, format="json").json()["id"]
    owner.groups.remove(team)  # the admin takes him out of the team
    refused = client.post(
        f"/api/v1/conversations/{conversation}/messages/", {"content": "hello"}, format="json"
    )
    assert refused.status_code == 400 and error_of(refused)["code"] == "llm_model_unknown"
    streamed = client.post(
        f"/api/v1/conversations/{conversation}/messages/", {"content": "hello", "stream": True}, format="json"
    )
    assert streamed.status_code == 400 and error_of(streamed)["code"] == "llm_model_unknown"
    assert not Message.objects.filter(conversation_id=conversation).exists()


async def test_the_websocket_says_so_and_stores_nothing(kept_for_team, transactional_db, owner, team):
    conversation = await database_sync_to_async(Conversation.objects.create)(owner=owner, model="big")
    await database_sync_to_async(owner.groups.remove)(team)
    communicator, connected, _ = await open_socket(owner, conversation.pk)
    assert connected
    try:
        await events_until(communicator, "chat.ready")
        await communicator.send_json_to({"type": "chat.send", "content": "hello"})
        error = (await events_until(communicator, "chat.error"))[-1]
    finally:
        await communicator.disconnect()
    assert error["code"] == "llm_model_unknown" and "'big' is not one you may use" in error["error"]
    assert not await database_sync_to_async(Message.objects.filter(conversation=conversation).exists)()


def test_the_page_offers_only_his_models(kept_for_team, owner, outsider):
    page = Client()
    theirs = Conversation.objects.create(owner=outsider)
    page.force_login(outsider)
    html = page.get(f"/chat/{theirs.pk}/").content.decode()
    select = html[
        html.index('<select name="model">') : html.index("</select>", html.index('<select name="model">'))
    ]
    assert ">huge (default)</option>" in select and ">small</option>" in select and "big" not in select
    shown = page.post(f"/chat/{theirs.pk}/settings/", {"model": "big", "token_budget": "500"}, follow=True)
    assert "is not one you may use" in shown.content.decode()
    assert Conversation.objects.get(pk=theirs.pk).model == ""
    mine = Conversation.objects.create(owner=owner)
    page.force_login(owner)
    assert ">big</option>" in page.get(f"/chat/{mine.pk}/").content.decode()


@pytest.fixture
def two_models(chat_settings, llama_server, chat_llama_server, team, owner):
    """Gemma and the packaged chat model on two real llama.cpp servers; the chat model is the team's."""
    chat_settings.LLM_SERVERS = json.dumps([{"url": llama_server.base_url, "model": "gemma", "slots": 2},
                                            {"url": chat_llama_server.base_url, "model": "qwen", "slots": 2}])
    owner.groups.add(team)
    LLMModel.objects.create(name="qwen").groups.add(team)
    return chat_settings


def test_the_conversations_model_answers_on_its_own_server(two_models, transactional_db, owner, llama_server,
                                                           chat_llama_server):
    client = token_client(owner)
    conversation = client.post("/api/v1/conversations/", {"model": "qwen"}, format="json").json()["id"]
    gemma, qwen = slot_tasks(llama_server), slot_tasks(chat_llama_server)
    answered = client.post(f"/api/v1/conversations/{conversation}/messages/", {"content": "Name a colour."},
                           format="json")
    assert answered.status_code == 201, answered.content
    assert answered.json()["message"]["model"] == "qwen"
    assert slot_tasks(chat_llama_server) != qwen and slot_tasks(llama_server) == gemma
    assert (
        client.patch(f"/api/v1/conversations/{conversation}/", {"model": ""}, format="json").status_code
        == 200
    )
    again = client.post(
        f"/api/v1/conversations/{conversation}/messages/", {"content": "And another?"}, format="json"
    )
    assert again.status_code == 201 and again.json()["message"]["model"] == "gemma"  # blank: the default
    assert slot_tasks(llama_server) != gemma
    assert list(Message.objects.filter(conversation_id=conversation, role="assistant")
                .values_list("model", flat=True)) == ["qwen", "gemma"]


def test_the_admin_sets_them_and_sees_which_are_served(kept_for_team, staff, team):
    page = Client()
    page.force_login(staff)
    listed = page.get("/admin/chat/llmmodel/").content.decode()
    assert "big" in listed and "team" in listed and "every user" in listed
    assert "Served now: small, big, huge." in page.get("/admin/chat/llmmodel/add/").content.decode()
    added = page.post("/admin/chat/llmmodel/add/", {"name": "small", "is_default": "on", "groups": [team.pk]})
    assert added.status_code == 200 and "Only one LLM model is the default." in added.content.decode()
    assert not LLMModel.objects.filter(name="small").exists()
    page.post("/admin/chat/llmmodel/add/", {"name": "small", "groups": [team.pk]})
    assert LLMModel.objects.get(name="small").groups.get() == team
