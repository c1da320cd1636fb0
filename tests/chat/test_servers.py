"""Several LLM servers (chat.llm.servers): the setting, the choice of a server, and two real llama.cpp
servers on loopback behind the one streaming loop (chat.llm.answer.turn_answer): turns spread over
both, a conversation sticks to its server, one killed while it streams ends that answer with a clear
error and sends the next turns to the other, and once restarted it is used again."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from chat.llm import clients
from chat.llm.answer import AnswerClock, turn_answer
from chat.llm.queue import LLMQueue
from chat.llm.servers import LLMServer, ServerPool, ServersError, servers_parse
from engine.llama_server import LlamaServer, LlamaServerError
from engine.llm.answer import AnswerTokens
from engine.llm.errors import LLMConnectionError
from engine.llm.sampling import GenerationSettings

KEY = "sk-servers-secret-91c2"
SHORT = GenerationSettings(temperature=0.0, top_p=1.0, max_tokens=8)
LONG = GenerationSettings(temperature=0.0, top_p=1.0, max_tokens=600)


def test_servers_are_read_from_json_or_a_yaml_file_with_defaults(tmp_path):
    servers = servers_parse(
        json.dumps(
            [
                {"url": "http://127.0.0.1:1/", "key": KEY, "model": "big", "slots": 2},
                {"url": "http://127.0.0.1:2"},
            ]
        ),
        default_model="small",
        default_slots=8,
    )
    assert servers == [
        LLMServer("http://127.0.0.1:1", "big", 2, KEY),
        LLMServer("http://127.0.0.1:2", "small", 8),
    ]
    assert KEY not in repr(servers)
    path = tmp_path / "servers.yaml"
    path.write_text("- url: http://127.0.0.1:3\n  model: big\n  slots: 4\n")
    assert servers_parse(str(path), default_model="x", default_slots=1) == [
        LLMServer("http://127.0.0.1:3", "big", 4)
    ]


@pytest.mark.parametrize(("text", "said"), [
    ("[]", "non-empty list"),
    (json.dumps([{"url": "ftp://h", "key": KEY}]), "http:// or https://"),
    (json.dumps([{"url": f"http://u:{KEY}@h:1", "slots": 0}]), "slots must be an integer >= 1"),
    (json.dumps([{"url": "http://h:1", "key": KEY, "modle": "x"}]), "unknown field(s) modle"),
    ('[{"url": "http://h:1"}, {"url": "http://h:1/"}]', "named twice"),
    ("/no/such/servers.yaml", "cannot read it"),
])
def test_a_bad_setting_is_a_clear_error_that_shows_no_key(text, said):
    with pytest.raises(ServersError, match=said.replace("(", r"\(").replace(")", r"\)")) as caught:
        servers_parse(text, default_model="m", default_slots=1)
    assert KEY not in str(caught.value)


def test_a_bad_setting_stops_the_start_checks(settings):
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    settings.LLM_SERVERS = json.dumps([{"url": "http://127.0.0.1:1", "key": KEY, "slots": -1}])
    with pytest.raises(SystemCheckError, match="slots must be an integer") as caught:
        call_command("check")
    assert KEY not in str(caught.value)


def test_the_choice_spreads_sticks_and_skips_a_server_that_is_out():
    one, two = LLMServer("http://127.0.0.1:1", "m", 2), LLMServer("http://127.0.0.1:2", "m", 2)
    other = LLMServer("http://127.0.0.1:3", "big", 1)
    pool = ServerPool([one, two, other], retry_seconds=3600)
    assert pool.choose("nope") is None
    with pool.lease(pool.choose("m", "a"), "a"):
        assert pool.choose("m", "b") == two  # the freer one
        with pool.lease(two, "b"):
            assert pool.choose("m", "a") == one and pool.choose("m", "b") == two  # each sticks
            assert pool.choose("big", "a") == other
    pool.mark_down(one)
    assert pool.choose("m", "a") == two and [s["up"] for s in pool.status()] == [False, True, True]
    pool.mark_down(two)
    assert pool.choose("m", "a") == one  # all out: the one out longest is tried
    pool.mark_up(one)
    assert pool.choose("m", "b") == one


async def test_with_a_server_out_a_turn_waits_for_a_free_slot_of_the_others():
    one, two = LLMServer("http://127.0.0.1:1", "m", 1), LLMServer("http://127.0.0.1:2", "m", 1)
    pool = ServerPool([one, two], retry_seconds=3600)
    pool.mark_down(one)
    with pool.lease(await pool.take(None, "m"), "a"):
        waiting = asyncio.create_task(pool.take(None, "m", "b"))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # the server that is up has no free slot: not given a second turn
    assert await asyncio.wait_for(waiting, timeout=5) == two  # its slot freed: the turn goes on
    pool.mark_down(two)
    with pool.lease(one, "a"), pool.lease(two, "b"):
        assert await pool.take(None, "m") == one  # every server out: the one out longest is tried at once


@pytest.mark.django_db
def test_staff_see_which_servers_are_up_without_credentials(settings, django_user_model):
    from django.test import Client

    settings.LLM_SERVERS = json.dumps(
        [
            {"url": f"http://portal:{KEY}@127.0.0.1:7", "key": KEY, "model": "big"},
            {"url": "http://127.0.0.1:8", "model": "small", "slots": 3},
        ]
    )
    clients.server_pool().retry_seconds = 3600  # out for the whole test, however slow the machine
    clients.server_pool().mark_down(clients.server_pool().servers[0])
    staff = django_user_model.objects.create_user("staff", password="pw-staff-123", is_staff=True)
    member = django_user_model.objects.create_user("member", password="pw-member-123")
    page = Client()
    page.force_login(staff)
    html = page.get("/").content.decode()
    table = html[html.index('id="dashboard-llm-servers"'):]
    assert "http://127.0.0.1:7" in table and "out, tried again soon" in table
    assert "http://127.0.0.1:8" in table and "0 / 3" in table and "small" in table
    assert KEY not in html
    page.force_login(member)
    assert 'id="dashboard-llm-servers"' not in page.get("/").content.decode()


def _start(gguf, port: int = 0) -> LlamaServer:
    server = LlamaServer(gguf, threads=1, ctx_size=2048, parallel=2, port=port)
    try:
        return server.start()
    except LlamaServerError as exc:
        pytest.fail(f"llama.cpp server could not start: {exc}", pytrace=False)


@pytest.fixture
def two_servers(gemma_gguf, settings) -> Iterator[list[LlamaServer]]:
    servers = [_start(gemma_gguf), _start(gemma_gguf)]
    settings.LLM_SERVERS = json.dumps(
        [{"url": server.base_url, "model": "gemma", "slots": 2} for server in servers]
    )
    settings.LLM_TIMEOUT_SECONDS = 120
    try:
        yield servers
    finally:
        for server in servers:
            server.stop()


async def _answer(queue: LLMQueue, affinity: int, settings: GenerationSettings = SHORT, on_delta=None):  # noqa: ANN001
    """One answer through the portal's streaming loop: its end and the server that gave it."""
    prepared = SimpleNamespace(plan=SimpleNamespace(messages=[{"role": "user", "content": "Name a colour."}]),
                               generation=settings)
    clock = AnswerClock()
    ticket = queue.enter(affinity)
    async with ticket:
        end = await turn_answer(ticket=ticket, prepared=prepared, loop_retries=0, tokens=AnswerTokens(),
                                clock=clock, on_delta=on_delta, affinity=affinity)
    return end, clock.server


