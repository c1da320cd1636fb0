"""The queue of turns shared through Redis (chat.llm.queue_redis): two queue objects stand
for two web processes (and one test uses real OS processes); order, gates and caps hold over
all of them, a dead owner's place is freed by its lease, and a Redis that cannot be reached is a
clear error. Against the real Redis of REDIS_URL (default: the local one): fails, never skips,
when it is unreachable."""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from rest_framework.test import APIClient

from accounts.services.tokens import api_token_create
from chat.llm import clients
from chat.llm.queue import LLMQueue, QueueFull
from chat.llm.queue_redis import QueueUnavailable, RedisLLMQueue, namespace
from engine.llama_server import free_port
from tests.plugins.services import REDIS_URL, redis_namespaces_delete
from tests.plugins.waiting import PATIENCE_SECONDS, wait_until, wait_until_async

pytestmark = pytest.mark.service

ROOT = Path(__file__).resolve().parents[3]
LEASE = 2.0  # seconds: short for the tests, long enough for a loaded machine (2 busy cores) to renew in time


@pytest.fixture
def server_url() -> str:
    """An LLM server of this test alone, so its keys are its own."""
    return f"http://llm-{uuid.uuid4().hex[:12]}.test:8081"


@pytest.fixture
def make_queue(redis_url, server_url) -> Iterator[Callable[..., RedisLLMQueue]]:
    """`make_queue(**policy)`: one web process's queue object; every key they made is deleted after."""
    made: list[RedisLLMQueue] = []

    def make(**options) -> RedisLLMQueue:
        options = {
            "prefill": 1,
            "streams": 4,
            "poll_seconds": 0.2,
            "redis_url": redis_url,
            "server_url": server_url,
            **options,
        }
        made.append(RedisLLMQueue(**options))
        return made[-1]

    yield make
    redis_namespaces_delete(redis_url, (queue.namespace for queue in made))


async def _until(
    condition: Callable[[], bool], what: str = "the queue's state", timeout: float = PATIENCE_SECONDS
) -> float:
    """Seconds until `condition()` holds (tests/plugins/waiting.py)."""
    started = time.monotonic()
    await wait_until_async(condition, what=what, timeout=timeout, every=0.005)
    return time.monotonic() - started


def _lease_expiries(queue: RedisLLMQueue) -> dict[int, float]:
    """Each ticket's lease expiry in Redis (ms, Redis's clock), by ticket id."""
    client = redis.Redis.from_url(REDIS_URL)
    return {int(ticket): expiry for ticket, expiry in client.zrange(f"{queue.namespace}:leases", 0, -1,
                                                                     withscores=True)}


async def _renewed_past_their_first_lease(queue: RedisLLMQueue, tickets: dict[int, float]) -> None:
    """Wait until every ticket of `tickets` (id → its first lease expiry) outlived that expiry by
    Redis's clock and was renewed: without renewal its place would have gone. No fixed sleep: on a
    slow machine this waits longer, never wrongly."""
    client = redis.Redis.from_url(REDIS_URL)

    def renewed() -> bool:
        seconds, micros = client.time()
        now_ms = seconds * 1000 + micros / 1000
        now = _lease_expiries(queue)
        return now_ms > max(tickets.values()) and all(now.get(t, 0) > first for t, first in tickets.items())

    await wait_until_async(
        renewed, what=f"the leases of tickets {sorted(tickets)} renewed past their first expiry"
    )


async def test_two_processes_let_one_prompt_into_prefill_at_a_time_in_arrival_order(make_queue):
    web1, web2 = make_queue(), make_queue()
    first = web1.enter("a")
    assert first.admitted
    tickets = {"b": web2.enter("b"), "c": web1.enter("c"), "d": web2.enter("d")}
    places: dict[str, list[int]] = {name: [] for name in tickets}
    admitted: list[str] = []

    async def waiter(name: str) -> None:
        async def on_wait(ahead: int) -> None:
            places[name].append(ahead)
        await tickets[name].wait(on_wait)
        admitted.append(name)

    tasks = [asyncio.create_task(waiter(name)) for name in tickets]
    await _until(lambda: all(places.values()))
    assert places == {"b": [1], "c": [2], "d": [3]}  # the prompt being read, then arrival order
    assert web1.snapshot() == web2.snapshot() == {"waiting": 3, "prefilling": 1, "streaming": 0}
    first.streaming()  # the first token in process 1: process 2's turn is next
    await _until(lambda: admitted == ["b"])
    await _until(lambda: places["c"][-1] == 1 and places["d"][-1] == 2)
    await asyncio.sleep(0.3)
    assert admitted == ["b"]  # one prefill over both processes
    tickets["b"].streaming()
    await _until(lambda: admitted == ["b", "c"])
    tickets["c"].streaming()
    await asyncio.gather(*tasks)
    assert admitted == ["b", "c", "d"]
    assert web2.snapshot() == {"waiting": 0, "prefilling": 1, "streaming": 3}
    for ticket in (first, *tickets.values()):
        ticket.close()
    assert web1.snapshot() == {"waiting": 0, "prefilling": 0, "streaming": 0}


