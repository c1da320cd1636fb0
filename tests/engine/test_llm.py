"""engine.llm against the real llama.cpp server on the real Gemma model, and prompt assembly
with the real Gemma tokenizer (token counts checked against the server's own usage)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import httpx
import pytest

from engine.config import Config
from engine.llama_server import free_port
from engine.llm.answer import AnswerTokens, Rewind
from engine.llm.client import LLMClient
from engine.llm.errors import (
    LLMConnectionError,
    LLMHTTPError,
    LLMProtocolError,
    LLMTimeoutError,
    PromptTooLongError,
)
from engine.llm.prompt import (
    MESSAGE_TOKENS,
    TEMPLATE_TOKENS,
    ContextBudget,
    assemble_prompt,
    user_turn_with_memories,
)
from engine.llm.sampling import (
    LOOP_RETRY_DRY_LAST_N,
    LOOP_RETRY_DRY_MULTIPLIER,
    GenerationSettings,
    loop_retry_settings,
)
from engine.llm.stream import ChatChunk, CompletionStream, RecitationCut, TokenLogprob, sse_lines
from engine.llm.tokens import ServerTokenCounter
from tests.plugins.waiting import wait_until_async

GREEDY = GenerationSettings(temperature=0.0, top_p=1.0, max_tokens=24)
QUESTION = [{"role": "user", "content": "Name three colours."}]
WORDS = ["memory", "river", "lantern", "orbit", "quiet", "granite", "velvet", "signal", "harbor", "meadow"]


async def _collect(client: LLMClient, messages, settings=GREEDY):
    return [chunk async for chunk in client.stream_chat(messages, settings)]


async def test_stream_yields_several_deltas_then_usage(llama_server):
    client = LLMClient(llama_server.base_url)
    chunks = await _collect(client, QUESTION)
    deltas = [c.delta for c in chunks if c.delta]
    assert len(deltas) >= 3
    final = chunks[-1]
    assert final.delta == "" and final.finish_reason in {"stop", "length"}
    assert final.usage is not None and 0 < final.usage.completion_tokens <= GREEDY.max_tokens
    assert final.usage.prompt_tokens > 5
    # Each streamed delta is one generated token (or a few merged bytes of one character).
    assert len(deltas) <= final.usage.completion_tokens
    text, again = await client.complete(QUESTION, GREEDY)
    assert text.strip() and again.usage.prompt_tokens == final.usage.prompt_tokens


async def test_max_tokens_and_sampling_settings_are_sent_and_honoured(llama_server):
    client = LLMClient(llama_server.base_url)
    settings = GenerationSettings(temperature=0.0, top_p=0.5, max_tokens=3)
    payload = client.payload(QUESTION, settings)
    assert (payload["temperature"], payload["top_p"], payload["max_tokens"], payload["stream"]) == (
        0.0,
        0.5,
        3,
        True,
    )
    assert (payload["top_k"], payload["min_p"], payload["repeat_penalty"]) == (20, 0.0, 1.05)
    assert (payload["dry_multiplier"], payload["dry_base"], payload["dry_allowed_length"]) == (0.0, 1.75, 2)
    # -1 (the whole context, llama.cpp's default) is not sent: xllamacpp refuses it with HTTP 400.
    assert "dry_penalty_last_n" not in payload
    chunks = await _collect(
        client, [{"role": "user", "content": "Write a long story about a dragon."}], settings
    )
    assert chunks[-1].finish_reason == "length"
    assert chunks[-1].usage.completion_tokens == 3


async def test_each_answer_token_comes_with_its_log_probability_covering_the_text(llama_server):
    client = LLMClient(llama_server.base_url)
    settings = GenerationSettings(max_tokens=24)
    assert (
        client.payload(QUESTION, settings)["logprobs"],
        client.payload(QUESTION, settings)["top_logprobs"],
    ) == (True, 1)
    tokens = AnswerTokens()
    chunks = await _collect(
        client, [{"role": "user", "content": "Name three colours, in French with accents."}], settings
    )
    for chunk in chunks:
        tokens.feed(chunk)
    text = "".join(chunk.delta for chunk in chunks).encode("utf-8")
    spans = tokens.spans
    # A span per generated token (the end-of-turn token may have none), end to end over the
    # answer's UTF-8 bytes, each a log-probability (at most 0).
    assert chunks[-1].usage.completion_tokens - 1 <= len(spans) <= chunks[-1].usage.completion_tokens
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(spans, spans[1:], strict=False))
    assert all(logprob <= 0.0 for _, _, logprob in spans) and any(logprob < 0.0 for _, _, logprob in spans)
    # Turned off: nothing asked, nothing sent.
    off = replace(settings, logprobs=False)
    assert "logprobs" not in client.payload(QUESTION, off)
    assert all(not chunk.tokens for chunk in await _collect(client, QUESTION, off))


def test_answer_tokens_drop_what_a_rewind_takes_back_and_follow_the_continuation():
    tokens = AnswerTokens()
    tokens.feed(ChatChunk("ab", tokens=(TokenLogprob(1, -0.1), TokenLogprob(1, -0.2))))
    tokens.feed(ChatChunk("cdé", tokens=(TokenLogprob(2, -0.3), TokenLogprob(2, -0.4))))  # "é" is two bytes
    assert tokens.spans == [(0, 1, -0.1), (1, 2, -0.2), (2, 4, -0.3), (4, 6, -0.4)]
    tokens.feed(Rewind("abc"))  # kept mid-token: the token "cd" straddles the cut and goes
    assert tokens.spans == [(0, 1, -0.1), (1, 2, -0.2)]
    tokens.feed(ChatChunk("X", tokens=(TokenLogprob(1, -0.5),)))
    assert tokens.spans[-1] == (3, 4, -0.5)


async def test_a_trailing_assistant_message_asks_to_be_continued_where_the_server_can(llama_server):
    client = LLMClient(llama_server.base_url)
    messages = [{"role": "user", "content": "What is the capital of France?"},
                {"role": "assistant", "content": "The capital of France is"}]
    payload = client.payload(messages, GREEDY)
    assert (payload["continue_final_message"], payload["add_generation_prompt"]) == (True, False)
    assert "continue_final_message" not in client.payload(QUESTION, GREEDY)
    # The test model runs under llama.cpp's built-in Gemma template, which closes the model's turn
    # after its message: this server cannot continue an answer, and says so (Qwen's own template,
    # the chat model's, continues it: bench.answers).
    assert await client.continues_prefill() is False
    text, final = await client.complete(messages, GREEDY)
    assert final.finish_reason in {"stop", "length"}


async def test_the_server_counts_tokens_with_its_own_tokenizer(llama_server):
    client = LLMClient(llama_server.base_url)
    text = "The capital of France is Paris, and its river is the Seine."
    counted = await client.count_tokens(text)
    assert counted == ServerTokenCounter(llama_server.base_url).count_tokens(text)
    assert 5 < counted < len(text.split()) * 3
    assert await client.count_tokens("") == 0
    assert await LLMClient(f"http://127.0.0.1:{free_port()}", connect_timeout=1.0).count_tokens(text) is None


async def test_an_unreachable_server_cannot_continue_and_is_asked_again_later():
    client = LLMClient(f"http://127.0.0.1:{free_port()}", connect_timeout=1.0)
    assert await client.continues_prefill() is False
    assert client._continues_prefill is None  # no answer kept: the next call asks again


async def test_a_dry_window_is_sent_and_is_what_the_server_samples_with(llama_server):
    client = LLMClient(llama_server.base_url)
    settings = GenerationSettings(temperature=0.0, max_tokens=4, dry_multiplier=0.55, dry_allowed_length=4,
                                  dry_penalty_last_n=96)
    assert client.payload(QUESTION, settings)["dry_penalty_last_n"] == 96
    chunks = await _collect(client, QUESTION, settings)
    assert chunks[-1].finish_reason in {"stop", "length"}
    async with httpx.AsyncClient() as http:
        slots = (await http.get(f"{llama_server.base_url}/slots")).json()
    served = [
        slot["params"] for slot in slots if abs(slot.get("params", {}).get("dry_multiplier", 0) - 0.55) < 1e-6
    ]
    assert len(served) == 1
    assert (served[0]["dry_allowed_length"], served[0]["dry_penalty_last_n"]) == (4, 96)


async def test_an_answer_ends_where_it_would_write_a_memory_tag(llama_server):
    """A memory tag after some answer text means the model has begun copying its recollections:
    the answer ends there (greedy, so the same request straight to the server is seen to write it)."""
    client = LLMClient(llama_server.base_url)
    messages = [{"role": "user", "content": "Repeat after me: <memory> one two three </memory>"}]
    settings = GenerationSettings(temperature=0.0, top_p=1.0, max_tokens=48)
    async with httpx.AsyncClient(timeout=120) as http:
        response = await http.post(client.url, json={**client.payload(messages, settings), "stream": False})
    raw = response.json()["choices"][0]["message"]["content"]
    assert "<memory>" in raw and raw.index("<memory>") > 0
    chunks = await _collect(client, messages, settings)
    text = "".join(chunk.delta for chunk in chunks)
    assert text == raw[:raw.index("<memory>")] and text.strip()
    assert chunks[-1].finish_reason == "stop"


@pytest.mark.parametrize(("deltas", "shown", "cut"), [
    # After answer text, a tag ends the answer, even split across deltas; none of it is shown.
    (["Paris is the capital.", "\n</mem", "ory>\n<memory>\nMore"], "Paris is the capital.\n", True),
    (["It yields.", " <", "memory>"], "It yields. ", True),
    # A tag before any answer text is dropped, and the answer goes on.
    (["<mem", "ory>\nYield", " pauses.\n</memory>\nagain"], "\nYield pauses.\n", True),
    # A "<" that does not begin a tag is shown, once the next delta tells.
    (["a <", "b and x <mem"], "a <b and x <mem", False),
    (["1 < 2", " is true"], "1 < 2 is true", False),
])
def test_recitation_cut_on_split_deltas(deltas, shown, cut):
    recitation = RecitationCut()
    out = []
    for delta in deltas:
        out.append(recitation.feed(delta))
        if recitation.cut:
            break
    else:
        out.append(recitation.flush())
    assert "".join(out) == shown and recitation.cut is cut


def test_settings_from_config_and_validation():
    config = Config(temperature=0.2, top_p=0.8, max_new_tokens=77, top_k=40, min_p=0.05, repeat_penalty=1.1,
                    dry_multiplier=0.8, dry_base=2.0, dry_allowed_length=3, dry_penalty_last_n=128)
    assert GenerationSettings.from_config(config) == GenerationSettings(
        0.2, 0.8, 77, 40, 0.05, 1.1, 0.8, 2.0, 3, 128
    )
    # A conversation's own temperature wins over the config's; 0 (greedy) is a temperature too.
    assert GenerationSettings.from_config(config, temperature=0.0).temperature == 0.0
    assert GenerationSettings.from_config(config, temperature=None).temperature == 0.2
    with pytest.raises(ValueError, match="repeat_penalty"):
        GenerationSettings(repeat_penalty=0.5)
    with pytest.raises(ValueError, match="dry_multiplier"):
        GenerationSettings(dry_multiplier=-1.0)
    with pytest.raises(ValueError, match="dry_base"):
        GenerationSettings(dry_base=1.0)
    with pytest.raises(ValueError, match="dry_allowed_length"):
        GenerationSettings(dry_allowed_length=0)
    with pytest.raises(ValueError, match="dry_penalty_last_n"):
        GenerationSettings(dry_penalty_last_n=-2)
    with pytest.raises(ValueError, match="loop_retries"):
        Config(loop_retries=-1)


def test_loop_retry_settings_turn_dry_on_over_the_answers_recent_tokens():
    base = GenerationSettings(temperature=0.4, top_p=0.9, max_tokens=99)
    retry = loop_retry_settings(base)
    assert (retry.dry_multiplier, retry.dry_penalty_last_n) == (
        LOOP_RETRY_DRY_MULTIPLIER,
        LOOP_RETRY_DRY_LAST_N,
    )
    assert replace(retry, dry_multiplier=0.0, dry_penalty_last_n=-1) == base  # nothing else changes
    # A stronger DRY, or a window of the config's own, is kept.
    own = loop_retry_settings(GenerationSettings(dry_multiplier=1.5, dry_penalty_last_n=64))
    assert (own.dry_multiplier, own.dry_penalty_last_n) == (1.5, 64)
    with pytest.raises(ValueError, match="min_p"):
        GenerationSettings(min_p=1.0)
    with pytest.raises(ValueError, match="top_p"):
        GenerationSettings(top_p=0.0)
    with pytest.raises(ValueError, match="max_tokens"):
        GenerationSettings(max_tokens=0)
    with pytest.raises(ValueError, match="http"):
        LLMClient("localhost:8080")


async def test_closed_port_is_a_connection_error_naming_the_url():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(LLMConnectionError, match="127.0.0.1"):
        await _collect(LLMClient(url, connect_timeout=2), QUESTION)


async def test_http_error_carries_status_and_server_message(llama_server):
    client = LLMClient(llama_server.base_url)
    too_long = [{"role": "user", "content": "hello " * 9000}]
    with pytest.raises(LLMHTTPError, match="exceeds the available context size") as caught:
        await _collect(client, too_long)
    assert caught.value.status == 400


async def _silent_server(reply: bytes | None):
    """A TCP server that reads the request and then answers `reply` (or nothing, forever)."""
    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        if reply is None:
            await asyncio.sleep(3600)
        writer.write(reply)
        await writer.drain()
        writer.close()
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_stalled_server_is_a_timeout_error():
    server, url = await _silent_server(None)
    async with server:
        started = time.monotonic()
        with pytest.raises(LLMTimeoutError, match="timed out"):
            await _collect(LLMClient(url, timeout=0.5), QUESTION)
        assert time.monotonic() - started < 10


async def test_non_sse_stream_is_a_protocol_error():
    body = b"<html>proxy error</html>\n"
    reply = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    server, url = await _silent_server(reply)
    async with server:
        with pytest.raises(LLMProtocolError, match="non-SSE"):
            await _collect(LLMClient(url), QUESTION)


KEPT = [(TokenLogprob(3, -0.5), TokenLogprob(2, -1.0)), (TokenLogprob(6, -0.25),)]


@pytest.mark.parametrize(("second", "kept"), [
    ({"token": ", ", "logprob": -1}, KEPT),  # every byte of text with its token: all kept
    ({"token": ", ", "logprob": "high"}, [(), ()]),  # malformed
    (None, [(), ()]),  # missing: the text's bytes outrun the tokens'
])
async def test_tokens_are_kept_while_they_cover_the_text_and_none_after_a_bad_one(second, kept):
    entries = [{"token": "Red", "bytes": [82, 101, 100], "logprob": -0.5}] + ([second] if second else [])
    events = [{"choices": [{"delta": {"content": "Red, "}, "logprobs": {"content": entries}}]},
              {"choices": [{"delta": {"content": "green."}, "logprobs": {"content": [
                  {"token": "green.", "logprob": -0.25}]}, "finish_reason": "stop"}]}]
    body = "".join(f"data: {json.dumps(event)}\n\n" for event in events).encode() + b"data: [DONE]\n\n"
    server, url = await _silent_server(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                       b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    async with server:
        chunks = await _collect(LLMClient(url), QUESTION, replace(GREEDY, logprobs=True))
    # No error, the text whole, and no token placed where it may not belong ("green." after "Red").
    assert "".join(c.delta for c in chunks) == "Red, green."
    assert [c.tokens for c in chunks if c.delta] == kept


def _keep_alive_server(connections: list[int]):
    """An HTTP/1.1 server that answers every request on a connection until the client closes it
    (`/tokenize`: a token a word; `/apply-template`; chat: two deltas and a stop, as SSE), and
    counts in `connections` the connections it accepted. A fake: what is measured is how many
    connections the client opens, which the real server does not report."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                body = json.loads(await reader.readexactly(length))
                if b" /tokenize " in head:
                    kind, answer = (
                        b"application/json",
                        json.dumps({"tokens": [0] * len(body["content"].split())}),
                    )
                elif b" /apply-template " in head:
                    kind, answer = b"application/json", json.dumps({"prompt": "<start_of_turn>user\nHello."})
                else:
                    kind = b"text/event-stream"
                    answer = (
                        "".join(
                            f"data: {json.dumps(event)}\n\n"
                            for event in (
                                {"choices": [{"delta": {"content": "Red, "}}]},
                                {"choices": [{"delta": {"content": "green."}, "finish_reason": "stop"}]},
                            )
                        )
                        + "data: [DONE]\n\n"
                    )
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
                             % (kind, len(answer.encode()), answer.encode()))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionResetError):
            pass
        finally:
            writer.close()
    return handle


