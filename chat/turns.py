"""One chat turn, end to end: save the user turn, prepare it (`chat.preparation`), stream, save the answer.

Transport-agnostic: the websocket consumer (and the bench) pass `emit`, an async callable that
receives plain event dicts with a `type`:

    chat.accepted  {"message": {...}, "title": str}           the user turn is stored
    chat.memories  {"memories": [...], "retrieval_ms": float}  what primes the answer
    chat.queued    {"ahead": int}                              the turn waits for the LLM: `ahead`
                   answers start before it (sent again when that changes; none when it starts at once)
    chat.delta     {"delta": str}                              streamed text, in order
    chat.rewind    {"content": str, "reason": "repetition"}     the answer began looping: what was
                   streamed is replaced by `content` (cut before the echo), and deltas continue it
    chat.done      {"message": {...}, "status", "usage", "blend_turns", "timings", "grounding",
    "grounding_word",
                   "citations"} (`chat.citations`, also in the message) status: complete, stopped, or
                   repetition (the answer looped again after `loop_retries` continuations, or the
                   server cannot continue an answer: it was cut and the stored text has no echo; or,
                   with finish_reason "restated", it only said the question again)
    chat.error     {"error": str, "code": str, "message": {...}}   the failed answer, as stored

All state is local to one call: nothing here is shared between conversations or connections,
except the process's queue of turns into the LLM (`chat.llm.queue`), which the turn enters
on arrival and waits on only after its own retrieval and prompt assembly. Cancelling the task
running `run_turn` leaves that queue, closes the LLM stream (llama.cpp stops) and stores the
partial answer as "stopped".
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model
from django.db import connection

from chat.citations import answer_citations
from chat.llm import clients
from chat.llm.answer import AnswerClock, turn_answer
from chat.llm.errors import llm_failure
from chat.llm.queue import Ticket
from chat.llm.queue_redis import QueueUnavailable
from chat.model_rights import model_for_turn
from chat.models import Message, TurnRecord
from chat.preparation import ConversationState, PreparedTurn, turn_prepare
from chat.selectors import conversation_for_turn, conversation_title, message_with_memories
from chat.serializers import memory_result_json, message_json
from chat.services import (
    conversation_add_response,
    message_create_assistant,
    message_create_user,
    message_prepare_regenerate,
)
from chat.usage import turn_quota_check, turn_record_create
from core.errors import ApplicationError
from core.metrics import chat_turn_observe
from engine.llm.answer import AnswerEnd, AnswerTokens, TokenSpan
from engine.llm.errors import LLMError
from engine.llm.stream import Usage
from engine.repetition import restates_question
from memory.services import MemoryResult

logger = logging.getLogger(__name__)



class TurnNotPrepared(ApplicationError):
    """The turn could not be prepared (retrieval, its settings): the user's turn is kept."""

    code = "retrieval"
    status = 503


class TurnInternalError(ApplicationError):
    """The turn failed in an unforeseen way; the details are logged."""

    code = "internal"
    status = 503

Emit = Callable[[dict[str, Any]], Awaitable[None]]
# The finish reason of an answer that only restated its question (stored with status repetition).
RESTATED = "restated"


@dataclass
class TurnTimings:
    """Where a turn's time went, in seconds: `prepare` (access, token counting, retrieval and prompt
    assembly; `retrieval` is the search's part of it), `queue` (waiting for the LLM after that),
    `prefill` (admitted to the first token), `generation` (first token to the end); `first_token`
    and `total` from the start of the turn."""

    prepare: float = 0.0
    retrieval: float = 0.0
    queue: float = 0.0
    prefill: float | None = None
    generation: float | None = None
    first_token: float | None = None
    total: float = 0.0

    def as_ms(self) -> dict[str, float | None]:
        return {name: None if value is None else round(value * 1000, 1) for name, value in vars(self).items()}