async def test_no_more_requests_open_over_all_processes_than_the_server_has_slots(make_queue):
    web1, web2 = make_queue(prefill=0, streams=2), make_queue(prefill=0, streams=2)
    running = [web1.enter("a"), web2.enter("b")]
    third = web1.enter("c")
    assert all(ticket.admitted for ticket in running) and not third.admitted
    assert web2.ahead(third) == 0  # prefill=0: only the turns waiting before it count
    running[1].close()  # in the other process
    await asyncio.wait_for(third.wait(), 2)
    assert web1.snapshot() == {"waiting": 0, "prefilling": 2, "streaming": 0}


def test_the_caps_count_every_process_and_refuse_as_the_in_process_queue_does(make_queue):
    """The same turns into one in-process queue and into two processes' shared one: the same
    refusals, word for word, with the same Retry-After."""
    shared = [make_queue(streams=1, limit=3, per_user=2) for _ in range(2)]
    alone = LLMQueue(prefill=1, streams=1, limit=3, per_user=2)

    def refusals(queues: list) -> list[tuple[str, dict]]:
        seen = []
        for step, user in enumerate(["a", "a", "a", "a", "b", "c"]):
            try:
                queues[step % len(queues)].enter(user)
            except QueueFull as refused:
                assert refused.status == 429 and refused.retry_after >= 1
                seen.append((refused.message, refused.details))
        return seen

    expected = refusals([alone])
    assert [message for message, _ in expected] == [
        "You already have 2 answers waiting for the model; wait for them or stop one, then try again.",
        "The model is busy: 3 answers are waiting. Try again in about 40 s."]
    assert refusals(shared) == expected
    assert shared[1].snapshot() == alone.snapshot() == {"waiting": 3, "prefilling": 1, "streaming": 0}


async def test_a_ticket_no_one_renews_is_dropped_after_its_lease(make_queue):
    """A ticket dropped without being closed (its owner crashed in this process) is no longer
    renewed: its place is kept for the lease, then given to the next turn."""
    web1, web2 = make_queue(lease_seconds=LEASE), make_queue(lease_seconds=LEASE, poll_seconds=0.1)
    forgotten = web1.enter("a")
    assert forgotten.admitted
    waiting = web2.enter("b")
    await _renewed_past_their_first_lease(web1, {forgotten.id: _lease_expiries(web1)[forgotten.id]})
    assert not waiting.admitted  # renewed meanwhile by process 1: still held
    del forgotten
    gc.collect()
    # Never renewed again, its lease runs out and the waiting turn is let in (a lease that never
    # ran out would hold the place for good: the wait would fail).
    await _until(lambda: waiting.admitted)
    assert web2.snapshot() == {"waiting": 0, "prefilling": 1, "streaming": 0}


CHILD = """
import sys, time
from chat.llm.queue_redis import RedisLLMQueue
queue = RedisLLMQueue(redis_url=sys.argv[1], server_url=sys.argv[2], prefill=1, streams=4,
                      lease_seconds=float(sys.argv[3]))
ticket = queue.enter("child")
print("admitted" if ticket.admitted else "waiting", flush=True)
if sys.stdin.readline().strip() == "streaming":
    ticket.streaming()
    print("streaming", flush=True)
time.sleep(60)
"""


def _child(redis_url: str, server_url: str) -> subprocess.Popen:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "hdrag_site.settings"}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, redis_url, server_url, str(LEASE)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "admitted"
    return child


