"""Several LLM servers behind the queue in Redis (chat.llm.servers_redis): two queue objects and their
pools stand for two web processes on one Redis. Each server's slots are counted over both, a
conversation sticks to its server whichever process runs its turn, a server one process takes out is
out for the other, a turn that finds its model's servers full waits for a slot, and a process that
dies frees its slots with its places. Then two real llama.cpp servers answer turns from both
processes, never more at once on a server than its slots. Against the real Redis of REDIS_URL."""

from __future__ import annotations

import asyncio
import gc
import time
import uuid
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import pytest

from chat.llm.answer import AnswerClock, turn_answer
from chat.llm.queue_redis import RedisLLMQueue
from chat.llm.servers import LLMServer
from chat.llm.servers_redis import SharedServerPool
from engine.llama_server import LlamaServer, LlamaServerError
from engine.llm.answer import AnswerTokens
from engine.llm.sampling import GenerationSettings
from tests.plugins.services import redis_namespaces_delete
from tests.plugins.waiting import wait_until_async

pytestmark = pytest.mark.service

LEASE = 2.0  # seconds: short for the tests, long enough for a loaded machine to renew in time
ONE, TWO = LLMServer("http://127.0.0.1:1", "m", 1), LLMServer("http://127.0.0.1:2", "m", 1)
BIG = LLMServer("http://127.0.0.1:3", "big", 1)


@pytest.fixture
def make_process(redis_url) -> Iterator[Callable[..., tuple[RedisLLMQueue, SharedServerPool]]]:
    """`make_process(servers, **policy)`: one web process's queue and pool on a namespace of this test
    alone; every key they made is deleted after."""
    name = f"servers-{uuid.uuid4().hex[:12]}"
    made: list[RedisLLMQueue] = []

    def make(servers: list[LLMServer], **policy) -> tuple[RedisLLMQueue, SharedServerPool]:
        policy = {
            "prefill": 0,
            "streams": sum(server.slots for server in servers),
            "poll_seconds": 0.2,
            **policy,
        }
        made.append(RedisLLMQueue(redis_url=redis_url, server_url=name, **policy))
        return made[-1], SharedServerPool(servers, made[-1], retry_seconds=3600)

    yield make
    redis_namespaces_delete(redis_url, (queue.namespace for queue in made))


async def test_slots_are_counted_over_both_processes_and_a_conversation_sticks(make_process):
    web1, pool1 = make_process([ONE, TWO, BIG])
    web2, pool2 = make_process([ONE, TWO, BIG])
    unserved = web1.enter("z")
    assert await pool1.take(unserved, "nope", 9) is None  # no server of that model
    unserved.close()
    first = web1.enter("a")
    assert await pool1.take(first, "m", 1) == ONE
    second = web2.enter("b")
    assert await pool2.take(second, "m", 2) == TWO  # ONE's one slot is held by the other process
    big = web2.enter("c")
    assert await pool2.take(big, "big", 3) == BIG  # another model, its own server
    assert [entry["busy"] for entry in pool2.status()] == [1, 1, 1]
    first.close()
    second.close()
    # Conversation 2 ran on TWO through process 2: through process 1 it goes there again, though ONE is as
    # free.
    again = web1.enter("d")
    assert await pool1.take(again, "m", 2) == TWO
    assert [entry["busy"] for entry in pool1.status()] == [0, 1, 1]
    other = web2.enter("e")
    assert await pool2.take(other, "m", 2) == ONE  # its server full: the free one
    assert [entry["busy"] for entry in pool1.status()] == [1, 1, 1]


