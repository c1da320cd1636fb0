"""Several LLM servers shared by every web process: each server's slots, the servers that are out, and
each conversation's last server, counted in Redis beside the shared queue (`chat.llm.queue_redis`).

With `LLM_QUEUE_REDIS_URL` and `LLM_SERVERS`, the shared queue admits as many turns as all the
servers have slots (its order, caps and prefill gate). `SharedServerPool.take` then gives the admitted
turn a slot of one server, in the same Redis and by the same rule as `ServerPool.choose`, but over
every process: among the servers of the turn's model that are up, the one its conversation used
last (by any process) while it has a free slot, else the one with the most free slots (of those, the
one with fewest prompts in prefill). A turn that finds every server of its model full (one is out,
so the queue admitted more than the others hold) waits for a slot there, woken by the queue's
messages. A slot is the ticket's: it is held under the ticket's lease, so a process that dies frees
its slots with its places (the queue's `forget`), and a turn that moves to another server gives back
the one it had.

A server taken out (`mark_down`, by any process) is out for every process until `retry_seconds`
have passed on Redis's clock; a turn that succeeds on it puts it back at once. Keys (in the queue's
namespace): `held` (ticket id → server URL), `down` (URL → until, ms), `last` (conversation →
URL, emptied past `AFFINITIES` entries).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any

from chat.llm.queue_redis import QueueUnavailable, RedisLLMQueue, RedisTicket
from chat.llm.servers import AFFINITIES, RETRY_SECONDS, LLMServer, ServerPool

logger = logging.getLogger(__name__)

_TAKEN, _FULL, _NONE, _GONE = 2, 1, 0, -2

# ARGV[6] id, [7] model, [8] conversation ('' none), [9] servers [[url, model, slots], ...], [10] URLs to
# avoid
# → {2, url} taken, {1} every server of the model full, {0} no server of the model left, {-2} not admitted.
_TAKE = """
dispatch()
local id, model, conversation = ARGV[6], ARGV[7], ARGV[8]
if not (redis.call('ZSCORE', prefilling, id) or redis.call('ZSCORE', streaming, id)) then
  finish()
  return {-2}
end
if redis.call('HDEL', held, id) == 1 then changed = true end
local busy, reading = {}, {}
local holders = redis.call('HGETALL', held)
for i = 1, #holders, 2 do
  local url = holders[i + 1]
  busy[url] = (busy[url] or 0) + 1
  if redis.call('ZSCORE', prefilling, holders[i]) then reading[url] = (reading[url] or 0) + 1 end