@contextlib.contextmanager
def _threaded_keep_alive_server(connections: list[int], server_factory=_keep_alive_server) -> Iterator[str]:  # noqa: ANN001
    """`_keep_alive_server` (or another fake, `server_factory`) on an event loop of its own thread, for
    clients on other threads; its URL."""
    ready, state = threading.Event(), {}

    async def serve() -> None:
        server = await asyncio.start_server(server_factory(connections), "127.0.0.1", 0)
        state["url"], state["stop"] = (
            f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}",
            asyncio.Event(),
        )
        state["loop"] = asyncio.get_running_loop()
        ready.set()
        async with server:
            await state["stop"].wait()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield state["url"]
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(10)


async def test_requests_on_one_event_loop_share_one_kept_connection():
    """One pooled client per event loop, not one per call: a count, the prefill probe and two
    answers in a row go over one connection."""
    connections: list[int] = []
    server = await asyncio.start_server(_keep_alive_server(connections), "127.0.0.1", 0)
    client = LLMClient(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    async with server:
        assert await client.count_tokens("three words here") == 3
        assert await client.continues_prefill() is False
        for _ in range(2):
            assert "".join(chunk.delta for chunk in await _collect(client, QUESTION)) == "Red, green."
    assert len(connections) == 1


def _closing_server(connections: list[int]):
    """A fake: it answers one request a connection (a chat answer, or a count on /tokenize) and
    closes the connection when the next request arrives, without answering, as a server closing an
    idle connection does when a request crosses its close (a race a real server cannot be made to
    lose on demand). Counts in `connections` the connections it accepted."""
    answer = (
        "".join(
            f"data: {json.dumps(event)}\n\n"
            for event in (
                {"choices": [{"delta": {"content": "Red, "}}]},
                {"choices": [{"delta": {"content": "green."}, "finish_reason": "stop"}]},
            )
        ).encode()
        + b"data: [DONE]\n\n"
    )

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        answered = False
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                body = await reader.readexactly(length)
                if answered:
                    break
                kind, reply = b"text/event-stream", answer
                if b" /tokenize " in head:
                    kind, reply = (
                        b"application/json",
                        json.dumps({"tokens": [0] * len(json.loads(body)["content"].split())}).encode(),
                    )
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
                             % (kind, len(reply), reply))
                await writer.drain()
                answered = True
        except (asyncio.IncompleteReadError, ConnectionResetError):
            pass
        finally:
            writer.close()
    return handle


