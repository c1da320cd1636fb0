"""The queue of turns into the LLM (`chat.llm.queue`), shared by every web process through Redis.

With several web processes (or machines) in front of one LLM server, a queue per process lets
each admit its own turn into prefill, and the prompts are read together again (the very thing the
queue is for). This one keeps the queue in Redis (`LLM_QUEUE_REDIS_URL`), with `LLMQueue`'s
interface and policy over all processes: arrival order, `prefill` and `streams` gates, the
`limit` and `per_user` caps, `ahead`, `snapshot()` and the Retry-After of a refusal.

State: a few keys under one prefix per LLM server and policy (`namespace`; a loopback server URL
also names this host, since 127.0.0.1 on two machines is two servers): `waiting` (a sorted set,
ticket id by arrival), `prefilling` and `streaming` (sorted sets, id by admission time, Redis's
clock), `users` (id → user), `leases` (id → expiry), `seq` (ticket ids), `turn` (the smoothed
seconds of a turn); with several LLM servers, their slots and state (`held`, `down`, `last`:
`chat.llm.servers_redis`, whose scripts run here too, and a ticket's slot goes with its place). Every change
is one Lua script (`register_script`, run with EVALSHA), so it is atomic: each drops the expired tickets,
applies its change, admits from the front while there is room, and publishes on the namespace's channel when
anything changed (the message: the ids just admitted). Idle keys expire after a day.

Leases: each ticket has a lease of `lease_seconds` (10 s), renewed every `lease_seconds / 4` by
one thread per queue object for all of the process's live tickets. A process that dies, or a
ticket dropped without being closed (tickets are held weakly), stops renewing: the place is freed
at the first dispatch after the lease ran out (every script dispatches, and waiters look at least
every `poll_seconds`, 1 s).

Waking waiters: the same thread listens on the channel (pub/sub, subscribed before the process's
first ticket exists) and wakes this process's waiters, which then read their place (a waiter just
admitted knows it from the message alone); a waiter also looks every `poll_seconds` in case a
message was lost (a reconnect). Redis that cannot be reached is `QueueUnavailable` (503), from
`enter` and `wait`; `streaming` and `close` only log it (the lease frees the place).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import socket
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Hashable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from chat.llm.queue import (
    EWMA_WEIGHT,
    FIRST_GUESS_SECONDS,
    Ticket,
    check_policy,
    queue_full,
    retry_after,
)
from core.errors import ApplicationError

logger = logging.getLogger(__name__)

LEASE_SECONDS = 10.0
POLL_SECONDS = 1.0
CONNECT_SECONDS = 2.0  # connect and each reply: a Redis that drops packets fails a turn in seconds
IDLE_SECONDS = 30.0  # the listening thread outlives the process's last ticket this long
KEYS_IDLE_MS = 24 * 3600 * 1000
_ADMITTED = -1  # the status script: the ticket is admitted (-2: it is gone)

# KEYS: waiting, users, prefilling, streaming, leases, seq, turn, held, down, last (the last three:
# the servers of a pool, `chat.llm.servers_redis`). ARGV: channel, prefill, streams, lease ms, idle ms,
# then the script's own.
_PRELUDE = """
local waiting, users, prefilling, streaming, leases, seq, turn, held, down, last = unpack(KEYS)
local channel, prefill, streams = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local lease_ms, idle_ms = tonumber(ARGV[4]), tonumber(ARGV[5])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local changed, admitted = false, {}

local function forget(id)
  redis.call('ZREM', waiting, id)
  redis.call('ZREM', prefilling, id)
  redis.call('ZREM', streaming, id)
  redis.call('HDEL', users, id)
  redis.call('HDEL', held, id)
  return redis.call('ZREM', leases, id) == 1
end

