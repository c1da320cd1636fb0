"""The one streaming loop of an answer: wait for the turn's place in the LLM queue, stream the answer,
keep its token log-probabilities, and hand each piece to the caller. The chat turn
(`chat.turns.run_turn`, behind the websocket and the conversations API) and the OpenAI-compatible
completions (whole and streamed) all answer through `turn_answer`."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from chat.llm import clients
from chat.llm.queue import Ticket
from chat.llm.servers import LLMServer, ServerPool
from chat.preparation import PreparedTurn
from core.metrics import llm_answer_observe
from engine.llm.answer import AnswerEnd, AnswerTokens, Rewind, stream_answer
from engine.llm.client import LLMClient
from engine.llm.errors import LLMConnectionError, LLMError, LLMTimeoutError


@dataclass
class AnswerClock:
    """When the queue admitted the answer and when its first piece came (`time.perf_counter()`)."""

    queued: float = 0.0
    admitted: float = 0.0
    first_token: float | None = None
    server: LLMServer | None = None  # the server that answered (chat.llm.servers)


async def turn_answer(
    *,
    ticket: Ticket,
    prepared: PreparedTurn,
    loop_retries: int,
    tokens: AnswerTokens,
    clock: AnswerClock | None = None,
    on_queued: Callable[[int], Awaitable[None]] | None = None,
    on_delta: Callable[[str], Awaitable[None]] | None = None,
    on_rewind: Callable[[str], Awaitable[None]] | None = None,
    model: str = "",
    affinity: object = None,
    pool: ServerPool | None = None,
) -> AnswerEnd:
    """Wait until `ticket` is admitted (`on_queued(ahead)` while it waits), then stream the prepared
    prompt: each piece to `on_delta`, each loop taken back to `on_rewind(kept)` (continued from the
    cut up to `loop_retries` times, `engine.llm.answer.stream_answer`), every event into `tokens`. Returns
    the answer's end. Leaving early (cancelled) closes the HTTP stream, and llama.cpp stops; an
    `LLMError` is raised as it comes. The caller holds `ticket` (`async with ticket`).

    The answer comes from a server of `model` (the pool's first model when empty) that
    `chat.llm.clients.server_pool` gives the turn (`ServerPool.take`: with the queue in Redis, a slot
    counted over every process), the one `affinity` (a conversation) used last where it can: a server
    that cannot be reached before the first piece is taken out and the next one tried. `pool`: another
    pool than the process's (a test's second process)."""
    clock = clock or AnswerClock()
    clock.queued = time.perf_counter()
    pool = pool or clients.server_pool()
    model = model or pool.default_model
    outcome = "cancelled"
    try:
        end = await _answer(
            ticket=ticket,
            prepared=prepared,
            loop_retries=loop_retries,
            tokens=tokens,
            clock=clock,
            on_queued=on_queued,
            on_delta=on_delta,
            on_rewind=on_rewind,
            model=model,
            affinity=affinity,
            pool=pool,
        )
        outcome = "looping" if end.looping else "answered"
        return end
    except Exception:
        outcome = "failed"
        raise
    finally:
        llm_answer_observe(
            model=model,
            server=clock.server.shown_url if clock.server else "",
            outcome=outcome,
            first_token_seconds=None if clock.first_token is None else clock.first_token - clock.queued,
        )


async def _answer(*, ticket: Ticket, prepared: PreparedTurn, loop_retries: int, tokens: AnswerTokens,
                  clock: AnswerClock, on_queued: Callable[[int], Awaitable[None]] | None,
                  on_delta: Callable[[str], Awaitable[None]] | None,
                  on_rewind: Callable[[str], Awaitable[None]] | None, model: str, affinity: object,
                  pool: ServerPool) -> AnswerEnd:
    await ticket.wait(on_queued)
    clock.admitted = time.perf_counter()
    tried: list[LLMServer] = []
    failures: list[LLMError] = []
    while True:
        server = await pool.take(ticket, model, affinity, avoid=tried)
        if server is None:
            raise failures[-1] if failures else pool.unserved(model)
        clock.server = server
        try:
            with pool.lease(server, affinity):
                end = await _stream(clients.llm_client_for(server), ticket=ticket, prepared=prepared,
                                    loop_retries=loop_retries, tokens=tokens, clock=clock, on_delta=on_delta,
                                    on_rewind=on_rewind)
        except (LLMConnectionError, LLMTimeoutError) as error:
            # Out for a while; a turn that had not begun goes to another server of its model.
            pool.mark_down(server)
            if clock.first_token is not None:
                raise
            tried.append(server)
            failures.append(error)
            continue
        pool.mark_up(server)
        return end


async def _stream(client: LLMClient, *, ticket: Ticket, prepared: PreparedTurn, loop_retries: int,
                  tokens: AnswerTokens, clock: AnswerClock, on_delta: Callable[[str], Awaitable[None]] | None,
                  on_rewind: Callable[[str], Awaitable[None]] | None) -> AnswerEnd:
    answer = stream_answer(client, prepared.plan.messages, prepared.generation, loop_retries=loop_retries)
    end = None
    async with contextlib.aclosing(answer):
        async for event in answer:
            tokens.feed(event)
            if isinstance(event, AnswerEnd):
                end = event
            elif isinstance(event, Rewind):
                if on_rewind is not None:
                    await on_rewind(event.kept)
            else:
                if clock.first_token is None:  # prefill is over: the next turn may start its own
                    ticket.streaming()
                    clock.first_token = time.perf_counter()
                if on_delta is not None:
                    await on_delta(event.delta)
    return end