@dataclass
class TurnResult:
    status: str
    user_message_id: int
    assistant_message_id: int | None = None
    content: str = ""
    usage: Usage | None = None
    timings: TurnTimings = field(default_factory=TurnTimings)
    loops: int = 0  # times the answer began looping (each cut, then continued or ended)
    token_logprobs: list[TokenSpan] = field(default_factory=list)  # the answer's (AnswerTokens)
    user_message: dict[str, Any] | None = None  # as sent in chat.accepted
    message: dict[str, Any] | None = None  # the answer as stored and sent in chat.done or chat.error
    failure: ApplicationError | None = None  # why it failed (status error): its message, code and status


def _db(func: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """Short SQL work: on Django's one sync thread, whose connection lives as usual."""
    return database_sync_to_async(func)


def _in_worker(func: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """Retrieval (CPU-heavy): on a retrieval thread, so the event loop and the sync thread
    stay free while it runs. Its connection is closed afterwards: Django never cleans up after
    such a thread, and an idle connection left there would outlive the request (and block
    dropping a test database)."""
    def run_and_close(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        finally:
            connection.close()

    async def call(*args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(clients.retrieval_executor(),
                                          functools.partial(run_and_close, *args, **kwargs))

    return call


def _prepare(conversation_id: int, user_message_id: int, content: str, *, model: str,
             waiting: bool = False) -> PreparedTurn:
    """The turn prepared from the conversation's state, fresh from its rows (`chat.preparation`),
    counted in the tokens of `model`, on the server the conversation would get now."""
    conversation = conversation_for_turn(conversation_id=conversation_id)
    state = ConversationState.of_conversation(conversation, before_id=user_message_id)
    return turn_prepare(user=conversation.owner, state=state, question=content, waiting=waiting, model=model,
                        affinity=conversation_id)


async def run_turn(
    *,
    conversation_id: int,
    user_id: int,
    content: str = "",
    emit: Emit,
    regenerate: bool = False,
    ticket: Ticket | None = None,
) -> TurnResult:
    """Run one turn; every outcome is stored and reported through `emit` (never raised),
    except cancellation, which is stored as "stopped" and then re-raised.

    The turn takes its place in the LLM queue first (`ticket`, when the caller took it already), as
    `user_id`. With `regenerate`, the last user turn is answered again (its old answer is taken
    back) and `content` is ignored. Raises `ApplicationError` (before anything is stored) for an
    empty or oversized message, a regeneration with no user turn, a full queue (`QueueFull`), or a
    conversation whose model its owner may not use (`chat.model_rights.ModelUnknown`).
    """
    started = time.perf_counter()
    ticket = ticket or clients.llm_queue().enter(user_id)
    async with ticket:
        await _db(_quota_check)(user_id)  # over today's quota: refused (the place given back), nothing stored
        # The model first: one the owner may not use is refused before anything is stored.
        model = await _db(_turn_model)(conversation_id)
        return await _run_turn(
            conversation_id=conversation_id,
            content=content,
            emit=emit,
            regenerate=regenerate,
            ticket=ticket,
            started=started,
            model=model,
        )


async def _run_turn(*, conversation_id: int, content: str, emit: Emit, regenerate: bool, ticket: Ticket,
                    started: float, model: str) -> TurnResult:
    user_message, result = await _accept(
        conversation_id=conversation_id, content=content, regenerate=regenerate, emit=emit
    )
    parts: list[str] = []
    # `memories` and `tokens` are filled in place, so every outcome below stores what primed the
    # answer so far, and cites what was said with the certainty it was said with. The clock says
    # when the queue admitted the answer, and when its first piece came.
    common: dict[str, Any] = {"conversation_id": conversation_id, "memories": [], "emit": emit,
                              "started": started, "question": user_message.content, "tokens": AnswerTokens(),
                              "clock": AnswerClock(), "model": model}
    try:
        end = await _prepare_and_stream(result, ticket=ticket, user_message_id=user_message.pk, parts=parts,
                                        **common)
    except asyncio.CancelledError:
        # Shielded: the stop must be recorded even though this task is being cancelled.
        await asyncio.shield(_finish(result, status=Message.Status.STOPPED, content="".join(parts), **common))
        raise
    except Exception as exc:
        await _finish(result, status=Message.Status.ERROR, content="".join(parts),
                      failure=_failure(exc, conversation_id=conversation_id), **common)
        return result
    await _finish_answer(result, end, common)
    return result


async def _accept(
    *, conversation_id: int, content: str, regenerate: bool, emit: Emit
) -> tuple[Message, TurnResult]:
    """Store the user turn (with `regenerate`, take the last one's answer back instead) and tell
    the page it is accepted. Returns it, and the turn's result as an error until it ends otherwise."""
    if regenerate:
        user_message = await _db(message_prepare_regenerate)(conversation_id=conversation_id)
    else:
        user_message = await _db(message_create_user)(conversation_id=conversation_id, content=content)
    result = TurnResult(status=Message.Status.ERROR, user_message_id=user_message.pk)
    title = await _db(conversation_title)(conversation_id=conversation_id)
    result.user_message = message_json(user_message)
    await emit({"type": "chat.accepted", "message": result.user_message, "title": title})
    return user_message, result


async def _prepare_and_stream(
    result: TurnResult,
    *,
    ticket: Ticket,
    user_message_id: int,
    parts: list[str],
    conversation_id: int,
    memories: list[MemoryResult],
    emit: Emit,
    started: float,
    question: str,
    tokens: AnswerTokens,
    clock: AnswerClock,
    model: str,
) -> AnswerEnd:
    """Prepare the turn on a retrieval thread, send what primes it, then wait for the LLM and stream
    the answer. Fills `memories` and `parts` (the pieces streamed, rewound with the answer) in place,
    and `result`'s timings and loops, so a failure or stop midway stores what there was."""
    timings = result.timings
    prepare_started = time.perf_counter()
    prepared = await _in_worker(_prepare)(conversation_id, user_message_id, question, model=model,
                                          waiting=not ticket.admitted)
    plan = prepared.plan
    memories.extend(prepared.memories)
    timings.retrieval, timings.prepare = prepared.retrieval_seconds, time.perf_counter() - prepare_started
    await emit(
        {
            "type": "chat.memories",
            "memories": [memory_result_json(r, rank=rank) for rank, r in enumerate(memories)],
            "retrieval_ms": round(prepared.retrieval_seconds * 1000, 3),
            "prompt_tokens_estimate": plan.prompt_tokens,
            "history_dropped": plan.dropped_messages,
        }
    )

    async def on_delta(delta: str) -> None:
        if timings.first_token is None:
            timings.first_token, timings.prefill = (
                clock.first_token - started,
                clock.first_token - clock.admitted,
            )
        parts.append(delta)
        await emit({"type": "chat.delta", "delta": delta})

    async def on_rewind(kept: str) -> None:
        # Continued from the cut, the looping tail taken back (engine.llm.answer.stream_answer).
        result.loops += 1
        logger.info("chat answer in conversation %s began repeating itself; continuing from the cut",
                    conversation_id)
        await emit({"type": "chat.rewind", "content": kept, "reason": "repetition"})
        parts[:] = [kept]

    return await turn_answer(ticket=ticket, prepared=prepared, loop_retries=prepared.loop_retries,
                             tokens=tokens, clock=clock,
                             on_queued=lambda ahead: emit({"type": "chat.queued", "ahead": ahead}),
                             on_delta=on_delta, on_rewind=on_rewind, affinity=conversation_id, model=model)


def _failure(exc: Exception, *, conversation_id: int) -> ApplicationError:
    """What is stored and sent for a turn that failed before its answer ended: its message, code
    and (for the API) status."""
    if isinstance(exc, LLMError):
        return llm_failure(exc)
    if isinstance(exc, QueueUnavailable):  # the shared queue's Redis lost while the turn waited
        return exc
    if isinstance(exc, ApplicationError):  # from the preparation
        return TurnNotPrepared(exc.message)
    # Retrieval failed in an unforeseen way (e.g. a build's files removed under us): the user
    # turn is kept and the user gets a message; the details go to the log.
    logger.exception("chat turn failed in conversation %s", conversation_id, exc_info=exc)
    return TurnInternalError("The answer could not be prepared because of an internal error; it is logged. "
                             "Try again, or ask an administrator.")


async def _finish_answer(result: TurnResult, end: AnswerEnd, common: dict[str, Any]) -> None:
    """Store and report an answer that streamed to its end: a repetition when it looped past its
    retries or only restated the question, else complete."""
    conversation_id = common["conversation_id"]
    result.loops = end.loops
    if end.looping:
        logger.info("chat answer in conversation %s cut after it began repeating itself %d time(s)",
                    conversation_id, result.loops)
        status, finish_reason = Message.Status.REPETITION, "repetition"
    elif restates_question(common["question"], end.content):
        # Nothing was answered: marked as a loop is (the page offers Regenerate), not stored as complete.
        logger.info("chat answer in conversation %s restated the question", conversation_id)
        status, finish_reason = Message.Status.REPETITION, RESTATED
    else:
        status, finish_reason = Message.Status.COMPLETE, end.finish_reason
    await _finish(result, status=status, content=end.content, usage=end.usage, finish_reason=finish_reason,
                  **common)


async def _finish(result: TurnResult, *, conversation_id: int, content: str, status: str,
                  memories: list[MemoryResult], emit: Emit, started: float, question: str,
                  tokens: AnswerTokens, clock: AnswerClock, model: str, usage: Usage | None = None,
                  finish_reason: str = "", failure: ApplicationError | None = None) -> None:
    """Store the answer in whatever state it ended, with its citations (unless it failed), update
    the blend, and report it."""
    citations = None
    result.token_logprobs = tokens.spans
    if status != Message.Status.ERROR:
        citations = answer_citations(question=question, answer=content,
                                     memory_texts=[r.memory.text for r in memories],
                                     token_logprobs=tokens.spans)
    message = await _db(message_create_assistant)(
        conversation_id=conversation_id, content=content, status=status, memories=memories, usage=usage,
        finish_reason=finish_reason, error=failure.message if failure else "", citations=citations,
        model=model)
    result.status, result.assistant_message_id = status, message.pk
    result.content, result.usage = content, usage
    blend_turns = None
    # Stopped answers enter the blend too: the user saw them, they are where the talk went.
    if status != Message.Status.ERROR and content.strip():
        blend_turns = len((await _db(conversation_add_response)(conversation_id=conversation_id,
                                                                 text=content))["responses"])
    timings = result.timings
    if clock.admitted:
        timings.queue = clock.admitted - clock.queued
    timings.total = time.perf_counter() - started
    if timings.first_token is not None:
        timings.generation = timings.total - timings.first_token
    chat_turn_observe(surface="chat", status=status, first_token_seconds=timings.first_token)
    await _db(turn_record_create)(
        user_id=None,
        conversation_id=conversation_id,
        surface=TurnRecord.Surface.CHAT,
        status=status,
        model=model,
        server=clock.server.shown_url if clock.server else "",
        usage=usage,
        first_token_seconds=timings.first_token,
        memories=len(memories),
        grounding=message.grounding,
        message_id=message.pk,
    )
    stored = result.message = await _db(_reload)(message.pk)
    result.failure = failure
    if failure is not None:
        await emit({"type": "chat.error", "code": failure.code, "error": failure.message, "message": stored})
    else:
        await emit({"type": "chat.done", "status": status, "message": stored, "blend_turns": blend_turns,
                    "grounding": stored["grounding"], "grounding_word": stored["grounding_word"],
                    "citations": stored["citations"],
                    "usage": {"prompt_tokens": usage.prompt_tokens,
                              "completion_tokens": usage.completion_tokens} if usage else None,
                    "timings": timings.as_ms()})


def _quota_check(user_id: int) -> None:
    turn_quota_check(user=get_user_model().objects.get(pk=user_id))


def _turn_model(conversation_id: int) -> str:
    """The model of the conversation's turns: its own, or its owner's default when it has none
    (`chat.model_rights`); ModelUnknown when the owner may not use it (any more)."""
    conversation = conversation_for_turn(conversation_id=conversation_id)
    return model_for_turn(conversation.owner, conversation.model)


def _reload(message_id: int) -> dict:
    return message_json(message_with_memories(message_id=message_id))
