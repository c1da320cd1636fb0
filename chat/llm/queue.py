"""Turns into the LLM, first come, first served: one prefill at a time on a CPU server.

On a CPU, llama.cpp's prefill is compute-bound: prompts that arrive while another is being read
are then read together and released together, so everyone waits for all of them (figures in
docs/load-measurements.md). Decoding is what batching speeds up. So a turn asks
this queue for a place when it arrives (`enter`, before anything is stored: past the caps it is
refused with `QueueFull`), does the portal's own work meanwhile (access, retrieval, prompt
assembly never wait here), then waits until it is admitted (`Ticket.wait`): at most `prefill`
turns are in prefill at once, and at most `streams` (the server's slots) have a request open.
A turn leaves prefill at its first token (`Ticket.streaming`) and so lets the next one in, while
the earlier answers keep decoding beside it. `prefill=0` sends every turn at once (the policy
for a server that batches prefill, such as a GPU running llama.cpp or vLLM).

Fairness: the order is arrival order, and one user may have at most `per_user` turns waiting,
so one user's burst cannot starve the others. A waiting turn learns how many answers will start
before it (`on_wait(ahead)`); leaving (a stop, a closed socket, a client gone) frees its place.

One queue per LLM server and web process (`chat.llm.clients.llm_queue`). State is guarded by
a thread lock and waiters are woken on their own event loop, so a turn may wait from the chat's
event loop or from a view's `async_to_sync`. Several web processes in front of one LLM server
share one queue in Redis instead (`LLM_QUEUE_REDIS_URL`: `chat.llm.queue_redis`, the same
interface and policy over all of them). Callers hold either as a `TurnQueue`, the interface both have.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Awaitable, Callable, Hashable
from types import TracebackType
from typing import Protocol, runtime_checkable

from core.errors import ApplicationError

# A turn's seconds in the LLM (admission to the end), smoothed: the Retry-After of a refusal.
EWMA_WEIGHT = 0.2
FIRST_GUESS_SECONDS = 10.0


class QueueFull(ApplicationError):
    """Too many turns wait for the LLM (in all, or of this user): try again after `retry_after` s."""

    code = "llm_busy"
    status = 429

    def __init__(self, message: str, *, retry_after: int, details: dict | None = None) -> None:
        super().__init__(message, {**(details or {}), "retry_after": retry_after})
        self.retry_after = retry_after


def check_policy(*, prefill: int, streams: int, limit: int, per_user: int) -> None:
    if prefill < 0 or streams < 1 or limit < 1 or per_user < 1:
        raise ValueError(f"LLM queue: prefill >= 0, streams, limit and per_user >= 1; got prefill={prefill}, "
                         f"streams={streams}, limit={limit}, per_user={per_user}")


def retry_after(turn_seconds: float, *, waiting: int, streams: int) -> int:
    """Seconds until a place is likely free: the queue ahead, drained `streams` turns at a time."""
    return max(1, math.ceil(turn_seconds * (waiting + 1) / streams))


def queue_full(*, waiting: int, mine: int, per_user: int, retry_after: int) -> QueueFull:
    """The refusal of a turn past the caps: `mine` of the `waiting` turns are this user's."""
    if mine >= per_user:
        message = (f"You already have {mine} answer{'s' if mine != 1 else ''} waiting for the model; "
                   f"wait for {'them' if mine != 1 else 'it'} or stop one, then try again.")
    else:
        message = (f"The model is busy: {waiting} answer{'s are' if waiting != 1 else ' is'} waiting. "
                   f"Try again in about {retry_after} s.")
    return QueueFull(message, retry_after=retry_after, details={"waiting": waiting, "yours": mine})


class Ticket:
    """One turn's place: waiting, then admitted (prefilling, then streaming), then closed.

    An async context manager: leaving it closes the ticket (idempotent), whatever happened."""

    def __init__(self, queue: LLMQueue, user: Hashable) -> None:
        self._queue = queue
        self.user = user
        self.admitted_at: float | None = None
        self.prefilling = False
        self.closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Future | None = None

    @property
    def admitted(self) -> bool:
        return self.admitted_at is not None

    async def wait(self, on_wait: Callable[[int], Awaitable[None]] | None = None) -> None:
        """Return once admitted; `on_wait(ahead)` is awaited first and then whenever the number of
        answers that will start before this one changes. Cancelling it leaves the queue."""
        self._loop = asyncio.get_running_loop()
        last: int | None = None
        try:
            while True:
                self._changed = self._loop.create_future()
                ahead = self._queue.ahead(self)
                if ahead is None:
                    return
                if ahead != last and on_wait is not None:
                    await on_wait(ahead)
                last = ahead
                await self._changed
        except asyncio.CancelledError:
            self.close()
            raise

    def streaming(self) -> None:
        """The first token arrived: prefill is over, the next turn may start its own."""
        self._queue._streaming(self)

    def close(self) -> None:
        self._queue._close(self)

    def _poke(self) -> None:
        """Wake `wait` (from any thread): the queue changed."""
        loop, future = self._loop, self._changed
        if loop is None or future is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(lambda: future.done() or future.set_result(None))

    async def __aenter__(self) -> Ticket:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        self.close()


