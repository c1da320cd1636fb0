"""The one streaming loop of an answer: wait for the turn's place in the LLM queue, stream the answer,
keep its token log-probabilities, and hand each piece to the caller. The chat turn
(`chat.turns.run_turn`, behind the websocket and the conversations API) and the OpenAI-compatible
completions (whole and streamed) all answer through `answer_stream`."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from chat.llm import clients
from chat.llm.queue import Ticket
from chat.preparation import PreparedTurn
from engine.llm import AnswerEnd, AnswerTokens, Rewind, stream_answer


@dataclass
class AnswerClock:
    """When the queue admitted the answer and when its first piece came (`time.perf_counter()`)."""

    queued: float = 0.0
    admitted: float = 0.0
    first_token: float | None = None


async def answer_stream(*, ticket: Ticket, prepared: PreparedTurn, loop_retries: int, tokens: AnswerTokens,
                        clock: AnswerClock | None = None,
                        on_queued: Callable[[int], Awaitable[None]] | None = None,
                        on_delta: Callable[[str], Awaitable[None]] | None = None,
                        on_rewind: Callable[[str], Awaitable[None]] | None = None) -> AnswerEnd:
    """Wait until `ticket` is admitted (`on_queued(ahead)` while it waits), then stream the prepared
    prompt: each piece to `on_delta`, each loop taken back to `on_rewind(kept)` (continued from the
    cut up to `loop_retries` times, `engine.llm.stream_answer`), every event into `tokens`. Returns
    the answer's end. Leaving early (cancelled) closes the HTTP stream, and llama.cpp stops; an
    `LLMError` is raised as it comes. The caller holds `ticket` (`async with ticket`)."""
    clock = clock or AnswerClock()
    clock.queued = time.perf_counter()
    await ticket.wait(on_queued)
    clock.admitted = time.perf_counter()
    answer = stream_answer(clients.llm_client(), prepared.plan.messages, prepared.generation,
                           loop_retries=loop_retries)
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