end
local avoid = {}
for _, url in ipairs(cjson.decode(ARGV[10])) do avoid[url] = true end
local serving, up = {}, {}
for _, server in ipairs(cjson.decode(ARGV[9])) do
  if server[2] == model and not avoid[server[1]] then
    serving[#serving + 1] = server
    if tonumber(redis.call('HGET', down, server[1]) or '0') <= now then up[#up + 1] = server end
  end
end
if #serving == 0 then
  finish()
  return {0}
end
local chosen
if #up == 0 then  -- every one is out: the one out longest is tried (it may be back)
  local soonest
  for _, server in ipairs(serving) do
    local until_ms = tonumber(redis.call('HGET', down, server[1]))
    if not soonest or until_ms < soonest then chosen, soonest = server, until_ms end
  end
else
  local previous = conversation ~= '' and redis.call('HGET', last, conversation) or false
  local best_free, best_reading
  for _, server in ipairs(up) do
    local free, prompts = server[3] - (busy[server[1]] or 0), reading[server[1]] or 0
    if free > 0 then
      if server[1] == previous then
        chosen = server
        break
      end
      if not chosen or free > best_free or (free == best_free and prompts < best_reading) then
        chosen, best_free, best_reading = server, free, prompts
      end
    end
  end
  if not chosen then
    finish()
    return {1}
  end
end
redis.call('HSET', held, id, chosen[1])
if conversation ~= '' then
  if redis.call('HLEN', last) >= tonumber(ARGV[11]) then redis.call('DEL', last) end
  redis.call('HSET', last, conversation, chosen[1])
end
changed = true
finish()
return {2, chosen[1]}
"""

# ARGV[6] url, [7] ms it stays out (0: it is up again)
_DOWN = """
if tonumber(ARGV[7]) > 0 then
  redis.call('HSET', down, ARGV[6], now + tonumber(ARGV[7]))
  changed = true
elseif redis.call('HDEL', down, ARGV[6]) == 1 then
  changed = true
end
dispatch()
finish()
return 0
"""

# ARGV[6] servers [[url, model, slots], ...] → {busy, up 0/1} per server, in order
_SERVERS = """
dispatch()
finish()
local busy, result = {}, {}
for _, url in ipairs(redis.call('HVALS', held)) do busy[url] = (busy[url] or 0) + 1 end
for _, server in ipairs(cjson.decode(ARGV[6])) do
  result[#result + 1] = busy[server[1]] or 0
  result[#result + 1] = tonumber(redis.call('HGET', down, server[1]) or '0') <= now and 1 or 0
end
return result
"""


class SharedServerPool(ServerPool):
    """`ServerPool` whose slots, out servers and conversations' last servers are shared by every process
    on `queue`'s Redis (see the module docstring). Each process keeps its own for the turns it runs."""

    def __init__(self, servers: Sequence[LLMServer], queue: RedisLLMQueue, *,
                 retry_seconds: float = RETRY_SECONDS) -> None:
        super().__init__(servers, retry_seconds=retry_seconds)
        self.queue = queue
        self._described = json.dumps([[server.url, server.model, server.slots] for server in self.servers])
        self._by_url = {server.url: server for server in self.servers}
        queue.register({"servers-take": _TAKE, "servers-down": _DOWN, "servers-status": _SERVERS})

    async def take(self, ticket: Any, model: str, affinity: Any = None, *,
                   avoid: Sequence[LLMServer] = ()) -> LLMServer | None:
        """A slot of a server of `model` for the admitted `ticket`, waiting while all of them are full;
        None when no server of `model` is left (all in `avoid`). QueueUnavailable when Redis cannot
        be reached or the ticket lost its place."""
        if not isinstance(ticket, RedisTicket) or ticket._queue is not self.queue:
            return self.choose(model, affinity, avoid=avoid)
        conversation = "" if affinity is None else str(affinity)
        avoided = json.dumps([server.url for server in avoid])
        ticket._loop = asyncio.get_running_loop()  # woken by the queue's messages
        try:
            while True:
                ticket._changed = ticket._loop.create_future()
                self.queue._watch(ticket, waiting=True)
                result = await asyncio.to_thread(
                    self.queue.call,
                    "servers-take",
                    ticket.id,
                    model,
                    conversation,
                    self._described,
                    avoided,
                    AFFINITIES,
                )
                if int(result[0]) == _TAKEN:
                    return self._by_url[result[1].decode()]
                if int(result[0]) == _NONE:
                    return None
                if int(result[0]) == _GONE:
                    raise self.queue.lost_place()
                await asyncio.wait([ticket._changed], timeout=self.queue.poll_seconds)
        finally:
            self.queue._watch(ticket, waiting=False)

    def mark_down(self, server: LLMServer) -> None:
        super().mark_down(server)
        self._tell(server, round(self.retry_seconds * 1000))

    def mark_up(self, server: LLMServer) -> None:
        super().mark_up(server)
        self._tell(server, 0)

    def up(self, server: LLMServer) -> bool:
        return dict(zip(self.servers, self.status(), strict=True))[server]["up"]

    def status(self) -> list[dict[str, Any]]:
        """As `ServerPool.status`, over every process (this process's own view when Redis cannot be
        reached)."""
        try:
            flat = self.queue.call("servers-status", self._described)
        except QueueUnavailable as error:
            logger.warning("LLM servers: the shared state is unavailable: %s", error.message)
            return super().status()
        return [
            {
                "url": server.shown_url,
                "model": server.model,
                "slots": server.slots,
                "busy": int(flat[2 * n]),
                "up": bool(flat[2 * n + 1]),
            }
            for n, server in enumerate(self.servers)
        ]

    def _tell(self, server: LLMServer, out_ms: int) -> None:
        """Mark `server` out for `out_ms` (0: up) for every process; a Redis that cannot be reached is
        only logged (the turn's own error is the one to report)."""
        try:
            self.queue.call("servers-down", server.url, out_ms)
        except QueueUnavailable as error:
            logger.warning("LLM servers: %s not marked %s for the other processes: %s", server.shown_url,
                           "out" if out_ms else "up", error.message)
