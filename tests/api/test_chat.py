"""Conversations over HTTP and the OpenAI-compatible chat, against the real ASGI app on loopback,
the real llama.cpp server (Gemma 3 270M) and a real corpus (Python's docs, built once)."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest
from channels.db import database_sync_to_async

from accounts.services.tokens import api_token_create
from chat.llm import clients
from chat.models import Message
from core import runtime
from engine.config import Config
from tests.plugins.api import error_of, token_client
from tests.plugins.chat import make_corpus
from tests.plugins.looping_llm import COMPLETION_TOKENS, CONTINUATION, KEPT, PROMPT_TOKENS, looping_llm

QUESTION = "How does a generator function pause at yield and resume where it left off?"


@pytest.fixture
def secret(owner) -> str:
    return api_token_create(user=owner, name="chat tests")[1]


def _headers(secret: str) -> dict:
    return {"Authorization": f"Bearer {secret}"}


def _sse(text: str) -> list[tuple[str | None, str]]:
    """(event, data) of each SSE frame."""
    frames = []
    for block in text.strip().split("\n\n"):
        event, data = None, []
        for line in block.split("\n"):  # the portal ends lines with LF; splitlines would cut at U+2028
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
        frames.append((event, "\n".join(data)))
    return frames


def test_conversation_turn_whole_then_streamed_then_exported(
    chat_settings, live_api, owner, secret, pydoc_build
):
    corpus = make_corpus(owner, pydoc_build)
    base = f"{live_api.url}/api/v1"
    with httpx.Client(headers=_headers(secret), timeout=120) as http:
        created = http.post(f"{base}/conversations/", json={"corpora": [corpus.pk], "token_budget": 400})
        assert created.status_code == 201, created.text
        conversation = created.json()["id"]
        whole = http.post(f"{base}/conversations/{conversation}/messages/", json={"content": QUESTION})
        assert whole.status_code == 201, whole.text
        turn = whole.json()
        assert turn["status"] == "complete" and turn["message"]["content"].strip()
        assert turn["message"]["memories"], "the question is about the corpus: memories must prime the answer"
        assert turn["user_message"]["content"] == QUESTION
        with http.stream("POST", f"{base}/conversations/{conversation}/messages/",
                         json={"content": "And what does send() do?", "stream": True}) as streamed:
            assert streamed.status_code == 200
            assert streamed.headers["content-type"].startswith("text/event-stream")
            frames = _sse(streamed.read().decode())
        events = [event for event, _ in frames]
        assert events[:2] == ["chat.accepted", "chat.memories"] and events[-1] == "chat.done"
        assert events.count("chat.delta") >= 2
        done = json.loads(frames[-1][1])
        text = "".join(json.loads(data)["delta"] for event, data in frames if event == "chat.delta")
        assert done["message"]["content"] == text and done["blend_turns"] == 2
        listed = http.get(f"{base}/conversations/{conversation}/messages/").json()
        assert [m["role"] for m in listed["results"]] == ["user", "assistant", "user", "assistant"]
        exported = http.get(f"{base}/conversations/{conversation}/export/", params={"format": "jsonl"})
        record = json.loads(exported.text)
        assert [turn["from"] for turn in record["conversations"]] == ["human", "gpt", "human", "gpt"]
        markdown = http.get(f"{base}/conversations/{conversation}/export/", params={"format": "md"})
        assert markdown.headers["content-type"].startswith("text/markdown") and QUESTION in markdown.text
        assert http.delete(f"{base}/conversations/{conversation}/").status_code == 204
        assert http.get(f"{base}/conversations/{conversation}/").status_code == 404


def test_llm_down_is_503_and_the_user_turn_is_kept(chat_settings, transactional_db, owner):
    # transactional: a turn's SQL runs through database_sync_to_async, which closes a connection
    # that sits in a test's transaction.
    chat_settings.LLM_BASE_URL = "http://127.0.0.1:9"  # nothing listens there: a real refused connection
    client = token_client(owner)
    conversation = client.post("/api/v1/conversations/", {}, format="json").json()["id"]
    response = client.post(
        f"/api/v1/conversations/{conversation}/messages/", {"content": "hello"}, format="json"
    )
    assert response.status_code == 503 and error_of(response)["code"] == "llm_unreachable"
    assert list(Message.objects.filter(conversation_id=conversation).values_list("role", "status")) == [
        ("user", "complete"), ("assistant", "error")]
    completion = client.post(
        "/api/v1/chat/completions",
        {"model": "none", "messages": [{"role": "user", "content": "hi"}]},
        format="json",
    )
    assert completion.status_code == 503 and error_of(completion)["code"] == "llm_unavailable"


def test_openai_client_lists_models_and_streams_a_primed_completion(chat_settings, live_api, owner, outsider,
                                                                    secret, pydoc_build):
    corpus = make_corpus(owner, pydoc_build)
    client = openai.OpenAI(base_url=f"{live_api.url}/api/v1", api_key=secret, max_retries=0, timeout=120)
    # Each bare (the default LLM model) and paired with each LLM model the user may use: here the one.
    model = chat_settings.LLM_MODEL
    assert [m.id for m in client.models.list()] == ["none", f"none@{model}", f"corpus-{corpus.pk}",
                                                    f"corpus-{corpus.pk}@{model}"]
    outsider_client = openai.OpenAI(base_url=f"{live_api.url}/api/v1", max_retries=0,
                                    api_key=api_token_create(user=outsider, name="t")[1])
    assert [m.id for m in outsider_client.models.list()] == ["none", f"none@{model}"]
    with pytest.raises(openai.NotFoundError):
        outsider_client.chat.completions.create(model=f"corpus-{corpus.pk}",
                                                messages=[{"role": "user", "content": QUESTION}])

    stream = client.chat.completions.create(
        model=f"corpus-{corpus.pk}", stream=True, temperature=0, max_tokens=30,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "What is a generator?"},
                  {"role": "assistant", "content": "A function that yields values lazily."},
                  {"role": "user", "content": QUESTION}])
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip() and len([c for c in chunks if c.choices and c.choices[0].delta.content]) >= 2
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")
    assert chunks[-1].usage is not None and 0 < chunks[-1].usage.completion_tokens <= 30

    whole = client.chat.completions.create(model="none", temperature=0, max_tokens=20,
                                           messages=[{"role": "system", "content": "Answer in one word."},
                                                     {"role": "user", "content": "Name a colour."}])
    assert whole.choices[0].message.content.strip() and whole.usage.completion_tokens <= 20


def test_completion_is_primed_by_the_corpus_and_the_blend(chat_settings, owner, pydoc_build):
    """The same retrieval as the chat: the corpus's memories, steered by the assistant turns."""
    from chat.completions import completion_prepare

    corpus = make_corpus(owner, pydoc_build)
    plain = completion_prepare(user=owner, corpus=None, messages=[{"role": "user", "content": QUESTION}])
    primed = completion_prepare(user=owner, corpus=corpus,
                                messages=[{"role": "user", "content": QUESTION}])
    assert not plain.memories and primed.memories
    assert primed.memories[0].memory.text[:80] in primed.plan.messages[-1]["content"]
    assert primed.plan.messages[-1]["content"].endswith(QUESTION)
    blended = completion_prepare(
        user=owner,
        corpus=corpus,
        messages=[
            {"role": "user", "content": "Tell me about sockets."},
            {
                "role": "assistant",
                "content": "Sockets connect processes over a network with send and recv calls.",
            },
            {"role": "user", "content": QUESTION},
        ],
    )
    assert [m.memory.memory_id for m in blended.memories] != [m.memory.memory_id for m in primed.memories]


