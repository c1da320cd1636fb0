"""The HTTP transports both LLM clients pool their connections through (`LLMClient`'s async one,
`ServerTokenCounter`'s synchronous one): a request goes once more, on a new connection, when the
kept-alive connection it went out on was closed under it."""

from __future__ import annotations

import httpx

# Idle kept-alive connections are dropped after this many seconds: before the server drops them
# (llama.cpp's server answers `Keep-Alive: timeout=5`; Uvicorn keeps one 5 s by default), so a
# request is never sent on a connection the server is closing.
KEEPALIVE_SECONDS = 4.0


class RetryClosedConnection(httpx.AsyncHTTPTransport):
    """httpx's transport, sending a request once more, on a new connection, when the kept-alive
    connection it went out on was closed by the server as it arrived ("Server disconnected without
    sending a response": nothing was answered). Servers and proxies close idle connections on their
    own clocks, and the pool cannot see it coming. Only before a response: no body is read twice."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await super().handle_async_request(request)
        except httpx.RemoteProtocolError:
            return await super().handle_async_request(request)


class RetryClosedConnectionSync(httpx.HTTPTransport):
    """`RetryClosedConnection` for the synchronous client (`ServerTokenCounter`)."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return super().handle_request(request)
        except httpx.RemoteProtocolError:
            return super().handle_request(request)
