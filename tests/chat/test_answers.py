"""Answer controls over the real websocket: regenerate, a conversation's temperature, the loop guard."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from channels.db import database_sync_to_async
from django.db import connections

from chat.models import Conversation, Message
from chat.services import conversation_create
from core import runtime
from engine.config import Config
from tests.plugins.chat import TOKEN_BUDGET, events_until, make_corpus, open_socket
from tests.plugins.looping_llm import COMPLETION_TOKENS, CONTINUATION, KEPT, PROMPT_TOKENS, looping_llm

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
    conversation = await db(conversation_create)(
        user=owner, corpus_ids=[corpus.pk], token_budget=TOKEN_BUDGET
    )
    socket, _, _ = await open_socket(owner, conversation.pk)
    await socket.receive_json_from()
    first = await _turn(socket, {"type": "chat.send", "content": QUESTION})
    assert first[-1]["type"] == "chat.done"
    old_answer = first[-1]["message"]["id"]
    assert len(await db(_blend)(conversation.pk)) == 1

    again = await _turn(socket, {"type": "chat.regenerate"})
    await socket.disconnect()
    assert [e["type"] for e in again][:2] == ["chat.accepted", "chat.memories"] and again[-1][
        "type"
    ] == "chat.done"
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
    assert events == [
        {"type": "chat.error", "code": "invalid", "error": "There is no question to answer again yet."}
    ]
    assert await db(_messages)(conversation.pk) == []


async def test_a_conversations_temperature_is_what_the_server_samples_with(
    chat_settings, users, llama_server
):
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
    served = [
        slot["params"] for slot in slots if abs(slot.get("params", {}).get("temperature", -1) - 1.25) < 1e-6
    ]
    assert len(served) == 1
    assert served[0]["top_k"] == 20 and abs(served[0]["repeat_penalty"] - 1.05) < 1e-6
    assert served[0]["dry_multiplier"] == Config().dry_multiplier and served[0]["dry_allowed_length"] == 2


async def _asklooping_llm(
    chat_settings,
    owner,
    *,
    looping: int,
    prefill: bool = True,  # noqa: ANN001
    tokenize: bool = False,
    restate: bool = False,
) -> tuple[list[dict], list[dict], Message]:
    requests: list[dict] = []
    server = await asyncio.start_server(
        looping_llm(requests, looping=looping, prefill=prefill, tokenize=tokenize, restate=restate),
        "127.0.0.1",
        0,
    )
    runtime.reset()  # the kept client of a server once on this port may have learnt another answer
    port = server.sockets[0].getsockname()[1]
    chat_settings.LLM_BASE_URL = f"http://127.0.0.1:{port}"
    conversation = await db(conversation_create)(user=owner, use_memory=False)
    async with server:
        socket, _, _ = await open_socket(owner, conversation.pk)
        await socket.receive_json_from()
        events = await _turn(socket, {"type": "chat.send", "content": QUESTION})
        await socket.disconnect()
    return events, requests, (await db(_messages)(conversation.pk))[-1]


async def test_a_looping_answer_is_cut_and_continued_from_the_cut_with_dry(chat_settings, users):
    owner, _, _ = users
    events, requests, answer = await _asklooping_llm(chat_settings, owner, looping=1)
    rewinds = [e for e in events if e["type"] == "chat.rewind"]
    assert rewinds == [{"type": "chat.rewind", "content": KEPT, "reason": "repetition"}]
    # What the client shows: the deltas up to the rewind are replaced, the later ones continue it.
    after = [e["delta"] for e in events[events.index(rewinds[0]) + 1:] if e["type"] == "chat.delta"]
    assert rewinds[0]["content"] + "".join(after) == KEPT + CONTINUATION
    done = events[-1]
    assert done["type"] == "chat.done" and done["status"] == "complete"
    assert answer.status == "complete" and answer.content == KEPT + CONTINUATION == done["message"]["content"]
    # The continuation asks for the kept text as the assistant's (prefilled) answer, with DRY on
    # over the answer's recent tokens; the first request sampled as configured (DRY off).
    assert len(requests) == 2
    assert requests[1]["messages"] == [*requests[0]["messages"], {"role": "assistant", "content": KEPT}]
    assert requests[1]["continue_final_message"] is True and "continue_final_message" not in requests[0]
    assert requests[0]["dry_multiplier"] == 0.0 and "dry_penalty_last_n" not in requests[0]
    assert (requests[1]["dry_multiplier"], requests[1]["dry_penalty_last_n"]) == (0.8, 128)
    assert requests[1]["temperature"] == requests[0]["temperature"]


async def test_a_continued_answer_counts_the_kept_tokens_as_its_completion_not_its_prompt(
    chat_settings, users
):
    owner, _, _ = users
    events, requests, answer = await _asklooping_llm(chat_settings, owner, looping=1, tokenize=True)
    assert len(requests) == 2 and answer.content == KEPT + CONTINUATION
    # The continuation's request carried the kept words in its prompt; the answer's usage does not.
    kept = len(KEPT.split())
    assert (answer.prompt_tokens, answer.completion_tokens) == (PROMPT_TOKENS, COMPLETION_TOKENS + kept)
    assert events[-1]["usage"] == {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": COMPLETION_TOKENS + kept,
    }


async def test_a_continued_answer_whose_kept_tokens_cannot_be_counted_has_no_usage(chat_settings, users):
    owner, _, _ = users
    events, requests, answer = await _asklooping_llm(chat_settings, owner, looping=1)  # no /tokenize
    assert len(requests) == 2 and answer.status == "complete"
    assert (answer.prompt_tokens, answer.completion_tokens, events[-1]["usage"]) == (None, None, None)


async def test_an_answer_that_loops_again_is_cut_stored_without_its_echo_and_marked(chat_settings, users):
    owner, _, _ = users
    events, requests, answer = await _asklooping_llm(chat_settings, owner, looping=10)
    done = events[-1]
    assert done["type"] == "chat.done" and done["status"] == "repetition"
    assert len(requests) == 1 + Config().loop_retries
    assert sum(e["type"] == "chat.rewind" for e in events) == Config().loop_retries
    streamed = sum(e["type"] == "chat.delta" for e in events)
    assert streamed < 60  # stopped within a few repeats each time, not after 400
    assert answer.status == "repetition" and answer.finish_reason == "repetition"
    assert answer.content == KEPT
    assert done["message"]["content"] == answer.content


async def test_a_looping_answer_is_only_cut_where_the_server_cannot_continue_an_answer(chat_settings, users):
    owner, _, _ = users
    events, requests, answer = await _asklooping_llm(chat_settings, owner, looping=1, prefill=False)
    # A continuation would be a fresh answer glued to the kept text: none is asked for.
    assert len(requests) == 1 and not any(e["type"] == "chat.rewind" for e in events)
    assert events[-1]["status"] == "repetition" and answer.status == "repetition" and answer.content == KEPT


async def test_an_answer_that_only_restates_the_question_is_marked_not_complete(chat_settings, users):
    """Issue 31.7, replayed: the model answers with the question itself. It is stored and shown as
    not an answer (status repetition, finish reason "restated"), so the page offers Regenerate."""
    owner, _, _ = users
    events, requests, answer = await _asklooping_llm(chat_settings, owner, looping=0, restate=True)
    assert len(requests) == 1 and answer.content == QUESTION
    assert (answer.status, answer.finish_reason) == ("repetition", "restated")
    done = events[-1]
    assert done["type"] == "chat.done" and done["status"] == "repetition"
    assert done["message"]["finish_reason"] == "restated"