async def test_a_server_out_for_one_process_is_out_for_the_other_and_full_servers_make_a_turn_wait(
    make_process,
):
    web1, pool1 = make_process([ONE, TWO])
    web2, pool2 = make_process([ONE, TWO])
    pool1.mark_down(ONE)
    assert [entry["up"] for entry in pool2.status()] == [False, True] and not pool2.up(ONE)
    holder = web2.enter("a")
    assert await pool2.take(holder, "m", 1) == TWO  # conversation 1 had never run: the one up
    # The queue admits two turns (two slots in all) but the one server up has one: the second waits there.
    waiter = web1.enter("b")
    assert waiter.admitted
    taking = asyncio.create_task(pool1.take(waiter, "m", 2))
    await wait_until_async(lambda: web1.snapshot()["prefilling"] == 2, what="both turns admitted")
    assert not taking.done()
    holder.close()  # the slot is given back in process 2: process 1's turn gets it
    assert await asyncio.wait_for(taking, timeout=60) == TWO
    # Every server of the model out: the one out longest is tried, and a turn that succeeds there puts it
    # back.
    pool2.mark_down(TWO)
    waiter.close()
    later = web1.enter("c")
    assert await pool1.take(later, "m", 3) == ONE
    pool1.mark_up(ONE)
    assert [entry["up"] for entry in pool2.status()] == [True, False]
    assert await pool1.take(later, "m", 3, avoid=[ONE]) == TWO  # ONE tried already: the other, though out
    assert await pool1.take(later, "m", 3, avoid=[ONE, TWO]) is None  # both tried: none left


async def test_the_slots_of_a_process_that_died_are_freed_by_its_leases(make_process):
    web1, pool1 = make_process([ONE], lease_seconds=LEASE, streams=2)
    # The survivor's own lease is the default: a stall of this busy machine must not cost it its place.
    web2, pool2 = make_process([ONE], streams=2)
    crashed = web1.enter("a")
    assert await pool1.take(crashed, "m", 1) == ONE
    survivor = web2.enter("b")
    taking = asyncio.create_task(pool2.take(survivor, "m", 2))  # ONE's slot is held
    await wait_until_async(lambda: web2.snapshot()["prefilling"] == 2, what="both turns admitted")
    del crashed  # its owner is gone without closing it: no one renews its lease
    gc.collect()
    assert await asyncio.wait_for(taking, timeout=60) == ONE
    assert [entry["busy"] for entry in pool2.status()] == [1]


# ------------------------------------------------------------ two real llama.cpp servers

def _start(gguf) -> LlamaServer:
    server = LlamaServer(gguf, threads=1, ctx_size=1024, parallel=1)
    try:
        return server.start()
    except LlamaServerError as exc:
        pytest.fail(f"llama.cpp server could not start: {exc}", pytrace=False)


async def test_two_processes_never_put_more_turns_on_a_real_server_than_its_slots(make_process, gemma_gguf,
                                                                                   settings):
    settings.LLM_TIMEOUT_SECONDS = 120
    servers = [_start(gemma_gguf), _start(gemma_gguf)]
    try:
        pool_servers = [LLMServer(server.base_url, "gemma", 1) for server in servers]
        processes = [make_process(pool_servers), make_process(pool_servers)]
        prepared = SimpleNamespace(
            plan=SimpleNamespace(messages=[{"role": "user", "content": "Name a colour."}]),
            generation=GenerationSettings(temperature=0.0, top_p=1.0, max_tokens=12),
        )
        spans: list[tuple[str, float, float]] = []  # server, first piece, end: inside the turn's slot

        async def turn(number: int) -> str:
            queue, pool = processes[number % 2]
            clock = AnswerClock()
            async with queue.enter(number) as ticket:
                end = await turn_answer(ticket=ticket, prepared=prepared, loop_retries=0,
                                        tokens=AnswerTokens(), clock=clock, affinity=number, pool=pool)
                spans.append((clock.server.url, clock.first_token, time.perf_counter()))
            return end.content

        answers = await asyncio.gather(*(turn(number) for number in range(6)))
    finally:
        for server in servers:
            server.stop()
    assert all(answer.strip() for answer in answers)
    assert {url for url, _, _ in spans} == {server.url for server in pool_servers}  # both used
    for url in {url for url, _, _ in spans}:
        mine = sorted((start, end) for server, start, end in spans if server == url)
        assert all(later[0] >= earlier[1] for earlier, later in zip(mine, mine[1:], strict=False)), \
            f"two turns at once on {url}, which has one slot: {mine}"