async def test_a_kept_connection_the_server_closes_as_a_request_goes_out_is_tried_again_on_a_new_one():
    """Every request to the server is sent again (`_closing_server`), not the chat's alone."""
    connections: list[int] = []
    server = await asyncio.start_server(_closing_server(connections), "127.0.0.1", 0)
    client = LLMClient(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    async with server:
        for _ in range(2):
            assert await client.count_tokens("three words here") == 3
            assert "".join(chunk.delta for chunk in await _collect(client, QUESTION)) == "Red, green."
    # Every request after the first met a closed connection and went again on a new one.
    assert len(connections) == 4


def test_the_token_counter_sends_a_count_again_when_its_kept_connection_was_closed():
    """The synchronous counter too (`_closing_server`): a count is the server's, not the UTF-8
    estimate it falls back to when the server cannot count (four words would read 9)."""
    connections: list[int] = []
    with _threaded_keep_alive_server(connections, _closing_server) as url:
        counter = ServerTokenCounter(url)
        counts = [
            counter.count_tokens(text) for text in ("one", "one two", "one two three", "four words in here")
        ]
    assert counts == [1, 2, 3, 4]
    assert len(connections) == 4


def test_a_client_shared_by_threads_keeps_a_pool_per_event_loop():
    """Threads, each running event loops of its own one after the other, share one client: every
    answer arrives, each loop opens its own connection (one belongs to the loop that opened it)
    and reuses it, and a closed loop's pool does not break the next loop's requests."""
    connections: list[int] = []

    async def three_answers() -> list[str]:
        return ["".join(chunk.delta for chunk in await _collect(client, QUESTION)) for _ in range(3)]

    def two_loops(_: int) -> list[str]:
        return asyncio.run(three_answers()) + asyncio.run(three_answers())

    with _threaded_keep_alive_server(connections) as url, ThreadPoolExecutor(4) as pool:
        client = LLMClient(url)
        answers = [answer for answers in pool.map(two_loops, range(4)) for answer in answers]
    assert answers == ["Red, green."] * 24
    assert len(connections) == 8  # one per event loop, each used for its three answers


def test_the_token_counter_reuses_one_connection_from_many_threads():
    connections: list[int] = []
    texts = [" ".join(WORDS[:n]) for n in range(1, len(WORDS) + 1)]
    with _threaded_keep_alive_server(connections) as url:
        counter = ServerTokenCounter(url)
        for text in texts[:3]:  # one after the other: one connection
            counter.count_tokens(text)
        assert len(connections) == 1
        with ThreadPoolExecutor(4) as pool:  # at once: at most a connection per thread
            counts = list(pool.map(counter.count_tokens, texts))
    assert counts == list(range(1, len(WORDS) + 1))
    assert len(connections) <= 4


STOP_SECONDS = 3.0


async def _processing_slots(base_url: str) -> int:
    async with httpx.AsyncClient() as http:
        return sum(slot["is_processing"] for slot in (await http.get(f"{base_url}/slots")).json())


async def _generation_stops(base_url: str) -> None:
    """llama.cpp stops generating for a closed stream within STOP_SECONDS. The bound is the check:
    the answer asked for takes tens of seconds, so a server that kept generating would still be busy."""
    async def idle() -> bool:
        return await _processing_slots(base_url) == 0

    await wait_until_async(idle, what="llama.cpp stopping the closed stream", timeout=STOP_SECONDS, every=0.1)


async def test_closing_the_stream_stops_generation_on_the_server(llama_server):
    client = LLMClient(llama_server.base_url)
    long_run = GenerationSettings(temperature=0.0, top_p=1.0, max_tokens=2000)
    stream = client.stream_chat(
        [{"role": "user", "content": "Write a very long story about a dragon."}], long_run
    )
    received = []
    async for chunk in stream:
        received.append(chunk.delta)
        if len(received) == 3:
            break
    await stream.aclose()
    # 2000 tokens take tens of seconds here; a server that kept generating would still be busy.
    await _generation_stops(llama_server.base_url)
    # The pool dropped that connection rather than keeping it half-read: the next answer comes whole.
    assert (await _collect(client, QUESTION))[-1].finish_reason in ("stop", "length")


async def test_cancelling_the_task_stops_generation_on_the_server(llama_server):
    client = LLMClient(llama_server.base_url)
    long_run = GenerationSettings(temperature=0.0, top_p=1.0, max_tokens=2000)
    first = asyncio.Event()

    async def consume():
        async for _ in client.stream_chat([{"role": "user", "content": "Tell a very long tale."}], long_run):
            first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 60)
    assert await _processing_slots(llama_server.base_url) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _generation_stops(llama_server.base_url)


