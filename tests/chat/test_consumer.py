"""The chat websocket end to end: real ASGI app, real llama.cpp server, real Gemma, real corpus."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from channels.db import database_sync_to_async
from django.db import connections

from chat.models import Conversation, Message, MessageMemory
from chat.services import conversation_create, message_create_assistant, message_create_user
from corpus.models import Memory
from engine.llama_server import free_port
from engine.spm import GGUFTokenizer
from tests.plugins.chat import (
    CONTEXT_SIZE,
    MAX_NEW_TOKENS,
    TOKEN_BUDGET,
    events_until,
    make_corpus,
    open_socket,
    set_engine_config,
)
from tests.plugins.waiting import wait_until_async

pytestmark = pytest.mark.django_db(transaction=True)
db = database_sync_to_async


@pytest.fixture(autouse=True)
async def close_sync_thread_connections():
    """The consumer's SQL runs on asgiref's one sync thread, whose connection would otherwise
    stay open past the test (PostgreSQL then refuses to drop the test database)."""
    yield
    await db(connections.close_all)()

QUESTION = "How does a generator function pause at yield and resume where it left off?"


def _conversation(user, corpora=(), **options) -> Conversation:
    return conversation_create(
        user=user, corpus_ids=[c.pk for c in corpora], token_budget=TOKEN_BUDGET, **options
    )


def _types(events: list[dict]) -> list[str]:
    return [e["type"] for e in events]


def _deltas(events: list[dict]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "chat.delta")


def _messages(conversation_id: int) -> list[Message]:
    return list(Message.objects.filter(conversation_id=conversation_id).order_by("id"))


def _blend(conversation_id: int) -> list[str]:
    return Conversation.objects.get(pk=conversation_id).blend_state.get("responses", [])


async def test_full_exchange_streams_and_stores_the_answer_with_its_memories(
    chat_settings, users, pydoc_build
):
    owner, _, _ = users
    corpus = await db(make_corpus)(owner, pydoc_build)
    conversation = await db(_conversation)(owner, [corpus])
    socket, connected, _ = await open_socket(owner, conversation.pk)
    assert connected
    assert await socket.receive_json_from() == {"type": "chat.ready", "conversation": conversation.pk,
                                                "blend_turns": 0}

    await socket.send_json_to({"type": "chat.send", "content": QUESTION})
    events = await events_until(socket, "chat.done", "chat.error")
    await socket.disconnect()

    types = _types(events)
    assert types[:2] == ["chat.accepted", "chat.memories"] and types[-1] == "chat.done"
    assert types.count("chat.delta") >= 3 and set(types[2:-1]) == {"chat.delta"}
    memories = events[1]["memories"]
    assert memories, "the question is about a topic of the corpus; retrieval must find memories"
    assert sum(m["token_count"] for m in memories) <= TOKEN_BUDGET
    assert [m["score"] for m in memories][0] == max(m["score"] for m in memories)

    user_message, answer = await db(_messages)(conversation.pk)
    assert (user_message.role, user_message.content) == ("user", QUESTION)
    assert events[0]["message"]["id"] == user_message.pk
    assert answer.role == "assistant" and answer.status == "complete"
    assert answer.content == _deltas(events) and answer.content.strip()
    assert 0 < answer.completion_tokens <= MAX_NEW_TOKENS
    # The server's count of the prompt stays within our upper-bound estimate and the context budget.
    assert answer.prompt_tokens <= events[1]["prompt_tokens_estimate"] <= CONTEXT_SIZE - MAX_NEW_TOKENS
    assert events[-1]["message"]["id"] == answer.pk and events[-1]["status"] == "complete"

    stored = await db(lambda: list(MessageMemory.objects.filter(message=answer).order_by("rank")))()
    assert [m.memory_id for m in stored] == [m["memory_id"] for m in memories]
    # The streamed memories carry the ranks they are stored with (0 = the best), never null.
    assert [m["rank"] for m in memories] == [m.rank for m in stored] == list(range(len(stored)))
    assert [m.score for m in stored] == [m["score"] for m in memories]
    rows = await db(lambda: {m.pk: m for m in Memory.objects.filter(pk__in=[s.memory_id for s in stored])})()
    for snapshot in stored:
        row = rows[snapshot.memory_id]
        assert snapshot.excerpt == row.text[:MessageMemory.EXCERPT_CHARS]
        assert (snapshot.memory_key, snapshot.corpus_name, snapshot.source) == (
            row.content_hash, "pydoc", "pydoc-topics.jsonl")
    # The answer joined the conversation's blend, on the row.
    assert await db(_blend)(conversation.pk) == [answer.content]
    assert events[-1]["blend_turns"] == 1


async def test_memory_snapshot_survives_the_memory_rows(chat_settings, users, pydoc_build):
    owner, _, _ = users
    corpus = await db(make_corpus)(owner, pydoc_build)
    conversation = await db(_conversation)(owner, [corpus])
    socket, _, _ = await open_socket(owner, conversation.pk)
    await socket.receive_json_from()
    await socket.send_json_to({"type": "chat.send", "content": QUESTION})
    events = await events_until(socket, "chat.done", "chat.error")
    await socket.disconnect()
    excerpts = [m["excerpt"] for m in events[-1]["message"]["memories"]]
    assert excerpts
    # A rebuild deletes the old build's memory rows; what primed the answer stays readable.
    await db(lambda: Memory.objects.all().delete())()
    kept = await db(
        lambda: list(MessageMemory.objects.order_by("rank").values_list("memory_id", "excerpt"))
    )()
    assert kept == [(None, text) for text in excerpts]


STOP_SECONDS = 3.0


async def _processing_slots(base_url: str) -> int:
    async with httpx.AsyncClient() as http:
        return sum(slot["is_processing"] for slot in (await http.get(f"{base_url}/slots")).json())


async def _generation_stops(base_url: str) -> None:
    """llama.cpp stops generating for a closed stream within STOP_SECONDS. The bound is the check:
    the answer asked for takes tens of seconds, so a server that kept generating would still be busy."""
    async def idle() -> bool:
        return await _processing_slots(base_url) == 0

    await wait_until_async(idle, what="llama.cpp stopping the closed stream", timeout=STOP_SECONDS, every=0.1)


async def test_stop_mid_stream_keeps_the_partial_answer(
    chat_settings, users, pydoc_build, llama_server, tmp_path
):
    owner, _, _ = users
    set_engine_config(chat_settings, tmp_path, max_new_tokens=1500)
    conversation = await db(_conversation)(owner, use_memory=False)
    socket, _, _ = await open_socket(owner, conversation.pk)
    await socket.receive_json_from()
    await socket.send_json_to(
        {"type": "chat.send", "content": "Write a very long story about a dragon and a city."}
    )
    received = []

    async def stop_after_three(event):
        received.append(event)
        if sum(e["type"] == "chat.delta" for e in received) == 3:
            await socket.send_json_to({"type": "chat.stop"})

    events = await events_until(socket, "chat.done", "chat.error", on_event=stop_after_three)
    assert events[-1]["type"] == "chat.done" and events[-1]["status"] == "stopped"
    deltas = _deltas(events)
    _, answer = await db(_messages)(conversation.pk)
    assert answer.status == "stopped" and answer.content == deltas
    assert 3 <= sum(e["type"] == "chat.delta" for e in events) < 1500
    assert answer.completion_tokens is None
    # Stopping closed the HTTP stream: llama.cpp is no longer generating for it.
    await _generation_stops(llama_server.base_url)
    # The user saw the partial answer: it steers retrieval like a complete one.
    assert await db(_blend)(conversation.pk) == [deltas]
    # The connection is still usable after a stop.
    await socket.send_json_to({"type": "chat.send", "content": "Thanks."})
    set_engine_config(chat_settings, tmp_path, max_new_tokens=8)
    again = await events_until(socket, "chat.done", "chat.error")
    assert again[-1]["type"] == "chat.done" and again[-1]["status"] == "complete"
    await socket.disconnect()


async def test_disconnect_mid_stream_stores_the_partial_answer(chat_settings, users, llama_server, tmp_path):
    owner, _, _ = users
    set_engine_config(chat_settings, tmp_path, max_new_tokens=1500)
    conversation = await db(_conversation)(owner, use_memory=False)
    socket, _, _ = await open_socket(owner, conversation.pk)
    await socket.receive_json_from()
    await socket.send_json_to({"type": "chat.send", "content": "Tell me a very long tale about the sea."})
    await events_until(socket, "chat.delta")
    await socket.disconnect()
    _, answer = await db(_messages)(conversation.pk)
    assert answer.status == "stopped" and answer.content
    await _generation_stops(llama_server.base_url)


async def test_llm_down_gives_a_clear_error_and_keeps_the_user_turn(chat_settings, users, pydoc_build):
    owner, _, _ = users
    port = free_port()
    chat_settings.LLM_BASE_URL = f"http://127.0.0.1:{port}"
    corpus = await db(make_corpus)(owner, pydoc_build)
    conversation = await db(_conversation)(owner, [corpus])
    socket, _, _ = await open_socket(owner, conversation.pk)
    await socket.receive_json_from()
    await socket.send_json_to({"type": "chat.send", "content": QUESTION})
    events = await events_until(socket, "chat.done", "chat.error")

    assert _types(events) == ["chat.accepted", "chat.memories", "chat.error"]
    error = events[-1]
    assert error["code"] == "llm_unreachable"
    assert f"127.0.0.1:{port}" in error["error"] and "unreachable" in error["error"]
    user_message, failed = await db(_messages)(conversation.pk)
    assert (user_message.role, user_message.content) == ("user", QUESTION)
    assert failed.status == "error" and failed.error == error["error"] and failed.content == ""
    assert error["message"]["id"] == failed.pk
    assert await db(_blend)(conversation.pk) == []
    # The connection survives; a retry once the server is back works on the same socket.
    chat_settings.LLM_BASE_URL = chat_settings.LLM_BASE_URL.replace(str(port), str(free_port()))
    await socket.send_json_to({"type": "chat.send", "content": "Again?"})
    assert (await events_until(socket, "chat.error"))[-1]["code"] == "llm_unreachable"
    await socket.disconnect()
    # Failed answers without text are not part of the history the model sees.
    from chat.selectors import conversation_history

    history = await db(conversation_history)(conversation_id=conversation.pk)
    assert history == [("user", QUESTION), ("user", "Again?")]


async def _closed_with(user, conversation_id: int) -> dict:
    """The first thing the server sends: for a refused client, the close (no event before it)."""
    socket, connected, _ = await open_socket(user, conversation_id)
    assert connected  # accepted only to deliver the close code a browser can read
    first = await socket.receive_output(timeout=10)
    await socket.wait()
    return first


async def test_outsiders_and_anonymous_users_cannot_connect(chat_settings, users):
    owner, other, _ = users
    conversation = await db(_conversation)(owner)
    assert await _closed_with(other, conversation.pk) == {"type": "websocket.close", "code": 4404}
    assert await _closed_with(None, conversation.pk) == {"type": "websocket.close", "code": 4401}
    assert await _closed_with(owner, conversation.pk + 1000) == {"type": "websocket.close", "code": 4404}
    socket, connected, _ = await open_socket(owner, conversation.pk)
    assert connected and (await socket.receive_json_from())["type"] == "chat.ready"
    await socket.disconnect()
    assert await db(lambda: Message.objects.count())() == 0


async def test_two_users_chatting_at_once_keep_separate_streams_and_blends(chat_settings, users, pydoc_build):
    owner, other, _ = users
    corpus = await db(make_corpus)(owner, pydoc_build, visibility="everyone")
    first = await db(_conversation)(owner, [corpus])
    # The base model of the tests echoes its prompt under greedy sampling, whatever the question:
    # the second conversation samples hot (its own temperature), so the two streams differ.
    second = await db(_conversation)(other, [corpus], temperature=2.0)
    socket_a, _, _ = await open_socket(owner, first.pk)
    socket_b, _, _ = await open_socket(other, second.pk)
    await socket_a.receive_json_from()
    await socket_b.receive_json_from()

    async def turn(socket, content):
        await socket.send_json_to({"type": "chat.send", "content": content})
        return await events_until(socket, "chat.done", "chat.error")

    events_a, events_b = await asyncio.gather(
        turn(socket_a, QUESTION),
        turn(socket_b, "Format specification mini-language: fill, align, sign, width and precision fields."))
    assert events_a[-1]["type"] == events_b[-1]["type"] == "chat.done"
    answer_a = (await db(_messages)(first.pk))[-1].content
    answer_b = (await db(_messages)(second.pk))[-1].content
    # Each socket carried exactly its own conversation's stream.
    assert _deltas(events_a) == answer_a and _deltas(events_b) == answer_b
    assert answer_a != answer_b
    assert await db(_blend)(first.pk) == [answer_a]
    assert await db(_blend)(second.pk) == [answer_b]

    # A second turn in one conversation shifts only its own blend.
    events_a2 = await turn(socket_a, "And then?")
    answer_a2 = (await db(_messages)(first.pk))[-1].content
    assert events_a2[-1]["blend_turns"] == 2
    assert await db(_blend)(first.pk) == [answer_a, answer_a2]
    assert await db(_blend)(second.pk) == [answer_b]
    await socket_a.disconnect()
    await socket_b.disconnect()

    # The blend is on the row: a new connection (a reconnect, or a restarted server) sees it.
    socket_a, connected, _ = await open_socket(owner, first.pk)
    assert connected and (await socket_a.receive_json_from())["blend_turns"] == 2
    await socket_a.disconnect()


async def test_long_history_is_truncated_oldest_first_within_the_budget(chat_settings, users, tmp_path,
                                                                       pydoc_build):
    owner, _, _ = users
    context_size, generation = 700, 16
    set_engine_config(chat_settings, tmp_path, llama_context_size=context_size, max_new_tokens=generation)
    conversation = await db(_conversation)(owner, use_memory=False)

    def seed_history():
        for number in range(12):
            message_create_user(
                conversation_id=conversation.pk, content=f"Question {number}: " + "tell me more " * 15
            )
            message_create_assistant(
                conversation_id=conversation.pk,
                content=f"Answer {number}: " + "the river " * 20,
                status="complete",
            )

    await db(seed_history)()
    socket, _, _ = await open_socket(owner, conversation.pk)
    await socket.receive_json_from()
    await socket.send_json_to({"type": "chat.send", "content": "What was the first question?"})
    events = await events_until(socket, "chat.done", "chat.error")
    await socket.disconnect()
    assert events[-1]["type"] == "chat.done", events[-1]
    memories_event = events[1]
    dropped, estimate = memories_event["history_dropped"], memories_event["prompt_tokens_estimate"]
    assert 0 < dropped < 24 and dropped % 2 == 0  # whole exchanges, oldest first
    assert estimate <= context_size - generation
    answer = (await db(_messages)(conversation.pk))[-1]
    # The real server's own count of the prompt it received, plus the generation reserve, fits.
    assert answer.prompt_tokens <= estimate
    assert answer.prompt_tokens + generation <= context_size
    # What was kept is the most recent history: it must not fit with one more exchange.
    tokenizer = GGUFTokenizer.from_gguf(pydoc_build.gguf_path)
    oldest_kept = dropped // 2
    extra = sum(
        tokenizer.count_tokens(text) + 6
        for text in (
            f"Question {oldest_kept - 1}: " + "tell me more " * 15,
            f"Answer {oldest_kept - 1}: " + "the river " * 20,
        )
    )
    assert estimate + extra > context_size - generation


async def test_protocol_errors_are_reported_not_fatal(chat_settings, users, tmp_path):
    owner, _, _ = users
    set_engine_config(chat_settings, tmp_path, max_new_tokens=400)
    conversation = await db(_conversation)(owner, use_memory=False)
    socket, _, _ = await open_socket(owner, conversation.pk)
    await socket.receive_json_from()
    await socket.send_json_to({"type": "chat.dance"})
    assert (await socket.receive_json_from())["code"] == "unknown_type"
    await socket.send_json_to({"type": "chat.send", "content": "   "})
    assert (await socket.receive_json_from())["code"] == "invalid"
    await socket.send_json_to({"type": "chat.send", "content": "Write a long poem about rain."})
    await events_until(socket, "chat.delta")
    await socket.send_json_to({"type": "chat.send", "content": "Another one while busy"})
    events = await events_until(socket, "chat.error")
    assert events[-1]["code"] == "busy"
    await socket.send_json_to({"type": "chat.stop"})
    await events_until(socket, "chat.done")
    await socket.disconnect()
    contents = await db(lambda: list(Message.objects.filter(role="user").values_list("content", flat=True)))()
    assert contents == ["Write a long poem about rain."]


async def test_a_broken_corpus_is_reported_and_the_turn_kept(chat_settings, users, pydoc_build, tmp_path):
    owner, _, _ = users
    corpus = await db(make_corpus)(owner, pydoc_build)
    # The active build's files are gone (a disk cleaned by hand): retrieval cannot load it.
    from corpus.models import IndexBuild

    await db(lambda: IndexBuild.objects.filter(pk=corpus.active_build_id).update(
        build_dir=str(tmp_path / "vanished")))()
    conversation = await db(_conversation)(owner, [corpus])
    socket, _, _ = await open_socket(owner, conversation.pk)
    await socket.receive_json_from()
    await socket.send_json_to({"type": "chat.send", "content": QUESTION})
    events = await events_until(socket, "chat.done", "chat.error")
    await socket.disconnect()
    assert _types(events) == ["chat.accepted", "chat.error"]
    # The browser is told what is missing and what to do, never the server's path.
    assert events[-1]["code"] == "retrieval" and "index files" in events[-1]["error"]
    assert "rebuild the corpus" in events[-1]["error"] and "vanished" not in events[-1]["error"]
    user_message, failed = await db(_messages)(conversation.pk)
    assert user_message.content == QUESTION and failed.status == "error"


def _turn_memories(conversation_id: int, query: str) -> list[int]:
    from chat.preparation import ConversationState, turn_memories

    conversation = Conversation.objects.get(pk=conversation_id)
    results = turn_memories(user=conversation.owner, state=ConversationState.of_conversation(conversation),
                            question=query, token_budget=TOKEN_BUDGET)
    return [r.memory.hdv_idx for r in results]


async def test_retrieval_uses_the_conversations_own_blend(chat_settings, users, pydoc_build):
    owner, _, _ = users
    corpus = await db(make_corpus)(owner, pydoc_build)
    steered = await db(_conversation)(owner, [corpus])
    fresh = await db(_conversation)(owner, [corpus])
    from chat.services import conversation_add_response

    response = "Generators pause at each yield and resume where they left off when next() is called."
    await db(conversation_add_response)(conversation_id=steered.pk, text=response)
    follow_up = "and then?"

    def reference(blend) -> list[int]:  # noqa: ANN001 - BlendState | None
        from memory.services import memories_search

        results = memories_search(user=owner, corpus_ids=[corpus.pk], query=follow_up, blend=blend,
                                  token_budget=TOKEN_BUDGET)
        return [r.memory.hdv_idx for r in results]

    from engine.query import BlendState

    with_blend = await db(_turn_memories)(steered.pk, follow_up)
    without = await db(_turn_memories)(fresh.pk, follow_up)
    # Each conversation searched with exactly its own stored blend, and the blend mattered.
    assert with_blend == await db(reference)(BlendState([response]))
    assert without == await db(reference)(None)
    assert with_blend != without
    assert await db(_blend)(fresh.pk) == []


# ---------------------------------------------------------------- the queue into the LLM (issue 26)


async def _one_socket_each(users) -> tuple[list[Conversation], list]:  # noqa: ANN001
    """A conversation without memories and a ready socket on it for each user."""
    conversations, sockets = [], []
    for user in users:
        conversation = await db(_conversation)(user, use_memory=False)
        socket, _, _ = await open_socket(user, conversation.pk)
        await socket.receive_json_from()
        conversations.append(conversation)
        sockets.append(socket)
    return conversations, sockets


async def _one_streaming_one_waiting(chat_settings, users, tmp_path) -> tuple[list[Conversation], list]:  # noqa: ANN001
    """One request open at a time (LLM_STREAMS=1): the first user's answer streams (a long one), the
    second user's turn waits behind it; the third user's socket is ready."""
    chat_settings.LLM_STREAMS = 1
    set_engine_config(chat_settings, tmp_path, max_new_tokens=200)
    conversations, sockets = await _one_socket_each(users)
    await _first_delta_after(sockets[0], "Write a long story about a dragon.")
    await sockets[1].send_json_to({"type": "chat.send", "content": "Tell me about rivers."})
    await events_until(sockets[1], "chat.queued")
    return conversations, sockets


async def _first_delta_after(socket, content: str) -> list[dict]:
    await socket.send_json_to({"type": "chat.send", "content": content})
    return await events_until(socket, "chat.delta", "chat.error")


async def test_a_waiting_turn_shows_its_place_then_streams(chat_settings, users, tmp_path):
    """One request open at a time (LLM_STREAMS=1): a turn sent while another streams waits, is told
    how many answers start before it, and streams once they are done."""
    chat_settings.LLM_STREAMS = 1
    set_engine_config(chat_settings, tmp_path, max_new_tokens=60)
    _, sockets = await _one_socket_each(users)
    first, second, third = sockets
    assert (await _first_delta_after(first, "Tell me about the sea."))[-1]["type"] == "chat.delta"
    await second.send_json_to({"type": "chat.send", "content": "Tell me about rivers."})
    second_events = await events_until(second, "chat.queued")
    await third.send_json_to({"type": "chat.send", "content": "Tell me about lakes."})
    third_events = await events_until(third, "chat.queued")
    assert second_events[-1] == {"type": "chat.queued", "ahead": 0}
    assert third_events[-1] == {"type": "chat.queued", "ahead": 1}  # the second turn starts first
    first_done = await events_until(first, "chat.done", "chat.error")
    assert first_done[-1]["type"] == "chat.done"
    # In arrival order: the second streams, the third moves up and waits for it.
    second_rest = await events_until(second, "chat.done", "chat.error")
    third_rest = await events_until(third, "chat.done", "chat.error")
    assert second_rest[-1]["type"] == third_rest[-1]["type"] == "chat.done"
    assert _deltas(second_rest) and _deltas(third_rest)
    assert {"type": "chat.queued", "ahead": 0} in third_rest
    timings = third_rest[-1]["timings"]
    assert timings["queue"] > 0 and timings["prefill"] > 0 and timings["generation"] >= 0
    assert timings["first_token"] >= timings["queue"]
    for socket in sockets:
        await socket.disconnect()


async def test_stopping_a_waiting_turn_frees_its_place(chat_settings, users, tmp_path):
    from chat.llm import clients

    conversations, sockets = await _one_streaming_one_waiting(chat_settings, users, tmp_path)
    first, waiting, later = sockets
    assert clients.llm_queue().snapshot()["waiting"] == 1
    await waiting.send_json_to({"type": "chat.stop"})
    stopped = await events_until(waiting, "chat.done", "chat.error")
    assert stopped[-1]["type"] == "chat.done" and stopped[-1]["status"] == "stopped"
    assert not _deltas(stopped)
    assert clients.llm_queue().snapshot()["waiting"] == 0
    # The user's turn is kept, with an empty stopped answer; the next turn is next in line.
    user_turn, answer = await db(_messages)(conversations[1].pk)
    assert (
        user_turn.content == "Tell me about rivers." and answer.status == "stopped" and answer.content == ""
    )
    await later.send_json_to({"type": "chat.send", "content": "Tell me about lakes."})
    assert (await events_until(later, "chat.queued"))[-1]["ahead"] == 0
    await first.send_json_to({"type": "chat.stop"})
    await events_until(first, "chat.done", "chat.error")
    assert (await events_until(later, "chat.done", "chat.error"))[-1]["type"] == "chat.done"
    for socket in sockets:
        await socket.disconnect()


async def test_a_full_queue_refuses_with_a_clear_error_and_stores_nothing(chat_settings, users, tmp_path):
    chat_settings.LLM_QUEUE_LIMIT = 1
    conversations, sockets = await _one_streaming_one_waiting(chat_settings, users, tmp_path)
    first, waiting, refused = sockets
    await refused.send_json_to({"type": "chat.send", "content": "Tell me about lakes."})
    error = (await events_until(refused, "chat.error"))[-1]
    assert error["code"] == "llm_busy" and error["retry_after"] >= 1
    assert "The model is busy: 1 answer is waiting" in error["error"]
    assert await db(_messages)(conversations[2].pk) == []  # nothing stored: the page keeps the text
    for socket in (first, waiting):
        await socket.send_json_to({"type": "chat.stop"})
    for socket in sockets:
        await socket.disconnect()


async def test_a_turn_that_must_wait_gets_the_smaller_busy_memory_budget(
    chat_settings, users, pydoc_build, tmp_path
):
    """LLM_BUSY_TOKEN_BUDGET: a turn that has to wait is primed with fewer memory tokens (a shorter
    prefill for it and the turns behind it); one that starts at once keeps its own budget."""
    chat_settings.LLM_STREAMS, chat_settings.LLM_BUSY_TOKEN_BUDGET = 1, 120
    set_engine_config(chat_settings, tmp_path, max_new_tokens=200)
    owner, other, _ = users
    corpus = await db(make_corpus)(owner, pydoc_build, visibility="everyone")
    alone = await db(_conversation)(other, [corpus])
    socket, _, _ = await open_socket(other, alone.pk)
    await socket.receive_json_from()
    await socket.send_json_to({"type": "chat.send", "content": QUESTION})
    at_once = await events_until(socket, "chat.done", "chat.error")
    own = sum(m["token_count"] for m in next(e for e in at_once if e["type"] == "chat.memories")["memories"])
    assert own > 120 and "chat.queued" not in _types(at_once)

    first = await db(_conversation)(owner, use_memory=False)
    busy, _, _ = await open_socket(owner, first.pk)
    await busy.receive_json_from()
    await _first_delta_after(busy, "Write a long story about a dragon.")
    await socket.send_json_to({"type": "chat.send", "content": QUESTION})
    waited = await events_until(socket, "chat.done", "chat.error")
    assert "chat.queued" in _types(waited)
    memories = next(e for e in waited if e["type"] == "chat.memories")["memories"]
    assert memories and sum(m["token_count"] for m in memories) <= 120
    await busy.send_json_to({"type": "chat.stop"})
    await socket.disconnect()
    await busy.disconnect()
