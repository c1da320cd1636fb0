"""The LLM server killed while it streams an answer, for real: a llama.cpp server of this test's
own (the session's is shared) is sent SIGKILL after the first tokens reach the chat. The answer is
stored as cut (status error, the text streamed so far, the reason), the user's socket gets a clear
chat.error and stays open, and once a server is back on the same address the next turn on the same
socket is answered, with no restart of the portal. The same behind a gateway (`LLM_BASE_URL` at a
LiteLLM proxy in front of that server, tests/plugins/gateway.py): the error names the gateway."""

from __future__ import annotations

import signal

import pytest
import yaml
from channels.db import database_sync_to_async
from django.db import connections

from chat.models import Message
from chat.services import conversation_create
from engine.llama_server import LlamaServer
from tests.plugins.chat import events_until, open_socket
from tests.plugins.gateway import running_gateway
from tests.plugins.llama import started

pytestmark = pytest.mark.django_db(transaction=True)
db = database_sync_to_async
LONG = "Tell me a very long tale about the sea, the ships and every sailor on them."


@pytest.fixture(autouse=True)
async def close_sync_thread_connections():
    yield
    await db(connections.close_all)()


def _start(gemma_gguf, port: int = 0) -> LlamaServer:
    return started(LlamaServer(gemma_gguf, port=port, threads=2, ctx_size=2048, parallel=1))


@pytest.fixture
def own_llm(settings, gemma_gguf, tmp_path):
    from core import runtime

    config = tmp_path / "engine.yaml"
    config.write_text(yaml.safe_dump({"max_new_tokens": 400, "llama_context_size": 2048, "temperature": 0.0,
                                      "top_p": 1.0}))
    server = _start(gemma_gguf)
    settings.LLM_BASE_URL, settings.LLM_TIMEOUT_SECONDS = server.base_url, 60
    settings.HDRAG_CONFIG_FILE = str(config)
    settings.DATA_DIR = tmp_path / "data"
    runtime.engine_config.cache_clear()
    servers = [server]
    yield servers
    for running in servers:
        running.stop()
    runtime.engine_config.cache_clear()


def _messages(conversation_id: int) -> list[Message]:
    return list(Message.objects.filter(conversation_id=conversation_id).order_by("id"))


@pytest.fixture
def own_gateway(own_llm, settings):
    """A gateway of this test's own in front of `own_llm`'s server, the portal pointed at it."""
    with running_gateway(f"{own_llm[0].base_url}/v1") as gateway:
        settings.LLM_BASE_URL, settings.LLM_API_KEY, settings.LLM_MODEL = (
            gateway.base_url,
            gateway.key,
            gateway.model,
        )
        yield gateway


async def test_an_answer_cut_by_a_killed_llm_is_stored_cut_and_the_chat_recovers(own_llm, gemma_gguf,
                                                                                   django_user_model):
    await _cut_then_answered(own_llm, gemma_gguf, django_user_model, shown=f"127.0.0.1:{own_llm[0].port}")


async def test_an_answer_cut_by_a_killed_llm_behind_a_gateway_is_stored_cut_and_the_chat_recovers(
        own_llm, own_gateway, gemma_gguf, django_user_model):
    await _cut_then_answered(own_llm, gemma_gguf, django_user_model, shown=own_gateway.base_url)


async def _cut_then_answered(own_llm, gemma_gguf, django_user_model, *, shown: str) -> None:  # noqa: ANN001
    """A turn whose LLM server is killed after its first tokens reach the chat; `shown`: the address
    the error names (the server's, or the gateway's in front of it)."""
    owner = await db(django_user_model.objects.create_user)("owner", password="pw-owner-123")
    conversation = await db(conversation_create)(user=owner, corpus_ids=[], use_memory=False)
    socket, _, _ = await open_socket(owner, conversation.pk)
    await socket.receive_json_from()
    await socket.send_json_to({"type": "chat.send", "content": LONG})
    first = await events_until(socket, "chat.delta")
    server = own_llm[0]
    port = server.port
    server._process.send_signal(signal.SIGKILL)  # noqa: SLF001 - the fault under test: no clean shutdown
    events = await events_until(socket, "chat.done", "chat.error")

    error = events[-1]
    assert error["type"] == "chat.error" and error["code"].startswith("llm_"), error
    assert shown in error["error"]
    streamed = "".join(e["delta"] for e in [*first, *events] if e["type"] == "chat.delta")
    _, cut = await db(_messages)(conversation.pk)
    assert cut.status == "error" and cut.error == error["error"]
    assert cut.content and cut.content == streamed  # what the user saw, kept, and marked as cut

    server.stop()
    own_llm.append(_start(gemma_gguf, port=port))  # the LLM is back, on the same address
    await socket.send_json_to({"type": "chat.send", "content": "Say hello."})
    again = await events_until(socket, "chat.done", "chat.error")
    assert again[-1]["type"] == "chat.done", again[-1]
    answer = (await db(_messages)(conversation.pk))[-1]
    assert answer.status == "complete" and answer.content.strip()
    await socket.disconnect()