@runtime_checkable
class TurnQueue(Protocol):
    """What a caller asks of a queue of turns into the LLM: this process's `LLMQueue` and the one
    every process shares in Redis (`chat.llm.queue_redis.RedisLLMQueue`) are each one
    (`chat.llm.clients.llm_queue` gives the configured one). A ticket asks its own queue the rest."""

    prefill: int
    streams: int
    limit: int
    per_user: int

    def enter(self, user: Hashable) -> Ticket:
        """A place at the back of the queue (admitted at once when there is room), or QueueFull."""
        ...

    def snapshot(self) -> dict[str, int]:
        """The turns `waiting`, `prefilling` and `streaming`."""
        ...


class LLMQueue:
    """See the module docstring. `prefill`: turns in prefill at once (0: no limit); `streams`:
    turns with a request open (the server's slots); `limit`, `per_user`: turns waiting."""

    def __init__(self, *, prefill: int = 1, streams: int = 4, limit: int = 32, per_user: int = 2) -> None:
        check_policy(prefill=prefill, streams=streams, limit=limit, per_user=per_user)
        self.prefill, self.streams, self.limit, self.per_user = prefill, streams, limit, per_user
        self._lock = threading.Lock()
        self._waiting: list[Ticket] = []
        self._admitted: set[Ticket] = set()
        self._turn_seconds = FIRST_GUESS_SECONDS

    def enter(self, user: Hashable) -> Ticket:
        """A place at the back of the queue (admitted at once when there is room), or QueueFull."""
        with self._lock:
            mine = sum(1 for ticket in self._waiting if ticket.user == user)
            if mine >= self.per_user or len(self._waiting) >= self.limit:
                raise queue_full(waiting=len(self._waiting), mine=mine, per_user=self.per_user,
                                 retry_after=retry_after(self._turn_seconds, waiting=len(self._waiting),
                                                         streams=self.streams))
            ticket = Ticket(self, user)
            self._waiting.append(ticket)
            self._dispatch()
            return ticket

    def ahead(self, ticket: Ticket) -> int | None:
        """Answers that will start before `ticket`: the turns waiting before it and, when prefill is
        gated, those in prefill now; None once it is admitted (or closed)."""
        with self._lock:
            if ticket.admitted or ticket.closed:
                return None
            reading = sum(1 for t in self._admitted if t.prefilling) if self.prefill else 0
            return self._waiting.index(ticket) + reading

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            prefilling = sum(1 for t in self._admitted if t.prefilling)
            return {"waiting": len(self._waiting), "prefilling": prefilling,
                    "streaming": len(self._admitted) - prefilling}

    def _streaming(self, ticket: Ticket) -> None:
        with self._lock:
            if ticket.prefilling:
                ticket.prefilling = False
                self._dispatch()

    def _close(self, ticket: Ticket) -> None:
        with self._lock:
            if ticket.closed:
                return
            ticket.closed = True
            if ticket in self._admitted:
                self._admitted.discard(ticket)
                seconds = time.monotonic() - ticket.admitted_at
                self._turn_seconds += EWMA_WEIGHT * (seconds - self._turn_seconds)
            else:
                self._waiting.remove(ticket)
            self._dispatch()

    def _dispatch(self) -> None:
        """Admit from the front while there is room; tell every waiter its place changed. Under the lock."""
        while self._waiting:
            prefilling = sum(1 for t in self._admitted if t.prefilling)
            if len(self._admitted) >= self.streams or (self.prefill and prefilling >= self.prefill):
                break
            ticket = self._waiting.pop(0)
            ticket.admitted_at = time.monotonic()
            ticket.prefilling = True
            self._admitted.add(ticket)
            ticket._poke()
        for ticket in self._waiting:
            ticket._poke()