-- Drop the tickets whose lease ran out, then admit from the front while there is room.
local function dispatch()
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', leases, '-inf', now)) do
    forget(id)
    changed = true
  end
  while true do
    local head = redis.call('ZRANGE', waiting, 0, 0)[1]
    if not head then break end
    local reading = redis.call('ZCARD', prefilling)
    if reading + redis.call('ZCARD', streaming) >= streams or (prefill > 0 and reading >= prefill) then
        break
    end
    redis.call('ZREM', waiting, head)
    redis.call('ZADD', prefilling, now, head)
    admitted[#admitted + 1] = head
    changed = true
  end
end

-- Wake every process's waiters; a namespace no one uses any more expires.
local function finish()
  if changed then redis.call('PUBLISH', channel, table.concat(admitted, ' ')) end
  for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, idle_ms) end
end
"""

# ARGV[6] user, [7] limit, [8] per_user → {1, id, admitted 0/1} or {0, waiting, mine, turn seconds}
_ENTER = """
dispatch()
local queued = redis.call('ZRANGE', waiting, 0, -1)
local mine = 0
for _, id in ipairs(queued) do
  if redis.call('HGET', users, id) == ARGV[6] then mine = mine + 1 end
end
if mine >= tonumber(ARGV[8]) or #queued >= tonumber(ARGV[7]) then
  finish()
  return {0, #queued, mine, redis.call('GET', turn) or ''}
end
local id = redis.call('INCR', seq)
redis.call('ZADD', waiting, id, id)
redis.call('HSET', users, id, ARGV[6])
redis.call('ZADD', leases, now + lease_ms, id)
changed = true
dispatch()
finish()
return {1, id, redis.call('ZSCORE', prefilling, id) and 1 or 0}
"""

# ARGV[6] id
_STREAMING = """
local since = redis.call('ZSCORE', prefilling, ARGV[6])
if since then
  redis.call('ZREM', prefilling, ARGV[6])
  redis.call('ZADD', streaming, since, ARGV[6])
  changed = true
end
dispatch()
finish()
return 0
"""

# ARGV[6] id, [7] smoothing weight, [8] first guess of a turn's seconds
_CLOSE = """
local since = redis.call('ZSCORE', prefilling, ARGV[6]) or redis.call('ZSCORE', streaming, ARGV[6])
if since then
  local smoothed = tonumber(redis.call('GET', turn) or ARGV[8])
  local seconds = (now - tonumber(since)) / 1000
  redis.call('SET', turn, tostring(smoothed + tonumber(ARGV[7]) * (seconds - smoothed)))
end
if forget(ARGV[6]) then changed = true end
dispatch()
finish()
return 0
"""

# ARGV[6] id → answers that start before it, -1 admitted, -2 gone (closed or its lease ran out)
_STATUS = """
dispatch()
finish()
local rank = redis.call('ZRANK', waiting, ARGV[6])
if rank then return rank + (prefill > 0 and redis.call('ZCARD', prefilling) or 0) end
if redis.call('ZSCORE', prefilling, ARGV[6]) or redis.call('ZSCORE', streaming, ARGV[6]) then return -1 end
return -2
"""

# ARGV[6..] ids → the ids that are gone. Expired leases are dropped first, never renewed.
_RENEW = """
dispatch()
local gone = {}
for i = 6, #ARGV do
  if redis.call('ZSCORE', leases, ARGV[i]) then
    redis.call('ZADD', leases, now + lease_ms, ARGV[i])
  else
    gone[#gone + 1] = ARGV[i]
  end
end
finish()
return gone
"""

_SNAPSHOT = """
dispatch()
finish()
return {redis.call('ZCARD', waiting), redis.call('ZCARD', prefilling), redis.call('ZCARD', streaming)}
"""

_SCRIPTS = {"enter": _ENTER, "streaming": _STREAMING, "close": _CLOSE, "status": _STATUS, "renew": _RENEW,
            "snapshot": _SNAPSHOT}


def redacted(url: str) -> str:
    """`url` without its credentials (user, password, query): what an error may show."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2], query=""))


class QueueUnavailable(ApplicationError):
    """The shared queue's Redis cannot be reached (or this turn lost its place while it could not)."""

    code = "llm_queue_unavailable"
    status = 503


def namespace(server_url: str, *, prefill: int, streams: int, limit: int, per_user: int) -> str:
    """The key prefix of one LLM server and policy: processes share a queue when they name the same
    server with the same policy. A loopback URL is this machine's own server, so it names the host."""
    server = server_url.rstrip("/")
    if (urlsplit(server).hostname or "") in ("localhost", "127.0.0.1", "::1"):
        server = f"{socket.gethostname()}/{server}"
    identity = json.dumps([server, prefill, streams, limit, per_user])
    # The braces: one hash slot, so the scripts' keys stay together on a Redis cluster too.
    return "hdrag:llm-queue:{" + hashlib.sha256(identity.encode()).hexdigest()[:16] + "}"


class RedisTicket(Ticket):
    """A `Ticket` whose place is kept in Redis: `id` is its number there."""

    def __init__(self, queue: RedisLLMQueue, user: Hashable, ticket_id: int) -> None:
        super().__init__(queue, user)
        self._queue: RedisLLMQueue = queue
        self.id = ticket_id
        self.lost = False  # its lease ran out while it waited (Redis unreachable, or this process stalled)

    @property
    def admitted(self) -> bool:
        """Admitted (by any process): asks Redis when this process has not heard of it yet."""
        if self.admitted_at is None and not self.closed and not self.lost:
            self._queue.ahead(self)
        return self.admitted_at is not None

    async def wait(self, on_wait: Callable[[int], Awaitable[None]] | None = None) -> None:
        """As `Ticket.wait`; raises QueueUnavailable when Redis cannot be reached or the ticket
        lost its place."""
        self._loop = asyncio.get_running_loop()
        last: int | None = None
        try:
            while True:
                self._changed = self._loop.create_future()
                self._queue._watch(self, waiting=True)
                if self.admitted_at is not None or self.closed:  # told by the message that woke it
                    return
                # In a thread: a Redis that hangs keeps this turn waiting, not the event loop.
                ahead = await asyncio.to_thread(self._queue.ahead, self)
                if ahead is None:
                    return
                if ahead != last and on_wait is not None:
                    await on_wait(ahead)
                last = ahead
                await asyncio.wait([self._changed], timeout=self._queue.poll_seconds)
        except asyncio.CancelledError:
            self.close()
            raise
        finally:
            self._queue._watch(self, waiting=False)

    def streaming(self) -> None:
        if self.prefilling and not self.closed:
            self.prefilling = False
            self._queue._call_quietly("streaming", self)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._queue._forget(self)
            self._queue._call_quietly("close", self, EWMA_WEIGHT, FIRST_GUESS_SECONDS)

    def _admit(self) -> None:
        if self.admitted_at is None:
            self.admitted_at = time.monotonic()
            self.prefilling = True


class RedisLLMQueue:
    """`LLMQueue` over every process that shares `redis_url` and names the same `server_url`
    and policy (see the module docstring): a `chat.llm.queue.TurnQueue`."""

    def __init__(self, *, redis_url: str, server_url: str, prefill: int = 1, streams: int = 4,
                 limit: int = 32, per_user: int = 2, lease_seconds: float = LEASE_SECONDS,
                 poll_seconds: float = POLL_SECONDS) -> None:
        check_policy(prefill=prefill, streams=streams, limit=limit, per_user=per_user)
        if lease_seconds <= 0 or poll_seconds <= 0:
            raise ValueError(
                f"LLM queue: lease_seconds and poll_seconds > 0; got {lease_seconds}, {poll_seconds}"
            )
        self.prefill, self.streams, self.limit, self.per_user = prefill, streams, limit, per_user
        self.lease_seconds, self.poll_seconds = lease_seconds, poll_seconds
        self.redis_url = redacted(redis_url)
        self.namespace = namespace(
            server_url, prefill=prefill, streams=streams, limit=limit, per_user=per_user
        )
        # One quick retry, on a broken connection only (a stale pooled one after a Redis restart):
        # redis-py's default retries for seconds, and a retried timeout could enter a turn twice.
        self._redis = redis.Redis.from_url(
            redis_url,
            socket_connect_timeout=CONNECT_SECONDS,
            socket_timeout=CONNECT_SECONDS,
            retry=Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
        )
        self._scripts = {
            name: self._redis.register_script(_PRELUDE + body) for name, body in _SCRIPTS.items()
        }
        names = ("waiting", "users", "prefilling", "streaming", "leases", "seq", "turn", "held", "down",
                 "last")
        self._keys = [f"{self.namespace}:{name}" for name in names]
        self._channel = f"{self.namespace}:changed"
        self._policy = [self._channel, prefill, streams, round(lease_seconds * 1000), KEYS_IDLE_MS]
        self._lock = threading.Lock()  # the sets below and the listener's life
        self._live: weakref.WeakSet[RedisTicket] = weakref.WeakSet()
        self._waiters: set[RedisTicket] = set()
        self._entering = 0  # enters under way: the listener stays for the tickets they make
        self._listener: threading.Thread | None = None
        self._starting = threading.Lock()

    def enter(self, user: Hashable) -> RedisTicket:
        """A place at the back of the queue (admitted at once when there is room), QueueFull past
        the caps, QueueUnavailable when Redis cannot be reached."""
        with self._lock:
            self._entering += 1
        try:
            self._listen()  # subscribed before the ticket exists: no message about it is missed
            result = self._call("enter", str(user), self.limit, self.per_user)
            if not result[0]:
                waiting, mine = int(result[1]), int(result[2])
                seconds = float(result[3] or FIRST_GUESS_SECONDS)
                raise queue_full(waiting=waiting, mine=mine, per_user=self.per_user,
                                 retry_after=retry_after(seconds, waiting=waiting, streams=self.streams))
            ticket = RedisTicket(self, user, int(result[1]))
            if result[2]:
                ticket._admit()
            with self._lock:
                self._live.add(ticket)
            return ticket
        finally:
            with self._lock:
                self._entering -= 1

    def ahead(self, ticket: RedisTicket) -> int | None:
        """Answers that will start before `ticket` (as `LLMQueue.ahead`); None once it is admitted
        or closed. Raises QueueUnavailable when it lost its place."""
        if ticket.admitted_at is not None or ticket.closed:
            return None
        if not ticket.lost:
            ahead = int(self._call("status", ticket.id))
            if ahead >= 0:
                return ahead
            if ahead == _ADMITTED:
                ticket._admit()
                return None
            if ticket.closed:  # from another thread, meanwhile
                return None
            ticket.lost = True
        raise self.lost_place()

    def lost_place(self) -> QueueUnavailable:
        """The error of a turn whose place ran out while it waited."""
        return QueueUnavailable(
            f"This turn lost its place in the queue for the language model: it could not be kept for "
            f"{self.lease_seconds:g} s (Redis at {self.redis_url} unreachable, or this process stalled). "
            "Try again.", {"redis": self.redis_url})

    def snapshot(self) -> dict[str, int]:
        waiting, prefilling, streaming = self._call("snapshot")
        return {"waiting": int(waiting), "prefilling": int(prefilling), "streaming": int(streaming)}

    # ------------------------------------------------------------ Redis

    def register(self, scripts: dict[str, str]) -> None:
        """More scripts over this queue's keys (`_PRELUDE`'s names and helpers), called with `call`."""
        for name, body in scripts.items():
            self._scripts[name] = self._redis.register_script(_PRELUDE + body)

    def call(self, script: str, *args: Any) -> Any:
        """Run one of the scripts (its own ARGV after the policy's); QueueUnavailable when Redis cannot be
        reached."""
        return self._call(script, *args)

    def _unavailable(self, error: redis.RedisError) -> QueueUnavailable:
        reason = str(error).rstrip(".") or type(error).__name__
        return QueueUnavailable(
            f"The queue for the language model is unavailable: Redis at {self.redis_url} cannot "
            f"be reached ({reason}). Try again in a moment; if it lasts, tell an administrator.",
            {"redis": self.redis_url},
        )

    def _call(self, script: str, *args: Any) -> Any:
        try:
            return self._scripts[script](keys=self._keys, args=[*self._policy, *args])
        except redis.RedisError as error:
            raise self._unavailable(error) from None

    def _call_quietly(self, script: str, ticket: RedisTicket, *args: Any) -> None:
        """For `streaming` and `close`, which must not fail a turn that is answered or over: if Redis
        cannot be told, the ticket's lease (no longer renewed once closed) frees its place."""
        try:
            self._call(script, ticket.id, *args)
        except QueueUnavailable as error:
            logger.warning("LLM queue: ticket %s not marked %s: %s", ticket.id, script, error.message)

    # ------------------------------------------------------------ this process's tickets

    def _watch(self, ticket: RedisTicket, *, waiting: bool) -> None:
        with self._lock:
            if waiting:
                self._waiters.add(ticket)
            else:
                self._waiters.discard(ticket)

    def _forget(self, ticket: RedisTicket) -> None:
        with self._lock:
            self._live.discard(ticket)

    def _listen(self) -> None:
        """Start the thread that wakes waiters and renews leases, subscribed when this returns."""
        with self._starting:
            if self._listener is not None:
                return
            channel = self._redis.pubsub()
            try:
                channel.subscribe(self._channel)
                # Wait for the confirmation: a change published from now on reaches this process.
                deadline = time.monotonic() + CONNECT_SECONDS
                while (
                    message := channel.get_message(timeout=max(0.0, deadline - time.monotonic()))
                ) is None or message["type"] != "subscribe":
                    if time.monotonic() >= deadline:
                        raise redis.TimeoutError("no confirmation of the subscription")
            except redis.RedisError as error:
                channel.close()
                raise self._unavailable(error) from None
            self._listener = threading.Thread(target=self._run_listener, args=(channel,), daemon=True,
                                              name=f"llm-queue {self.namespace}")
            self._listener.start()

    def _run_listener(self, channel: redis.client.PubSub) -> None:
        renew_every = self.lease_seconds / 4
        next_renewal = time.monotonic() + renew_every
        idle_since = time.monotonic()
        failing = False
        try:
            while True:
                with self._starting, self._lock:
                    if self._live or self._entering:
                        idle_since = time.monotonic()
                    elif time.monotonic() - idle_since > IDLE_SECONDS:
                        self._listener = None
                        return
                try:
                    message = channel.get_message(timeout=max(0.0, min(1.0, next_renewal - time.monotonic())))
                    if message is not None and message["type"] == "message":
                        self._wake(message["data"].split())
                    if time.monotonic() >= next_renewal:
                        next_renewal = time.monotonic() + renew_every
                        self._renew()
                    failing = False
                except (redis.RedisError, QueueUnavailable) as error:
                    if not failing:
                        logger.warning("LLM queue: Redis at %s: %s; retrying", self.redis_url, error)
                    failing = True
                    self._wake([])  # the waiters look for themselves, and report it
                    time.sleep(min(1.0, renew_every))
        finally:
            channel.close()

    def _wake(self, admitted: list[bytes]) -> None:
        """A change: the tickets of this process named in `admitted` are in, every waiter looks."""
        ids = {int(ticket_id) for ticket_id in admitted}
        with self._lock:
            for ticket in self._live:
                if ticket.id in ids:
                    ticket._admit()
            for ticket in self._waiters:
                ticket._poke()

    def _renew(self) -> None:
        with self._lock:
            tickets = {ticket.id: ticket for ticket in self._live}
        if not tickets:
            return
        gone = self._call("renew", *tickets)
        with self._lock:
            for ticket_id in gone:
                ticket = tickets[int(ticket_id)]
                if not ticket.closed and ticket.admitted_at is None:
                    ticket.lost = True
                self._live.discard(ticket)
                ticket._poke()
