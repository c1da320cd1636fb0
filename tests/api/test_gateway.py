"""The portal on a server that offers only the standard OpenAI endpoints and requires a key: the
session's llama.cpp behind a real LiteLLM proxy on loopback (tests/plugins/gateway.py). A chat turn
over the websocket with memories, citations and a stop; the portal's OpenAI-compatible endpoint
with the official `openai` client; a wrong key is `llm_unauthorized` (the chat says so, 502 on
both APIs); and the key is in no page, log line, error or export."""

from __future__ import annotations

import logging

import httpx
import openai
import pytest
from channels.db import database_sync_to_async
from django.db import connections
from django.test import Client

from accounts.services.tokens import api_token_create
from chat.models import Message
from chat.services import conversation_create
from engine.llm.client import LLMClient
from engine.llm.sampling import GenerationSettings
from tests.plugins.api import error_of
from tests.plugins.chat import TOKEN_BUDGET, events_until, make_corpus, open_socket, set_engine_config

pytestmark = pytest.mark.django_db(transaction=True)
db = database_sync_to_async
QUESTION = "How does a generator function pause at yield and resume where it left off?"
WRONG_KEY = "sk-not-the-gateways-key-4b2f"


@pytest.fixture
def gateway_settings(chat_settings, llm_gateway):
    """The portal pointed at the gateway, with its key and its name for the model."""
    chat_settings.LLM_BASE_URL = llm_gateway.base_url
    chat_settings.LLM_API_KEY = llm_gateway.key
    chat_settings.LLM_MODEL = llm_gateway.model
    yield chat_settings
    connections.close_all()


@pytest.fixture
def secret(owner) -> str:
    return api_token_create(user=owner, name="gateway tests")[1]


async def test_the_gateway_offers_the_standard_endpoints_only_and_streams_log_probabilities(llm_gateway):
    client = LLMClient(llm_gateway.base_url, api_key=llm_gateway.key, model=llm_gateway.model)
    chunks = [chunk async for chunk in client.stream_chat([{"role": "user", "content": "Name a colour."}],
                                                          GenerationSettings(temperature=0.0, max_tokens=8))]
    text = "".join(chunk.delta for chunk in chunks)
    tokens = [token for chunk in chunks for token in chunk.tokens]
    # Certainty from the standard `logprobs` field, passed through by the gateway: every byte placed.
    assert text.strip() and sum(token.size for token in tokens) == len(text.encode("utf-8"))
    assert all(token.logprob <= 0 for token in tokens)
    assert chunks[-1].usage is not None
    # llama.cpp's extras are not there: learnt once, and not asked again.
    assert await client.count_tokens("hello") is None
    assert await client.continues_prefill() is False
    assert client.offered.known() == {"tokenize": False, "apply-template": False}


async def test_a_chat_turn_through_the_gateway_has_memories_citations_and_stops(
    gateway_settings, owner, pydoc_build, tmp_path
):
    corpus = await db(make_corpus)(owner, pydoc_build)
    conversation = await db(conversation_create)(
        user=owner, corpus_ids=[corpus.pk], token_budget=TOKEN_BUDGET
    )
    socket, connected, _ = await open_socket(owner, conversation.pk)
    assert connected
    await socket.receive_json_from()
    await socket.send_json_to({"type": "chat.send", "content": QUESTION})
    events = await events_until(socket, "chat.done", "chat.error")
    done = events[-1]
    assert done["type"] == "chat.done" and done["status"] == "complete", done
    assert events[1]["type"] == "chat.memories" and events[1]["memories"]
    answer = "".join(e["delta"] for e in events if e["type"] == "chat.delta")
    assert answer.strip() and done["message"]["content"] == answer
    assert done["citations"] and "".join(c["text"] for c in done["citations"]).strip()
    assert done["usage"]["completion_tokens"] > 0

    set_engine_config(gateway_settings, tmp_path, max_new_tokens=1500)
    await socket.send_json_to(
        {"type": "chat.send", "content": "Write a very long story about a dragon and a city."}
    )
    received: list[dict] = []

    async def stop_after_three(event: dict) -> None:
        received.append(event)
        if sum(e["type"] == "chat.delta" for e in received) == 3:
            await socket.send_json_to({"type": "chat.stop"})

    stopped = await events_until(socket, "chat.done", "chat.error", on_event=stop_after_three)
    await socket.disconnect()
    assert stopped[-1]["type"] == "chat.done" and stopped[-1]["status"] == "stopped"
    last = await db(lambda: Message.objects.filter(conversation=conversation).order_by("id").last())()
    assert last.status == "stopped" and last.content == "".join(
        e["delta"] for e in stopped if e["type"] == "chat.delta"
    )


