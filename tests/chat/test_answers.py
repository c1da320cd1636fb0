"""Answer controls over the real websocket: regenerate, a conversation's temperature, the loop guard."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from channels.db import database_sync_to_async
from django.db import connections

from chat.models import Conversation, Message
from chat.services import conversation_create
from engine.config import Config
from tests.chat.conftest import TOKEN_BUDGET, events_until, make_corpus, open_socket

pytestmark = pytest.mark.django_db(transaction=True)
db = database_sync_to_async
QUESTION = "What does the yield statement do in a function?"


@pytest.fixture(autouse=True)
async def close_sync_thread_connections():
    yield
    await db(connections.close_all)()


def _messages(conversation_id: int) -> list[Message]:
    return list(Message.objects.filter(conversation_id=conversation_id).order_by("id"))


def _blend(conversation_id: int) -> list[str]:
    return Conversation.objects.get(pk=conversation_id).blend_state.get("responses", [])


async def _turn(socket, message: dict) -> list[dict]:
    await socket.send_json_to(message)
    return await events_until(socket, "chat.done", "chat.error")


async def test_regenerate_answers_the_last_turn_again_and_takes_the_old_answer_back(chat_settings, users,
                                                                                     pydoc_build):
    owner, _, _ = users
    corpus = await db(make_corpus)(owner, pydoc_build)
    conversation = await db(conversation_create)(user=owner, corpus_ids=[corpus.pk], token_budget=TOKEN_BUDGET)
    socket, _, _ = await open_socket(owner, conversation.pk)
    await socket.receive_json_from()
    first = await _turn(socket, {"type": "chat.send", "content": QUESTION})
    assert first[-1]["type"] == "chat.done"
    old_answer = first[-1]["message"]["id"]
    assert len(await db(_blend)(conversation.pk)) == 1

    again = await _turn(socket, {"type": "chat.regenerate"})
    await socket.disconnect()
    assert [e["type"] for e in again][:2] == ["chat.accepted", "chat.memories"] and again[-1]["type"] == "chat.done"
    # The same user turn is answered: no second copy of the question, the old answer is gone.
    assert again[0]["message"]["id"] == first[0]["message"]["id"]
    messages = await db(_messages)(conversation.pk)
    assert [(m.role, m.content) for m in messages[:1]] == [("user", QUESTION)]
    assert [m.role for m in messages] == ["user", "assistant"] and messages[1].pk != old_answer
    # The blend holds the new answer only, as after a first answer.
    assert await db(_blend)(conversation.pk) == [messages[1].content]


async def test_regenerate_with_nothing_to_answer_is_a_clear_error(chat_settings, users):
    owner, _, _ = users
    conversation = await db(conversation_create)(user=owner)
    socket, _, _ = await open_socket(owner, conversation.pk)
    await socket.receive_json_from()
    events = await _turn(socket, {"type": "chat.regenerate"})
    await socket.disconnect()
    assert events == [{"type": "chat.error", "code": "invalid", "error": "There is no question to answer again yet."}]
    assert await db(_messages)(conversation.pk) == []


async def test_a_conversations_temperature_is_what_the_server_samples_with(chat_settings, users, llama_server):
    owner, _, _ = users
    conversation = await db(conversation_create)(user=owner, use_memory=False, temperature=1.25)
    socket, _, _ = await open_socket(owner, conversation.pk)
    await socket.receive_json_from()
    events = await _turn(socket, {"type": "chat.send", "content": "Say hello."})
    await socket.disconnect()
    assert events[-1]["type"] == "chat.done"
    async with httpx.AsyncClient() as http:
        slots = (await http.get(f"{llama_server.base_url}/slots")).json()
    # llama.cpp reports each slot's last sampling parameters; one served this turn, with the
    # conversation's temperature and the engine's other sampling settings.
    served = [slot["params"] for slot in slots if abs(slot.get("params", {}).get("temperature", -1) - 1.25) < 1e-6]
    assert len(served) == 1
    assert served[0]["top_k"] == 20 and abs(served[0]["repeat_penalty"] - 1.05) < 1e-6
    assert served[0]["dry_multiplier"] == Config().dry_multiplier and served[0]["dry_allowed_length"] == 2


async def _looping_llm(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """An OpenAI-compatible server whose answer loops forever (until the client goes away).

    A fake, and the one in this suite: a real model cannot be made to loop on demand, and the
    point is what the portal does when one does."""
    while (await reader.readline()) not in (b"\r\n", b""):
        pass
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
    chunks = ["Yield pauses the function.\n"] + ["It returns a value to the caller and waits.\n"] * 400
    try:
        for text in chunks:
            event = {"choices": [{"delta": {"content": text}, "finish_reason": None}]}
            writer.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            await writer.drain()
            await asyncio.sleep(0.002)
    except (ConnectionResetError, BrokenPipeError):
        return
    finally:
        writer.close()


async def test_a_looping_answer_is_cut_stored_without_its_echo_and_marked(chat_settings, users):
    owner, _, _ = users
    server = await asyncio.start_server(_looping_llm, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    chat_settings.LLM_BASE_URL = f"http://127.0.0.1:{port}"
    conversation = await db(conversation_create)(user=owner, use_memory=False)
    async with server:
        socket, _, _ = await open_socket(owner, conversation.pk)
        await socket.receive_json_from()
        events = await _turn(socket, {"type": "chat.send", "content": QUESTION})
        await socket.disconnect()
    done = events[-1]
    assert done["type"] == "chat.done" and done["status"] == "repetition"
    streamed = sum(e["type"] == "chat.delta" for e in events)
    assert streamed < 30  # stopped within a few repeats, not after 400
    answer = (await db(_messages)(conversation.pk))[-1]
    assert answer.status == "repetition" and answer.finish_reason == "repetition"
    assert answer.content == "Yield pauses the function.\nIt returns a value to the caller and waits."
    assert done["message"]["content"] == answer.content
