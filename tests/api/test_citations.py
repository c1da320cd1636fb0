"""Citations and grounding (issue 29) through both chat APIs, the streamed turn's `chat.done` (the
websocket's event) and the exports, with a real corpus and a fake LLM whose answer is known: one
sentence copied from the best primed memory, one made up. A real model cannot be made to say a
chosen sentence, and the point is what the portal does with each kind."""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
from collections.abc import Iterator

import httpx
import openai
import pytest

from accounts.services.tokens import api_token_create
from chat.citations import cited_markdown
from chat.models import Message
from core import runtime
from tests.plugins.chat import make_corpus

QUESTION = "How does a generator function pause at yield and resume where it left off?"
MADE_UP = "Bananas orbit the purple moon every Tuesday afternoon."
COPIED_WORDS = 14
# Each answer token's probability, sent when the request asks for log-probabilities (as llama.cpp does).
TOKEN_PROBABILITY = 0.9


def _answer(prompt: str) -> str:
    """The best memory's first words (it is written last, before the question), then MADE_UP."""
    memories = re.findall(r"<memory>(.*?)</memory>", prompt, re.S)
    copied = " ".join(re.sub(r"[^\w\s]", " ", memories[-1]).split()[:COPIED_WORDS]) if memories else "Nothing"
    return f"{copied}.\n\n{MADE_UP}"


