"""A looping LLM: an OpenAI-compatible server on loopback whose answers loop on demand, for the
chat and API tests of the repetition guard (a real model cannot be made to loop when asked)."""

from __future__ import annotations

import asyncio
import json

LOOP_HEAD = "Yield pauses the function.\n"
LOOP_LINE = "It returns a value to the caller and waits.\n"
KEPT = "Yield pauses the function.\nIt returns a value to the caller and waits."
CONTINUATION = "\nThe next call resumes it where it left off."
PROMPT_TOKENS, COMPLETION_TOKENS = 40, 9


def looping_llm(requests: list[dict], *, looping: int, prefill: bool = True, tokenize: bool = False,
                 restate: bool = False):
    """An OpenAI-compatible server whose first `looping` answers loop forever (until the client goes
    away); later answers write CONTINUATION and stop, with a usage of PROMPT_TOKENS plus a word a
    token of a prefilled answer, and COMPLETION_TOKENS. `requests` receives every chat request's
    body. `/apply-template` renders a trailing assistant message open (as llama.cpp does under a
    Jinja template) when `prefill`; `/tokenize` counts a word a token when `tokenize`; other paths
    get 404 (without `/tokenize` the portal estimates prompt sizes). With `restate`, an answer that
    does not loop is the question again (what the 0.5B model answered about the MPL's cure period).

    A fake, and the one in this suite: a real model cannot be made to loop on demand, and the
    point is what the portal does when one does."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request_line = await reader.readline()
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        body = await reader.readexactly(length)
        if prefill and b" /apply-template " in request_line:
            last = json.loads(body)["messages"][-1]["content"]
            answer = json.dumps({"prompt": f"<|im_start|>assistant\n{last}"}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n%s" % (len(answer), answer))
            await writer.drain()
            writer.close()
            return
        if tokenize and b" /tokenize " in request_line:
            answer = json.dumps({"tokens": [0] * len(json.loads(body)["content"].split())}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n%s" % (len(answer), answer))
            await writer.drain()
            writer.close()
            return
        if b" /v1/chat/completions " not in request_line:
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            writer.close()
            return
        requests.append(json.loads(body))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
        loops = len(requests) <= looping
        if not loops:
            chunks = [requests[-1]["messages"][-1]["content"]] if restate else [CONTINUATION]
        elif requests[-1]["messages"][-1]["role"] == "assistant":  # continuing the kept text, it loops on
            chunks = ["\n"] + [LOOP_LINE] * 400
        else:
            chunks = [LOOP_HEAD] + [LOOP_LINE] * 400
        events = [{"choices": [{"delta": {"content": text}, "finish_reason": None}]} for text in chunks]
        if not loops:
            last = requests[-1]["messages"][-1]
            prefilled = len(last["content"].split()) if last["role"] == "assistant" else 0
            events.append(
                {
                    "choices": [{"delta": {}, "finish_reason": "stop"}],
                    "usage": {
                        "prompt_tokens": PROMPT_TOKENS + prefilled,
                        "completion_tokens": COMPLETION_TOKENS,
                    },
                }
            )
        try:
            for event in events:
                writer.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                await writer.drain()
                await asyncio.sleep(0.002)
            writer.write(b"data: [DONE]\n\n")
            await writer.drain()
        except (ConnectionResetError, BrokenPipeError):
            return
        finally:
            writer.close()

    return serve
