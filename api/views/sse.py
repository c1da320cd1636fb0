"""Server-Sent Events from an async producer, for the streaming endpoints.

`sse_stream(produce)` runs `produce(emit)` as a task and yields what it emits as SSE frames.
When the client goes away, Django cancels the iteration; the producer task is then cancelled
too (a chat turn stores its partial answer as stopped, and llama.cpp stops generating).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from django.http import StreamingHttpResponse

_DONE = object()


def sse_frame(data: Any, event: str | None = None) -> str:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    return head + "".join(f"data: {line}\n" for line in text.split("\n")) + "\n"


async def _frames(
    produce: Callable[[Callable[[Any], Awaitable[None]]], Awaitable[None]],
) -> AsyncIterator[str]:
    queue: asyncio.Queue = asyncio.Queue()

    async def emit(frame: Any) -> None:
        await queue.put(frame)

    async def run() -> None:
        try:
            await produce(emit)
        finally:
            await queue.put(_DONE)

    task = asyncio.ensure_future(run())
    try:
        while True:
            frame = await queue.get()
            if frame is _DONE:
                break
            yield frame
        await task  # re-raises what the producer raised
    finally:
        if not task.done():
            task.cancel()
            # The client is gone: there is no one to report the producer's end to.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class _EventStream(StreamingHttpResponse):
    """A streaming response that calls `on_close` when the server closes it, streamed or not."""

    def __init__(self, *args: Any, on_close: Callable[[], None] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_close = on_close

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._on_close is not None:
                self._on_close()


def sse_response(produce: Callable[[Callable[[Any], Awaitable[None]]], Awaitable[None]], *,
                 on_close: Callable[[], None] | None = None) -> StreamingHttpResponse:
    """`produce(emit)` emits ready SSE frames (strings, see `sse_frame`). `on_close` is called when
    the response is closed, whether or not the client read it (a place in the LLM queue is given up)."""
    response = _EventStream(
        _frames(produce), content_type="text/event-stream; charset=utf-8", on_close=on_close
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass events on as they come
    return response
