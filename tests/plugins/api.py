"""API fixtures: the portal's users and corpus (owner, reader `member`, `writer`, outsider), a
bearer-token client per user, and a live ASGI server (uvicorn in a thread) for the clients that
need real HTTP: the `openai` client, SSE streams, schemathesis."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from rest_framework.test import APIClient

from accounts.services.tokens import api_token_create
from engine.llama_server import free_port
from tests.plugins.portal import build_now
from tests.plugins.waiting import wait_until


def token_client(user) -> APIClient:  # noqa: ANN001
    token, secret = api_token_create(user=user, name="tests")
    from django.core.cache import cache

    # A new token has no request history. On SQLite (the fast tier) a rolled-back test's token id is
    # given again, and the in-memory cache would still count that test's requests against it.
    cache.delete(f"throttle_api_token-{token.pk}")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


@pytest.fixture
def api_for() -> Callable[..., APIClient]:
    return token_client


@pytest.fixture
def no_throttle(settings) -> None:
    """Most tests make many requests; the throttle has its own tests."""
    settings.API_THROTTLE_RATE = ""
    from django.core.cache import cache

    # The counter keyed by address outlives a test (tokens and users are new in each); not
    # cache.clear(): with REDIS_URL the cache may share its Redis database with other users.
    cache.delete("throttle_api_addr-127.0.0.1")


@pytest.fixture
def built(corpus, owner, dataset, django_capture_on_commit_callbacks):
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == "succeeded", build.error
    return build


def error_of(response) -> dict:  # noqa: ANN001
    """The one error shape, checked; returns its inner dict."""
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


@dataclass
class LiveServer:
    url: str


@pytest.fixture
def live_api(transactional_db, settings) -> Iterator[LiveServer]:
    """The real ASGI application (hdrag_site.asgi) over loopback HTTP, in a thread of this
    process, so it sees the test database and settings."""
    import uvicorn

    from hdrag_site.asgi import application

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(application, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="off"))
    thread = threading.Thread(target=server.run, name="live-api", daemon=True)
    thread.start()
    def started() -> bool:
        if not thread.is_alive():
            pytest.fail("the live API server stopped while it started")
        return server.started

    wait_until(started, what="the live API server starting")
    try:
        yield LiveServer(url=f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        thread.join(timeout=30)
