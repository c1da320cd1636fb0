"""The queue of turns into the LLM (chat.llm.queue): order, gates, caps, leaving, threads."""

from __future__ import annotations

import asyncio
import threading

import pytest

from chat.llm.queue import LLMQueue, QueueFull, TurnQueue
from chat.llm.queue_redis import RedisLLMQueue


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_one_prefill_at_a_time_in_arrival_order_while_earlier_answers_stream():
    queue = LLMQueue(prefill=1, streams=4)
    first, second, third = queue.enter("a"), queue.enter("b"), queue.enter("c")
    await first.wait()  # admitted at once
    places: dict[str, list[int]] = {"b": [], "c": []}

    async def waiter(ticket, name):
        async def on_wait(ahead):
            places[name].append(ahead)
        await ticket.wait(on_wait)
        return name

    admitted: list[str] = []
    tasks = [asyncio.create_task(waiter(second, "b")), asyncio.create_task(waiter(third, "c"))]
    for task in tasks:
        task.add_done_callback(lambda t: admitted.append(t.result()))
    await _settle()
    assert admitted == [] and places == {"b": [1], "c": [2]}
    first.streaming()  # the first answer's first token: the next prompt may be read
    await _settle()
    assert admitted == ["b"] and places["c"] == [2, 1]
    assert queue.snapshot() == {"waiting": 1, "prefilling": 1, "streaming": 1}
    second.streaming()
    await asyncio.gather(*tasks)
    assert admitted == ["b", "c"]
    assert queue.snapshot() == {"waiting": 0, "prefilling": 1, "streaming": 2}
    for ticket in (first, second, third):
        ticket.close()
    assert queue.snapshot() == {"waiting": 0, "prefilling": 0, "streaming": 0}


async def test_no_more_requests_open_than_the_server_has_slots():
    queue = LLMQueue(prefill=0, streams=2)  # prefill=0: every turn sent at once, up to the slots
    tickets = [queue.enter(user) for user in "abc"]
    await tickets[0].wait()
    await tickets[1].wait()
    assert not tickets[2].admitted and queue.ahead(tickets[2]) == 0
    tickets[0].close()
    await asyncio.wait_for(tickets[2].wait(), 1)
    assert tickets[2].admitted


async def test_leaving_while_waiting_frees_the_place_and_moves_the_others_up():
    queue = LLMQueue(prefill=1, streams=1)
    running = queue.enter("a")
    stopped, later = queue.enter("b"), queue.enter("c")
    seen: list[int] = []

    async def on_wait(ahead):
        seen.append(ahead)

    stopping = asyncio.create_task(stopped.wait())
    waiting = asyncio.create_task(later.wait(on_wait))
    await _settle()
    assert seen == [2]  # "b" and the prompt being read
    stopping.cancel()  # a stop from the page while the turn waits
    with pytest.raises(asyncio.CancelledError):
        await stopping
    await _settle()
    assert stopped.closed and seen == [2, 1]
    assert queue.snapshot()["waiting"] == 1
    running.close()
    await asyncio.wait_for(waiting, 1)
    assert later.admitted


def test_caps_refuse_with_a_retry_after_and_take_nothing():
    queue = LLMQueue(prefill=1, streams=1, limit=3, per_user=2)
    queue.enter("a")  # admitted
    queue.enter("a")
    queue.enter("a")
    with pytest.raises(QueueFull) as mine:
        queue.enter("a")
    assert mine.value.status == 429 and mine.value.retry_after >= 1
    assert "2 answers waiting" in mine.value.message
    queue.enter("b")
    with pytest.raises(QueueFull) as everyone:
        queue.enter("c")
    assert "3 answers are waiting" in everyone.value.message
    assert everyone.value.details == {"waiting": 3, "yours": 0, "retry_after": everyone.value.retry_after}
    assert queue.snapshot() == {"waiting": 3, "prefilling": 1, "streaming": 0}


def test_one_users_burst_cannot_pass_the_others():
    queue = LLMQueue(prefill=1, streams=1, per_user=2)
    head = queue.enter("busy")
    order = [queue.enter(user) for user in ("busy", "quiet", "busy")]
    with pytest.raises(QueueFull):
        queue.enter("busy")
    head.close()
    order[0].close()
    assert order[1].admitted and order[1].user == "quiet"


async def test_tickets_entered_and_closed_from_other_threads_wake_the_waiter():
    queue = LLMQueue(prefill=1, streams=1)
    holder: list = []
    thread = threading.Thread(target=lambda: holder.append(queue.enter("thread")))
    thread.start()
    thread.join()
    mine = queue.enter("loop")
    waiting = asyncio.create_task(mine.wait())
    await _settle()
    assert not waiting.done()
    closer = threading.Thread(target=holder[0].close)
    closer.start()
    closer.join()
    await asyncio.wait_for(waiting, 1)
    assert mine.admitted


async def test_closing_twice_or_after_a_cancelled_wait_is_harmless():
    queue = LLMQueue(prefill=1, streams=1)
    async with queue.enter("a") as ticket:
        await ticket.wait()
        ticket.streaming()
        ticket.streaming()
    ticket.close()
    assert queue.snapshot() == {"waiting": 0, "prefilling": 0, "streaming": 0}


def test_a_policy_that_cannot_work_is_refused():
    with pytest.raises(ValueError, match="streams"):
        LLMQueue(streams=0)


def test_both_queues_are_turn_queues_and_the_configured_one_is_held_as_one(settings):
    """The in-process queue and the one in Redis share `TurnQueue`, the interface callers hold
    (`chat.llm.clients.llm_queue`). Making a Redis queue connects to nothing (port 9 is closed)."""
    from chat.llm import clients

    shared = RedisLLMQueue(redis_url="redis://127.0.0.1:9/0", server_url="http://127.0.0.1:9")
    assert isinstance(LLMQueue(), TurnQueue) and isinstance(shared, TurnQueue)
    assert not isinstance(object(), TurnQueue)
    settings.LLM_QUEUE_REDIS_URL = ""
    assert isinstance(clients.llm_queue(), LLMQueue) and isinstance(clients.llm_queue(), TurnQueue)
