"""Two real llama.cpp servers in LLM_SERVERS, 8 users chatting at once through the real websocket
consumer, and one server sent SIGKILL while an answer streams on it, with the queue in this process
and with the queue in Redis. The answers streaming there end with a clear error and are stored as cut
(status error, the text the user saw, the reason), every other answer arrives whole, every user turn
is kept; the next turns are all answered by the other server; restarted on the same port, the killed
server is used again."""

from __future__ import annotations

import asyncio
import json
import signal

import pytest
import yaml
from channels.db import database_sync_to_async
from django.db import connections

from chat.llm import clients
from chat.models import Message
from chat.services import conversation_create
from engine.llama_server import LlamaServer
from tests.plugins.chat import events_until, open_socket
from tests.plugins.llama import started
from tests.plugins.services import redis_namespaces_delete
from tests.plugins.waiting import wait_until_async

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.service]
db = database_sync_to_async
USERS = 8
LONG = "Tell me a very long tale about the sea, the ships and every sailor on them."
SHORT = "Say hello."
RETRY_SECONDS = 3.0  # a server taken out is tried again after this (the portal's default is longer)


@pytest.fixture(autouse=True)
async def close_sync_thread_connections():
    yield
    await db(connections.close_all)()


def _start(gemma_gguf, port: int = 0) -> LlamaServer:
    return started(LlamaServer(gemma_gguf, port=port, threads=1, ctx_size=2048, parallel=2))


@pytest.fixture(params=["in-process", "redis"])
def two_llms(request, settings, gemma_gguf, tmp_path, redis_url):
    """Two llama.cpp servers of 2 slots in LLM_SERVERS, the queue in this process or in Redis; a list
    the test may append a restarted server to (all are stopped after)."""
    from core import runtime

    config = tmp_path / "engine.yaml"
    config.write_text(yaml.safe_dump({"max_new_tokens": 150, "llama_context_size": 2048, "temperature": 0.0,
                                      "top_p": 1.0}))
    servers = [_start(gemma_gguf), _start(gemma_gguf)]
    settings.LLM_SERVERS = json.dumps(
        [{"url": server.base_url, "model": "gemma", "slots": 2} for server in servers]
    )
    settings.LLM_TIMEOUT_SECONDS = 300
    settings.LLM_QUEUE_REDIS_URL = redis_url if request.param == "redis" else ""
    settings.HDRAG_CONFIG_FILE = str(config)
    settings.DATA_DIR = tmp_path / "data"
    runtime.engine_config.cache_clear()
    clients.server_pool().retry_seconds = RETRY_SECONDS
    running = list(servers)
    yield running
    for server in running:
        server.stop()
    if request.param == "redis":
        redis_namespaces_delete(redis_url, [clients.llm_queue().namespace])
    runtime.engine_config.cache_clear()


def _stored(conversation_id: int) -> list[Message]:
    return list(Message.objects.filter(conversation_id=conversation_id).order_by("id"))


async def _chat_round(sockets: list, content: str, on_event=None) -> list[list[dict]]:
    """Every user sends `content` at once; each socket's events up to its turn's end."""
    for socket in sockets:
        await socket.send_json_to({"type": "chat.send", "content": content})
    return list(
        await asyncio.gather(
            *(
                events_until(
                    socket,
                    "chat.done",
                    "chat.error",
                    timeout=600,
                    on_event=on_event and (lambda event, n=n: on_event(n, event)),
                )
                for n, socket in enumerate(sockets)
            )
        )
    )


def _streamed(events: list[dict]) -> str:
    return "".join(event["delta"] for event in events if event["type"] == "chat.delta")


async def test_a_server_killed_while_8_users_chat_loses_nothing_and_comes_back(two_llms, gemma_gguf,
                                                                                django_user_model):
    pool = clients.server_pool()
    users = [await db(django_user_model.objects.create_user)(f"user{n}", password=f"pw-user{n}-123")
             for n in range(USERS)]
    conversations = [
        await db(conversation_create)(user=user, corpus_ids=[], use_memory=False) for user in users
    ]
    sockets = [
        (await open_socket(user, conversation.pk))[0]
        for user, conversation in zip(users, conversations, strict=True)
    ]
    for socket in sockets:
        await socket.receive_json_from()
    victim, survivor = two_llms
    port = victim.port

    async def kill_once_streaming_there(n: int, event: dict) -> None:
        # The first piece of an answer on the victim: it is streaming there now. No clean shutdown.
        if event["type"] == "chat.delta" and victim.running and \
                pool.last_server(conversations[n].pk) == victim.base_url:
            victim._process.send_signal(signal.SIGKILL)  # noqa: SLF001 - the fault under test

    ends = await _chat_round(sockets, LONG, kill_once_streaming_there)
    assert victim._process.poll() is not None, "no answer streamed on the victim"  # noqa: SLF001
    cut = 0
    for conversation, events in zip(conversations, ends, strict=True):
        question, answer = await db(_stored)(conversation.pk)
        assert question.role == "user" and question.content == LONG  # every user turn kept
        assert answer.content == _streamed(events)  # stored as the user saw it, whole or cut
        if events[-1]["type"] == "chat.error":
            cut += 1
            assert events[-1]["code"].startswith("llm_") and f"127.0.0.1:{port}" in events[-1]["error"]
            assert answer.status == "error" and answer.error == events[-1]["error"]
            assert pool.last_server(conversation.pk) == victim.base_url
        else:
            assert answer.status == "complete" and answer.content.strip()
    assert 1 <= cut <= 2  # the answers streaming on the victim (2 slots); the waiting ones went elsewhere

    # Every new turn is answered by the other server.
    again = await _chat_round(sockets, SHORT)
    assert [events[-1]["type"] for events in again] == ["chat.done"] * USERS
    assert {pool.last_server(conversation.pk) for conversation in conversations} == {survivor.base_url}

    # Restarted on the same port: once its time out is over it is up, and used again.
    two_llms.append(_start(gemma_gguf, port=port))
    await wait_until_async(
        lambda: all(entry["up"] for entry in pool.status()), what="the restarted server up", timeout=120
    )
    back = await _chat_round(sockets, LONG)
    assert [events[-1]["type"] for events in back] == ["chat.done"] * USERS
    assert victim.base_url in {pool.last_server(conversation.pk) for conversation in conversations}
    for conversation in conversations:
        stored = await db(_stored)(conversation.pk)
        assert [message.role for message in stored] == ["user", "assistant"] * 3
    for socket in sockets:
        await socket.disconnect()