# ---------------------------------------------------------------- prompt assembly


def _history(rng: random.Random, turns: int) -> list[tuple[str, str]]:
    history = []
    for number in range(turns):
        role = "user" if number % 2 == 0 else "assistant"
        history.append((role, " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 60)))))
    return history


def _reference_start(history, costs, room):
    """Smallest start whose suffix fits `room` and begins with a user turn (or is empty)."""
    for start in range(len(history) + 1):
        if sum(costs[start:]) <= room and (start == len(history) or history[start][0] == "user"):
            return start
    raise AssertionError("the empty history always fits")


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("context_size", [300, 700, 4096])
def test_history_truncation_matches_reference_and_budget(tokenizer, seed, context_size):
    rng = random.Random(seed)
    history = _history(rng, rng.randint(0, 24))
    system = Config().system_prompt
    memories = ["a granite lantern", "the quiet river"]
    budget = ContextBudget(context_size=context_size, generation=64)
    plan = assemble_prompt(
        system_prompt=system,
        history=history,
        user_message="and the orbit?",
        memories=memories,
        tokenizer=tokenizer,
        budget=budget,
    )
    turn = user_turn_with_memories("and the orbit?", memories)
    costs = [tokenizer.count_tokens(text) + MESSAGE_TOKENS for _, text in history]
    system_tokens = tokenizer.count_tokens(system) + MESSAGE_TOKENS
    user_tokens = tokenizer.count_tokens(turn) + MESSAGE_TOKENS
    room = context_size - 64 - TEMPLATE_TOKENS - system_tokens - user_tokens
    start = _reference_start(history, costs, room)
    assert plan.dropped_messages == start
    # The system message is the fixed instruction (cacheable across turns); the memories ride with
    # the new turn only, and past turns are their bare text.
    assert plan.messages[0] == {"role": "system", "content": system}
    assert plan.messages[1:-1] == [{"role": r, "content": t} for r, t in history[start:]]
    assert plan.messages[-1] == {"role": "user", "content": turn}
    assert (plan.system_tokens, plan.user_tokens, plan.history_tokens) == (
        system_tokens,
        user_tokens,
        sum(costs[start:]),
    )
    assert plan.prompt_tokens + budget.generation <= context_size


def test_oldest_messages_go_first(tokenizer):
    history = [("user", "first question"), ("assistant", "first answer"),
               ("user", "second question"), ("assistant", "second answer " * 5)]
    costs = [tokenizer.count_tokens(t) + MESSAGE_TOKENS for _, t in history]
    user = tokenizer.count_tokens("third") + MESSAGE_TOKENS
    # Room for exactly the last exchange: the first exchange is dropped, never the last.
    context = TEMPLATE_TOKENS + user + costs[2] + costs[3] + 10
    plan = assemble_prompt(system_prompt="", history=history, user_message="third", tokenizer=tokenizer,
                           budget=ContextBudget(context_size=context, generation=10))
    assert [m["content"] for m in plan.messages] == ["second question", "second answer " * 5, "third"]
    # One token less: the last exchange no longer fits whole; its answer alone would start with
    # the model's turn, so it goes too.
    plan = assemble_prompt(system_prompt="", history=history, user_message="third", tokenizer=tokenizer,
                           budget=ContextBudget(context_size=context - 1, generation=10))
    assert [m["content"] for m in plan.messages] == ["third"]
    assert plan.dropped_messages == 4


def test_prompt_too_long_and_bad_roles(tokenizer):
    with pytest.raises(PromptTooLongError, match="exceed the prompt budget of 36 tokens"):
        assemble_prompt(system_prompt="", history=[], user_message="word " * 100, tokenizer=tokenizer,
                        budget=ContextBudget(context_size=100, generation=64))
    with pytest.raises(ValueError, match=r"history\[1\]: role"):
        assemble_prompt(system_prompt="", history=[("user", "a"), ("system", "b")], user_message="c",
                        tokenizer=tokenizer, budget=ContextBudget(context_size=100, generation=10))
    with pytest.raises(ValueError, match="no room"):
        ContextBudget(context_size=64, generation=64)


@pytest.mark.parametrize("count", [1, 3, 8])
def test_search_budget_leaves_room_for_system_turn_and_tags(tokenizer, count):
    system = Config().system_prompt
    budget = ContextBudget(context_size=768, generation=128)
    cap = budget.search_budget(system_prompt=system, user_message="hello there", tokenizer=tokenizer,
                               requested=10_000, memory_count=count)
    assert 0 < cap < 768 - 128
    assert budget.search_budget(system_prompt=system, user_message="hello there", tokenizer=tokenizer,
                                requested=50) == 50
    # `count` memories filling the cap together still fit with the new turn (history may be empty).
    ids = tokenizer.tokenize(" ".join(["river"] * 800))
    share = cap // count
    memories = [tokenizer.detokenize(ids[:share]) for _ in range(count)]
    assert sum(tokenizer.count_tokens(m) for m in memories) <= cap + count
    plan = assemble_prompt(system_prompt=system, history=[], user_message="hello there", memories=memories,
                           tokenizer=tokenizer, budget=budget)
    assert plan.prompt_tokens <= budget.prompt and plan.memories_used == count


def test_memories_that_do_not_fit_are_left_out_last_first(tokenizer):
    budget = ContextBudget(context_size=160, generation=32)
    memories = ["river " * 40, "lantern " * 40, "orbit " * 40]
    plan = assemble_prompt(system_prompt="Be brief.", history=[("user", "hi"), ("assistant", "hello")],
                           user_message="and now?", memories=memories, tokenizer=tokenizer, budget=budget)
    assert plan.memories_used == 2
    assert plan.messages[-1]["content"] == user_turn_with_memories("and now?", memories[:2])
    assert plan.prompt_tokens <= budget.prompt
    with pytest.raises(PromptTooLongError):
        assemble_prompt(system_prompt="Be brief.", history=[], user_message="word " * 200, memories=memories,
                        tokenizer=tokenizer, budget=budget)


def test_user_turn_wraps_each_memory_before_the_question():
    assert user_turn_with_memories("Why?", []) == "Why?"
    assert user_turn_with_memories("Why?", ["  ", ""]) == "Why?"
    turn = user_turn_with_memories("Why?", ["one ", "", "two"])
    # The best memory ("one") is written last, next to the question; the question comes last, so
    # the model answers it rather than continuing a memory.
    assert turn == "<memory>\ntwo\n</memory>\n<memory>\none\n</memory>\n\nWhy?"
    assert turn.endswith("\n\nWhy?") and turn.count("<memory>") == turn.count("</memory>") == 2


def test_system_prompt_says_how_to_use_memories_and_not_to_recite_them():
    system = Config().system_prompt.lower()
    assert "<memory>" in system and "never mention" in system and "do not copy" in system


async def test_server_token_counter_counts_in_the_served_models_tokens(llama_server, tokenizer):
    counter = ServerTokenCounter(llama_server.base_url)
    text = "The lantern by the granite harbor glows at night."
    # The session's server serves Gemma, whose in-process tokenizer gives llama.cpp's own ids.
    assert counter.count_tokens(text) == tokenizer.count_tokens(text)
    # A server that cannot count gives an upper bound (UTF-8 length / 2), never an error.
    dead = ServerTokenCounter(f"http://127.0.0.1:{free_port()}", timeout=1.0)
    assert dead.count_tokens(text) == (len(text.encode()) + 1) // 2 >= tokenizer.count_tokens(text)


async def test_estimate_bounds_the_servers_prompt_tokens(llama_server, tokenizer):
    rng = random.Random(7)
    budget = ContextBudget(context_size=600, generation=1)
    plan = assemble_prompt(
        system_prompt=Config().system_prompt,
        history=_history(rng, 30),
        user_message="What about the river?",
        tokenizer=tokenizer,
        budget=budget,
        memories=["The lantern by the granite harbor.", "Signals cross the quiet meadow at night."],
    )
    assert plan.dropped_messages > 0
    _, final = await LLMClient(llama_server.base_url).complete(plan.messages, GenerationSettings(0.0, 1.0, 1))
    actual = final.usage.prompt_tokens
    assert actual <= plan.prompt_tokens <= budget.prompt
    # An upper bound, but a tight one: a few tokens per message at most.
    assert plan.prompt_tokens - actual <= 2 * len(plan.messages) + TEMPLATE_TOKENS


def test_sampling_defaults_are_declared_once():
    # The generation settings' defaults are the engine config's, never a second copy of them.
    assert GenerationSettings() == GenerationSettings.from_config(Config())


async def test_a_stream_line_ends_only_where_the_event_format_ends_lines():
    """A token with a line separator or NEL inside arrives raw in its JSON string (JSON escapes only
    what is under U+0020); httpx's aiter_lines, like str.splitlines, cut such a line in two, and the
    turn failed with "invalid JSON in the stream". Pieces as a response gives them, CRLF split across two."""
    delta = "one\u2028two\u2029three\x85four"
    event = json.dumps({"choices": [{"index": 0, "delta": {"content": delta}}]}, ensure_ascii=False)

    async def pieces():  # noqa: ANN202 - an async iterator of str
        for piece in (f"data: {event[:20]}", f"{event[20:]}\r", "\n\r\ndata: [DONE]\n\n"):
            yield piece

    lines = [line async for line in sse_lines(pieces())]
    assert lines == [f"data: {event}", "", "", "data: [DONE]", ""]
    stream = CompletionStream(shown_url="http://llm", logprobs=False, scrub=lambda text: text)
    read = [chunk.delta for line in lines for chunk in stream.read(line)]
    assert "".join(read) + "".join(c.delta for c in stream.end()) == delta
    assert len(delta.splitlines()) == 4  # what the old reader would have cut it into