def _fake_llm(requests: list[dict]):  # noqa: ANN202 - an asyncio server callback
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request_line = await reader.readline()
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        body = await reader.readexactly(length)
        if b" /v1/chat/completions " not in request_line:
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            writer.close()
            return
        requests.append(json.loads(body))
        text = _answer(requests[-1]["messages"][-1]["content"])
        logprobs = requests[-1].get("logprobs")
        events = [{"choices": [{"delta": {"content": piece}, "finish_reason": None,
                                **({"logprobs": {"content": [{"token": piece, "bytes": list(piece.encode()),
                                                              "logprob": math.log(TOKEN_PROBABILITY)}]}}
                                   if logprobs else {})}]}
                  for piece in re.findall(r"\S+\s*", text)]
        events.append({"choices": [{"delta": {}, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 50, "completion_tokens": len(events)}})
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
        for event in events:
            writer.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        writer.write(b"data: [DONE]\n\n")
        await writer.drain()
        writer.close()

    return serve


@pytest.fixture
def fake_llm(chat_settings) -> Iterator[list[dict]]:
    """The fake on its own event loop in a thread (the live API and the test are synchronous)."""
    requests: list[dict] = []
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(asyncio.start_server(_fake_llm(requests), "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runtime.reset()  # the kept client of a server once on this port may have learnt another answer
    chat_settings.LLM_BASE_URL = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    yield requests
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    server.close()
    loop.close()


def _check(hdrag: dict, answer: str) -> None:
    """One copied sentence cites the best memory (rank 0); the made-up one is an unsupported claim."""
    citations = hdrag["citations"]
    assert [c["text"] for c in citations][-1] == MADE_UP
    assert all(c["text"] in answer for c in citations)
    copied = [c for c in citations[:-1] if c["claim"]]
    assert copied and all(c["memories"][:1] == [0] for c in copied)
    assert citations[-1]["claim"] and citations[-1]["memories"] == []
    assert len(citations[-1]["scores"]) >= 1 and max(citations[-1]["scores"]) < 0.5
    # Every claim's certainty is its tokens' probability; a supported one counts by it.
    assert all(
        c["certainty"] == pytest.approx(TOKEN_PROBABILITY) and not c["unsure"]
        for c in citations
        if c["claim"]
    )
    assert hdrag["grounding"] == pytest.approx(TOKEN_PROBABILITY * len(copied) / (len(copied) + 1), abs=1e-3)
    assert hdrag["grounding_word"] in ("partly", "grounded")


def test_a_turn_stores_sends_lists_and_exports_its_citations(fake_llm, live_api, owner, pydoc_build):
    corpus = make_corpus(owner, pydoc_build)
    secret = api_token_create(user=owner, name="citations")[1]
    base = f"{live_api.url}/api/v1"
    with httpx.Client(headers={"Authorization": f"Bearer {secret}"}, timeout=120) as http:
        conversation = http.post(
            f"{base}/conversations/", json={"corpora": [corpus.pk], "token_budget": 400}
        ).json()["id"]
        with http.stream("POST", f"{base}/conversations/{conversation}/messages/",
                         json={"content": QUESTION, "stream": True}) as streamed:
            frames = [block for block in streamed.read().decode().strip().split("\n\n")]
        done = json.loads(frames[-1].split("data: ", 1)[1])
        assert frames[-1].startswith("event: chat.done")
        answer = done["message"]["content"]
        _check(done, answer)
        assert (done["message"]["grounding"], done["message"]["citations"]) == (
            done["grounding"],
            done["citations"],
        )
        stored = Message.objects.get(pk=done["message"]["id"])
        assert (stored.grounding, stored.citations) == (done["grounding"], done["citations"])

        listed = http.get(f"{base}/conversations/{conversation}/messages/").json()["results"]
        assert listed[1]["grounding"] == done["grounding"] and listed[1]["citations"] == done["citations"]
        assert listed[0]["grounding"] is None and listed[0]["citations"] == []

        record = json.loads(
            http.get(f"{base}/conversations/{conversation}/export/", params={"format": "jsonl"}).text
        )
        assert record["conversations"][1]["grounding"] == done["grounding"]
        assert record["conversations"][1]["citations"] == done["citations"]
        markdown = http.get(f"{base}/conversations/{conversation}/export/", params={"format": "md"}).text
        assert f"{MADE_UP} (unsupported)" in markdown and "[1]" in markdown
        assert (
            f"_Grounding: {done['grounding']:.0%} ({done['grounding_word']}): the share of its claims"
            in markdown
        )
        assert "(unsure)" not in markdown
        assert "\n1. **pydoc / pydoc-topics.jsonl**" in markdown


def test_the_openai_reply_carries_hdrag_whole_and_on_the_last_chunks(fake_llm, live_api, owner, pydoc_build):
    corpus = make_corpus(owner, pydoc_build)
    client = openai.OpenAI(
        base_url=f"{live_api.url}/api/v1",
        api_key=api_token_create(user=owner, name="t")[1],
        max_retries=0,
        timeout=120,
    )
    messages = [{"role": "user", "content": QUESTION}]
    whole = client.chat.completions.create(model=f"corpus-{corpus.pk}", messages=messages)
    # The official client keeps the extra object without complaint.
    _check(whole.model_extra["hdrag"], whole.choices[0].message.content)

    chunks = list(client.chat.completions.create(model=f"corpus-{corpus.pk}", messages=messages, stream=True,
                                                 stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason][-1]
    _check(finish.model_extra["hdrag"], text)
    assert chunks[-1].usage is not None and chunks[-1].model_extra["hdrag"] == finish.model_extra["hdrag"]
    assert all(
        "hdrag" not in (c.model_extra or {}) for c in chunks if c.choices and not c.choices[0].finish_reason
    )

    alone = client.chat.completions.create(model="none", messages=messages)
    assert alone.model_extra["hdrag"] == {"grounding": None, "grounding_word": "", "citations": []}


def test_markdown_marks_an_unsure_sentence_after_its_memories():
    # The last citation is as answers stored before certainties were kept: no "unsure" key.
    citations = [{"text": "Alpha one.", "claim": True, "memories": [0], "unsure": False},
                 {"text": "Beta two.", "claim": True, "memories": [1, 0], "unsure": True},
                 {"text": "Gamma three.", "claim": True, "memories": []},
                 {"text": "Delta four.", "claim": True, "memories": [2]}]
    assert cited_markdown("Alpha one. Beta two. Gamma three. Delta four.", citations) == \
        "Alpha one. [1] Beta two. [2][1] (unsure) Gamma three. (unsupported) Delta four. [3]"