async def test_turns_spread_stick_fail_over_and_come_back(two_servers, gemma_gguf):
    pool = clients.server_pool()
    pool.retry_seconds = 5.0
    urls = [server.base_url for server in two_servers]
    queue = LLMQueue(prefill=2, streams=4, limit=16, per_user=4)
    # Two conversations at once: one on each server; each then sticks to its own.
    (_, first), (_, second) = await asyncio.gather(_answer(queue, 1), _answer(queue, 2))
    assert {first.url, second.url} == set(urls)
    assert (await _answer(queue, 1))[1] == first and (await _answer(queue, 2))[1] == second

    # The server of conversation 1 is killed while it streams: that answer ends with a clear error.
    victim = two_servers[urls.index(first.url)]
    port = victim.port

    async def kill_on_first(delta: str) -> None:
        if victim.running:
            await asyncio.to_thread(victim.stop)

    with pytest.raises(LLMConnectionError, match=f"127.0.0.1:{port}"):
        await _answer(queue, 1, LONG, on_delta=kill_on_first)
    assert [s["up"] for s in pool.status() if s["url"] == first.url] == [False]
    # Every new turn, of either conversation, is answered by the other server.
    ends = await asyncio.gather(*(_answer(queue, conversation) for conversation in (1, 2, 3, 4)))
    assert {server.url for _, server in ends} == {second.url}
    assert all(end.content.strip() for end, _ in ends)

    # Restarted on its port: after the retry interval it is tried again, and turns spread over both.
    two_servers[urls.index(first.url)] = _start(gemma_gguf, port=port)
    await asyncio.sleep(pool.retry_seconds)
    again = await asyncio.gather(_answer(queue, 5), _answer(queue, 6))
    assert {server.url for _, server in again} == set(urls) and all(end.content.strip() for end, _ in again)
    assert all(s["up"] for s in pool.status())
