"""Django's ASGI handler with each request's synchronous path in one call on a kept worker thread.

Every view, middleware and database access of the portal is synchronous. Django's own ASGIHandler
runs its middleware in async mode, so a chain of sync middleware around a sync view crosses
between the event loop and a worker thread at every async/sync boundary (the chain's top, each
`process_view`, the view, the response's rendering), and it starts a new worker thread for every
request (asgiref's per-request `ThreadSensitiveContext`) and joins it in yet another one. A new
thread also means a new database connection per request whatever `CONN_MAX_AGE` says: Django
keeps connections per thread. Measured on the API's search endpoint (bench/api.py), that was most
of what the API added to a search.

This handler loads the middleware in sync mode and runs the whole of `BaseHandler.get_response`
(middleware, view, rendering: what a WSGI server runs) in one call, on a worker thread taken from
a small pool of single-thread executors. The thread is the request's thread-sensitive executor,
so the `request_started` / `request_finished` receivers (closing stale database connections) run
on the thread that owns the connection, and `CONN_MAX_AGE` keeps it between requests. Concurrent
requests get distinct threads, as before; beyond `KEPT_THREADS` idle threads, extra ones are shut
down after their request. A thread is lent to the next request as soon as its response has been
sent (what is left, `response.close()`, then runs before that request's work on the same thread),
so one client's requests in a row are served by one thread. Request parsing, the body limit,
streaming responses (SSE) and websockets are unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponseBase

# Idle request threads kept (each may hold one database connection for up to CONN_MAX_AGE).
KEPT_THREADS = 8


class _ThreadPool:
    """Single-thread executors lent one per request and kept for the next ones."""

    def __init__(self, kept: int) -> None:
        self.kept = kept
        self._idle: list[ThreadPoolExecutor] = []
        self._lock = threading.Lock()

    def take(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")

    def offer(self, executor: ThreadPoolExecutor) -> bool:
        """Keep `executor` for the next request if there is room; False (and nothing done) if not."""
        with self._lock:
            if len(self._idle) < self.kept:
                self._idle.append(executor)
                return True
        return False

    def give_back(self, executor: ThreadPoolExecutor) -> None:
        if not self.offer(executor):
            executor.shutdown(wait=False)


class _Lent:
    """A request's thread, given back once: early, if the pool keeps it, or when the request ends."""

    __slots__ = ("executor", "returned")

    def __init__(self, executor: ThreadPoolExecutor) -> None:
        self.executor = executor
        self.returned = False


_lent: ContextVar[_Lent | None] = ContextVar("request_thread", default=None)


class SyncPathASGIHandler(ASGIHandler):
    def __init__(self) -> None:
        super().__init__()
        self._threads = _ThreadPool(KEPT_THREADS)

    def load_middleware(self, is_async: bool = False) -> None:
        # Sync mode whatever the caller asks: the chain, the view and the rendering run in one
        # thread call (get_response_async below).
        super().load_middleware(is_async=False)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        lent = _Lent(self._threads.take())
        context = _lent.set(lent)
        try:
            async with ThreadSensitiveContext(executor=lent.executor):
                await self.handle(scope, receive, send)
        finally:
            _lent.reset(context)
            if not lent.returned:
                self._threads.give_back(lent.executor)

    async def send_response(self, response: HttpResponseBase, send: Any) -> None:
        if response.streaming and not response.is_async:
            # A file (WhiteNoise's static files, downloads) streams from a synchronous iterator,
            # which Django would consume on a thread of its own with a warning per response: read
            # it on this request's thread instead, chunk by chunk.
            response.streaming_content = _read_on_request_thread(response.streaming_content)
        await super().send_response(response, send)
        lent = _lent.get()
        if lent is not None and not lent.returned and not response.streaming:
            # All that is left of this request on its thread is response.close() (request_finished),
            # and the client may already be sending its next request: lend the thread to it now
            # (the two run on it one after the other). Given back only after close(), the thread
            # was still busy then, so a client sending one request after another was served by
            # two threads in turn, each with its own OpenMP team for the engine's kernels, which
            # ran ~1.7x slower than in one thread (bench/api.py). Only if the pool keeps it: one
            # shut down now could not run that close().
            lent.returned = self._threads.offer(lent.executor)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)


async def _read_on_request_thread(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    step = sync_to_async(next, thread_sensitive=True)
    done = object()
    while (chunk := await step(chunks, done)) is not done:
        yield chunk
