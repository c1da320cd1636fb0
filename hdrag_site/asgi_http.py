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
down after their request. Request parsing, the body limit, streaming responses (SSE) and
websockets are unchanged.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
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

    def give_back(self, executor: ThreadPoolExecutor) -> None:
        with self._lock:
            if len(self._idle) < self.kept:
                self._idle.append(executor)
                return
        executor.shutdown(wait=False)


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
        executor = self._threads.take()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            self._threads.give_back(executor)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)