async def test_real_processes_share_the_prefill_and_a_killed_one_frees_its_place(
    make_queue, redis_url, server_url
):
    parent = make_queue(lease_seconds=LEASE, poll_seconds=0.1)
    child = _child(redis_url, server_url)
    try:
        mine = parent.enter("parent")
        waiting = asyncio.create_task(mine.wait())
        # The child's thread renews its place past its first lease.
        await _renewed_past_their_first_lease(
            parent,
            {ticket: expiry for ticket, expiry in _lease_expiries(parent).items() if ticket != mine.id},
        )
        assert not waiting.done() and parent.snapshot() == {"waiting": 1, "prefilling": 1, "streaming": 0}
        child.stdin.write("streaming\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "streaming"
        await asyncio.wait_for(
            waiting, PATIENCE_SECONDS
        )  # the child's first token lets this process's turn in
        mine.close()
        child.send_signal(signal.SIGKILL)
        child.wait()
        # The killed child's streaming turn keeps its slot until the lease runs out.
        assert parent.snapshot()["streaming"] == 1
        await _until(lambda: parent.snapshot()["streaming"] == 0)
    finally:
        child.kill()
        child.wait()

    second = _child(redis_url, server_url)
    try:
        later = parent.enter("parent")
        assert not later.admitted
        second.send_signal(signal.SIGKILL)  # dies in prefill: its place is freed when its lease runs out
        await _until(lambda: later.admitted)
    finally:
        second.kill()
        second.wait()


async def test_cancelling_a_waiter_gives_its_place_up_in_every_process(make_queue):
    web1, web2 = make_queue(streams=1), make_queue(streams=1)
    running = web1.enter("a")
    stopped, later = web2.enter("b"), web1.enter("c")
    seen: list[int] = []

    async def on_wait(ahead: int) -> None:
        seen.append(ahead)

    stopping = asyncio.create_task(stopped.wait())
    waiting = asyncio.create_task(later.wait(on_wait))
    await _until(lambda: seen == [2])
    stopping.cancel()  # a stop from the page while the turn waits, in process 2
    with pytest.raises(asyncio.CancelledError):
        await stopping
    await _until(lambda: seen == [2, 1])  # process 1's waiter moved up
    assert stopped.closed and web1.snapshot()["waiting"] == 1
    running.close()
    await asyncio.wait_for(waiting, 2)
    assert later.admitted


async def test_waiters_are_woken_by_the_change_not_by_polling(make_queue):
    web1, web2 = make_queue(), make_queue(poll_seconds=30)
    running = web1.enter("a")
    waiting = web2.enter("b")
    in_line: list[int] = []

    async def on_wait(ahead: int) -> None:
        in_line.append(ahead)

    task = asyncio.create_task(waiting.wait(on_wait))
    await _until(lambda: in_line, "the waiter in line")
    started = time.monotonic()
    running.close()
    await asyncio.wait_for(task, 2)
    assert time.monotonic() - started < 1


def test_an_unreachable_redis_is_a_clear_error_without_its_credentials():
    port = free_port()
    queue = RedisLLMQueue(redis_url=f"redis://portal:s3cret@127.0.0.1:{port}/0?password=other",
                          server_url="http://llm.test:8081")
    started = time.monotonic()
    with pytest.raises(QueueUnavailable) as unavailable:
        queue.enter("a")
    assert time.monotonic() - started < 5
    error = unavailable.value
    assert (error.status, error.code) == (503, "llm_queue_unavailable")
    assert f"Redis at redis://127.0.0.1:{port}/0 cannot be reached" in error.message
    assert "s3cret" not in error.message and "other" not in error.message and "portal" not in error.message
    assert error.details == {"redis": f"redis://127.0.0.1:{port}/0"}


@pytest.fixture
def own_redis(tmp_path) -> Iterator[tuple[str, subprocess.Popen]]:
    """A Redis server of this test alone, to stop while a turn waits."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is not installed"
    port = free_port()
    server = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)

    def answers() -> bool:
        try:
            return client.ping()
        except redis.ConnectionError:
            return False

    wait_until(answers, what="redis-server starting")
    yield url, server
    server.kill()
    server.wait()


async def test_a_turn_waiting_when_redis_goes_away_gets_the_clear_error(own_redis):
    url, server = own_redis
    queue = RedisLLMQueue(redis_url=url, server_url="http://llm.test:8081", poll_seconds=0.2)
    running, waiting = queue.enter("a"), queue.enter("b")
    in_line: list[int] = []

    async def on_wait(ahead: int) -> None:
        in_line.append(ahead)

    task = asyncio.create_task(waiting.wait(on_wait))
    await _until(lambda: in_line, "the waiter in line")
    server.kill()
    server.wait()
    with pytest.raises(QueueUnavailable, match="cannot be reached"):
        await asyncio.wait_for(task, 5)
    running.close()  # Redis cannot be told: logged, not raised (the lease frees the place)
    assert running.closed


def test_keys_of_one_llm_server_do_not_touch_another(make_queue, redis_url):
    busy = make_queue(streams=1, limit=1)
    held, _ = busy.enter("a"), busy.enter("b")
    with pytest.raises(QueueFull):
        busy.enter("c")
    other_server = make_queue(streams=1, limit=1, server_url=f"http://other-{uuid.uuid4().hex[:8]}.test:8081")
    other_policy = make_queue(streams=2, limit=1)  # the same server, another policy: another queue
    for queue in (other_server, other_policy):
        assert queue.enter("a").admitted
        assert queue.snapshot() == {"waiting": 0, "prefilling": 1, "streaming": 0}
    assert busy.snapshot() == {"waiting": 1, "prefilling": 1, "streaming": 0}
    assert len({busy.namespace, other_server.namespace, other_policy.namespace}) == 3
    held.close()


@pytest.mark.parametrize(
    ("url", "shared"),
    [("http://127.0.0.1:8081", False), ("http://localhost:8081/", False), ("http://llm.internal:8081", True)],
)
def test_a_loopback_server_is_each_machines_own(monkeypatch, url, shared):
    policy = {"prefill": 1, "streams": 8, "limit": 32, "per_user": 2}
    monkeypatch.setattr(socket, "gethostname", lambda: "web-1")
    on_web1 = namespace(url, **policy)
    monkeypatch.setattr(socket, "gethostname", lambda: "web-2")
    assert (namespace(url, **policy) == on_web1) is shared


def test_the_setting_picks_the_shared_queue_and_a_bad_one_stops_the_start(settings, redis_url, tmp_path):
    settings.LLM_QUEUE_REDIS_URL = redis_url
    settings.LLM_BASE_URL = f"http://llm-{uuid.uuid4().hex[:8]}.test:8081"
    queue = clients.llm_queue()
    assert isinstance(queue, RedisLLMQueue) and clients.llm_queue() is queue
    settings.LLM_QUEUE_REDIS_URL = ""
    assert isinstance(clients.llm_queue(), LLMQueue)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "hdrag_site.settings", "DATA_DIR": str(tmp_path),
           "LLM_QUEUE_REDIS_URL": "http://portal:s3cret@redis.example:6379"}
    started = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=120)
    assert started.returncode != 0
    assert "LLM_QUEUE_REDIS_URL: expected a redis://, rediss:// or unix:// URL" in started.stderr
    assert "s3cret" not in started.stderr


@pytest.mark.django_db
def test_the_api_answers_503_when_the_queue_cannot_be_reached(settings, owner):
    settings.LLM_QUEUE_REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    _, secret = api_token_create(user=owner, name="tests")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    response = client.post("/api/v1/chat/completions", {"model": "none", "messages": [
        {"role": "user", "content": "Hi."}]}, format="json")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "llm_queue_unavailable"
    assert "cannot be reached" in response.json()["error"]["message"]


@pytest.mark.django_db(transaction=True)
async def test_the_chat_says_so_when_the_queue_cannot_be_reached(settings, owner):
    from channels.db import database_sync_to_async

    from chat.models import Message
    from chat.services import conversation_create
    from tests.plugins.chat import open_socket

    settings.LLM_QUEUE_REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    conversation = await database_sync_to_async(conversation_create)(user=owner, use_memory=False)
    socket, connected, _ = await open_socket(owner, conversation.pk)
    assert connected and (await socket.receive_json_from())["type"] == "chat.ready"
    await socket.send_json_to({"type": "chat.send", "content": "Hello?"})
    error = await socket.receive_json_from(timeout=10)
    await socket.disconnect()
    assert error["type"] == "chat.error" and error["code"] == "llm_queue_unavailable"
    assert "cannot be reached" in error["error"]
    assert not await database_sync_to_async(Message.objects.filter(conversation=conversation).exists)()


@pytest.mark.django_db(transaction=True)
async def test_a_chat_turn_waiting_when_the_queue_is_lost_ends_with_the_queue_error(
    settings, owner, own_redis
):
    from channels.db import database_sync_to_async

    from chat.models import Message
    from chat.services import conversation_create
    from tests.plugins.chat import open_socket

    url, server = own_redis
    settings.LLM_QUEUE_REDIS_URL = url
    settings.LLM_BASE_URL = f"http://llm-{uuid.uuid4().hex[:8]}.test:8081"  # never reached: the turn waits
    holder = clients.llm_queue().enter("another user")  # in prefill: the turn below waits behind it
    conversation = await database_sync_to_async(conversation_create)(user=owner, use_memory=False)
    socket, connected, _ = await open_socket(owner, conversation.pk)
    assert connected and (await socket.receive_json_from())["type"] == "chat.ready"
    await socket.send_json_to({"type": "chat.send", "content": "Hello?"})
    events = [await socket.receive_json_from(timeout=10)]
    while events[-1]["type"] != "chat.queued":
        events.append(await socket.receive_json_from(timeout=10))
    server.kill()
    server.wait()
    while events[-1]["type"] != "chat.error":
        events.append(await socket.receive_json_from(timeout=15))
    await socket.disconnect()
    holder.close()
    assert events[-1]["code"] == "llm_queue_unavailable" and "Redis at" in events[-1]["error"]
    stored = await database_sync_to_async(list)(
        Message.objects.filter(conversation=conversation).order_by("pk")
    )
    assert [m.role for m in stored] == ["user", "assistant"]  # the question kept, the failure said
    assert stored[1].status == Message.Status.ERROR and "Redis at" in stored[1].error