def test_the_openai_client_through_the_portal_through_the_gateway(gateway_settings, live_api, owner, secret,
                                                                  pydoc_build):
    corpus = make_corpus(owner, pydoc_build)
    client = openai.OpenAI(base_url=f"{live_api.url}/api/v1", api_key=secret, max_retries=0, timeout=120)
    assert f"corpus-{corpus.pk}" in [model.id for model in client.models.list()]
    stream = client.chat.completions.create(model=f"corpus-{corpus.pk}", stream=True, max_tokens=24,
                                            messages=[{"role": "user", "content": QUESTION}])
    chunks = list(stream)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text.strip() and chunks[-1].choices[0].finish_reason in ("stop", "length")
    whole = client.chat.completions.create(model=f"corpus-{corpus.pk}", max_tokens=16,
                                           messages=[{"role": "user", "content": QUESTION}])
    assert whole.choices[0].message.content.strip() and whole.usage.completion_tokens > 0


async def _chat_error(owner, conversation_id: int) -> dict:
    socket, _, _ = await open_socket(owner, conversation_id)
    await socket.receive_json_from()
    await socket.send_json_to({"type": "chat.send", "content": QUESTION})
    events = await events_until(socket, "chat.done", "chat.error")
    await socket.disconnect()
    return events[-1]


def test_a_wrong_key_is_a_clear_error_and_no_key_is_shown_anywhere(gateway_settings, live_api, owner, secret,
                                                                   pydoc_build, caplog, llm_gateway):
    caplog.set_level(logging.DEBUG)
    corpus = make_corpus(owner, pydoc_build)
    conversation = conversation_create(user=owner, corpus_ids=[corpus.pk], token_budget=TOKEN_BUDGET)
    gateway_settings.LLM_API_KEY = WRONG_KEY

    error = async_run(_chat_error(owner, conversation.pk))
    assert error["type"] == "chat.error" and error["code"] == "llm_unauthorized"
    assert llm_gateway.base_url in error["error"] and "refused the portal's credentials" in error["error"]
    stored = Message.objects.filter(conversation=conversation, role="assistant").get()
    assert stored.status == "error" and stored.error == error["error"]

    base, headers = f"{live_api.url}/api/v1", {"Authorization": f"Bearer {secret}"}
    texts = [error["error"]]
    with httpx.Client(headers=headers, timeout=120) as http:
        turn = http.post(f"{base}/conversations/{conversation.pk}/messages/", json={"content": QUESTION})
        assert turn.status_code == 502 and error_of(turn)["code"] == "llm_unauthorized", turn.text
        whole = http.post(f"{base}/chat/completions", json={"model": "none", "messages": [
            {"role": "user", "content": "Hello?"}]})
        assert whole.status_code == 502 and error_of(whole)["code"] == "llm_unauthorized", whole.text
        streamed = http.post(f"{base}/chat/completions", json={"model": "none", "stream": True, "messages": [
            {"role": "user", "content": "Hello?"}]})
        assert '"code": "llm_unauthorized"' in streamed.text
        texts += [turn.text, whole.text, streamed.text]
        for fmt in ("jsonl", "md"):
            texts.append(
                http.get(f"{base}/conversations/{conversation.pk}/export/", params={"format": fmt}).text
            )
        texts.append(http.get(f"{base}/conversations/{conversation.pk}/messages/").text)
    client = openai.OpenAI(base_url=f"{live_api.url}/api/v1", api_key=secret, max_retries=0, timeout=120)
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(model="none", messages=[{"role": "user", "content": "Hello?"}])
    assert refused.value.status_code == 502

    owner.is_staff = owner.is_superuser = True
    owner.save()
    page = Client()
    page.force_login(owner)
    for path in ("/", "/chat/", f"/chat/{conversation.pk}/", f"/chat/{conversation.pk}/export.md",
                 f"/chat/{conversation.pk}/export.jsonl", "/admin/chat/message/"):
        response = page.get(path, follow=True)
        assert response.status_code == 200, path
        texts.append(response.content.decode())
    texts.append(caplog.text)
    texts += [str(record.args) for record in caplog.records]
    everything = "\n".join(texts)
    assert "refused the portal's credentials" in everything
    for key in (WRONG_KEY, llm_gateway.key):
        assert key not in everything


def async_run(coroutine):  # noqa: ANN001, ANN201 - a test helper: one coroutine run to its end
    from asgiref.sync import async_to_sync

    async def run():  # noqa: ANN202
        return await coroutine

    return async_to_sync(run)()