@pytest.mark.parametrize(("body", "status"), [
    ({"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]}, 404),
    ({"model": "none", "messages": [{"role": "tool", "content": "hi"}]}, 400),
    ({"model": "none", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400),
    ({"model": "none", "messages": [{"role": "user", "content": "hi"}], "temperature": 9}, 400),
    ({"model": "none"}, 400),
])
def test_bad_completion_requests_are_4xx(chat_settings, owner, body, status):
    response = token_client(owner).post("/api/v1/chat/completions", body, format="json")
    assert response.status_code == status, response.content
    error_of(response)


async def _complete_withlooping_llm(
    chat_settings,
    url: str,
    secret: str,
    *,
    looping: int,  # noqa: ANN001
    stream: bool = False,
    tokenize: bool = False,
) -> tuple[httpx.Response, list[dict]]:
    """One completion against the chat suite's fake LLM whose first `looping` answers loop (a real
    model cannot be made to loop on demand)."""
    requests: list[dict] = []
    server = await asyncio.start_server(
        looping_llm(requests, looping=looping, tokenize=tokenize), "127.0.0.1", 0
    )
    runtime.reset()  # the kept client of a server once on this port may have learnt another answer
    chat_settings.LLM_BASE_URL = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    body = {"model": "none", "messages": [{"role": "user", "content": QUESTION}], "stream": stream}
    async with server, httpx.AsyncClient(timeout=60, headers=_headers(secret)) as http:
        response = await http.post(f"{url}/api/v1/chat/completions", json=body)
    return response, requests


async def test_a_whole_completion_that_loops_is_continued_from_the_cut(chat_settings, live_api, secret):
    """A whole reply has sent nothing yet: like the portal's chat, it takes the echo back and has the
    kept text continued (an assistant prefill, DRY over the answer's recent tokens)."""
    response, requests = await _complete_withlooping_llm(
        chat_settings, live_api.url, secret, looping=1, tokenize=True
    )
    choice = response.json()["choices"][0]
    assert (choice["finish_reason"], choice["message"]["content"]) == ("stop", KEPT + CONTINUATION)
    kept = len(KEPT.split())  # the fake's tokenizer: a word a token
    assert response.json()["usage"] == {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": COMPLETION_TOKENS + kept,
        "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS + kept,
    }
    assert len(requests) == 2
    assert requests[1]["messages"] == [*requests[0]["messages"], {"role": "assistant", "content": KEPT}]
    assert requests[1]["continue_final_message"] is True and "continue_final_message" not in requests[0]
    assert (requests[1]["dry_multiplier"], requests[1]["dry_penalty_last_n"]) == (0.8, 128)


async def test_a_completion_that_loops_again_is_cut_whole_and_streamed(chat_settings, live_api, secret):
    """One that loops again after its continuations ends at the cut and says "length" (cut short by
    the server); a stream, which cannot take back what it sent, is cut at once."""
    whole, requests = await _complete_withlooping_llm(chat_settings, live_api.url, secret, looping=10)
    assert whole.json()["choices"][0]["finish_reason"] == "length"
    assert whole.json()["choices"][0]["message"]["content"] == KEPT
    assert len(requests) == 1 + Config().loop_retries
    streamed, requests = await _complete_withlooping_llm(
        chat_settings, live_api.url, secret, looping=10, stream=True
    )
    assert len(requests) == 1  # no continuation of a stream
    chunks = [json.loads(data) for _, data in _sse(streamed.text) if data != "[DONE]"]
    deltas = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    assert 2 <= sum(bool(d) for d in deltas) < 30  # stopped within a few repeats, not after 400
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"


def test_a_full_llm_queue_is_429_with_retry_after_and_nothing_is_stored(
    chat_settings, live_api, owner, secret
):
    """Past the caps of the queue into the LLM (chat.llm.queue) both chat APIs refuse at once:
    429 with Retry-After (the official client raises RateLimitError), nothing stored; once a place
    is free the same request is answered."""
    chat_settings.LLM_STREAMS, chat_settings.LLM_QUEUE_LIMIT = 1, 1
    queue = clients.llm_queue()
    running, waiting = queue.enter("someone"), queue.enter("someone else")  # real places, held by this test
    client = openai.OpenAI(base_url=f"{live_api.url}/api/v1", api_key=secret, max_retries=0, timeout=120)
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(
            model="none", max_tokens=5, messages=[{"role": "user", "content": "Hi."}]
        )
    assert refused.value.response.status_code == 429
    assert int(refused.value.response.headers["Retry-After"]) >= 1
    assert refused.value.body["code"] == "llm_busy"
    with httpx.Client(headers=_headers(secret), timeout=120) as http:
        conversation = http.post(f"{live_api.url}/api/v1/conversations/", json={}).json()["id"]
        for stream in (False, True):
            busy = http.post(f"{live_api.url}/api/v1/conversations/{conversation}/messages/",
                             json={"content": "Hello?", "stream": stream})
            assert busy.status_code == 429 and "Retry-After" in busy.headers
            assert busy.json()["error"]["code"] == "llm_busy"
        assert not Message.objects.filter(conversation_id=conversation).exists()
        assert queue.snapshot()["waiting"] == 1  # the refused requests took no place
        running.close()
        waiting.close()
        answered = http.post(f"{live_api.url}/api/v1/conversations/{conversation}/messages/",
                             json={"content": "Hello?", "stream": True})
        assert answered.status_code == 200 and "chat.done" in answered.text
    whole = client.chat.completions.create(
        model="none", max_tokens=5, messages=[{"role": "user", "content": "Hi."}]
    )
    assert whole.choices[0].finish_reason in ("stop", "length")
    assert queue.snapshot() == {"waiting": 0, "prefilling": 0, "streaming": 0}


def _memory_text(memory_id: int) -> str:
    from corpus.models import Memory

    return Memory.objects.get(pk=memory_id).text


def _memory_dataset(memory_id: int) -> tuple[int, str]:
    from corpus.models import Memory

    memory = Memory.objects.select_related("dataset").get(pk=memory_id)
    return memory.dataset_id, memory.dataset.name


async def test_the_chat_and_the_openai_endpoint_send_llama_cpp_the_same_request(
    chat_settings, live_api, owner, secret, pydoc_build
):
    """One turn preparation (`chat.preparation.turn_prepare`): a conversation's turn, and a completion
    given the same history and the conversation's settings, reach the LLM as the same request (the
    same blend, `top_document` and `compress_context` applied, the same memory budget). The fake LLM
    only records what it is sent."""
    from engine.bits import compress_context

    corpus = await database_sync_to_async(make_corpus)(owner, pydoc_build)
    requests: list[dict] = []
    server = await asyncio.start_server(looping_llm(requests, looping=0), "127.0.0.1", 0)
    runtime.reset()
    chat_settings.LLM_BASE_URL = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    conversation_settings = {"top_document": True, "compress_context": True, "token_budget": 300}
    async with server, httpx.AsyncClient(base_url=f"{live_api.url}/api/v1", headers=_headers(secret),
                                         timeout=120) as http:
        created = await http.post("/conversations/", json={"corpora": [corpus.pk], **conversation_settings})
        conversation = created.json()["id"]
        for question in ("How do sockets send and receive data?", QUESTION):
            turn = await http.post(f"/conversations/{conversation}/messages/", json={"content": question})
            assert turn.status_code == 201, turn.text
        listed = (await http.get(f"/conversations/{conversation}/messages/")).json()["results"]
        history = [{"role": message["role"], "content": message["content"]} for message in listed[:-1]]
        completion = await http.post(
            "/chat/completions",
            json={"model": f"corpus-{corpus.pk}", "messages": history, **conversation_settings},
        )
        assert completion.status_code == 200, completion.text
    assert len(requests) == 3
    chat_request, completion_request = requests[1], requests[2]
    assert completion_request == chat_request
    # The conversation's settings are what made it: one memory (top_document), compressed.
    primed = listed[-1]["memories"]
    assert len(primed) == 1 and completion.json()["memories"][0]["id"] == primed[0]["memory_id"]
    # A completion's memory is a search result's: its corpus and dataset by id, their names beside them.
    memory = completion.json()["memories"][0]
    assert (
        (memory["corpus"], memory["corpus_name"])
        == (corpus.pk, corpus.name)
        == (corpus.pk, primed[0]["corpus"])
    )
    dataset = await database_sync_to_async(_memory_dataset)(primed[0]["memory_id"])
    assert (memory["dataset"], memory["dataset_name"]) == dataset
    prompt = chat_request["messages"][-1]["content"]
    assert prompt.count("<memory>") == 1 and prompt.endswith(QUESTION)
    text = await database_sync_to_async(_memory_text)(primed[0]["memory_id"])
    assert compress_context(text) in prompt and compress_context(text) != text
