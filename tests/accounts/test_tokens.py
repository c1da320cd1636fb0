"""API tokens (page, command, hashing, revocation), browser sessions, throttling, body limits."""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import re
import threading

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.signals import request_started
from django.test import Client
from rest_framework.test import APIClient

from accounts.models import ApiToken
from accounts.services.tokens import api_token_create, api_token_revoke
from hdrag_site.asgi_http import KEPT_THREADS
from tests.plugins.api import error_of, token_client
from tests.plugins.portal import PASSWORD, login


@pytest.fixture(autouse=True)
def api_unthrottled(no_throttle) -> None:  # noqa: ANN001 - fixture
    """Token tests make many API requests; the API's throttle has its own tests."""


def _bearer(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def test_token_page_creates_shows_once_lists_and_revokes(owner, outsider, corpus):
    page = login(owner)
    created = page.post("/accounts/tokens/", {"name": "nightly import"})
    assert created.status_code == 201
    secret = re.search(r'<pre id="new-token">([^<]+)</pre>', created.content.decode()).group(1)
    token = ApiToken.objects.get(user=owner)
    # Stored hashed: the secret itself is nowhere in the database.
    assert token.key_hash == hashlib.sha256(secret.encode()).hexdigest() and secret not in str(vars(token))
    assert created["Cache-Control"] == "no-store"
    listing = page.get("/accounts/tokens/").content.decode()
    assert "nightly import" in listing and secret not in listing and token.prefix in listing
    assert _bearer(secret).get("/api/v1/corpora/").json()["count"] == 1
    assert login(outsider).post(f"/accounts/tokens/{token.pk}/revoke/").status_code == 404
    assert _bearer(secret).get("/api/v1/corpora/").status_code == 200
    assert page.post(f"/accounts/tokens/{token.pk}/revoke/").status_code == 302
    assert _bearer(secret).get("/api/v1/corpora/").status_code == 401
    assert page.post("/accounts/tokens/", {"name": "  "}).status_code == 400
    assert Client().get("/accounts/tokens/").status_code == 302  # login required


def test_management_command_prints_the_token_alone_on_its_last_line(owner, corpus):
    out = io.StringIO()
    call_command("api_token", "create", "owner", "--name", "ops", stdout=out)
    secret = out.getvalue().strip().splitlines()[-1]
    assert " " not in secret and _bearer(secret).get("/api/v1/corpora/").json()["count"] == 1
    listed = io.StringIO()
    call_command("api_token", "list", "owner", stdout=listed)
    assert "ops" in listed.getvalue() and secret not in listed.getvalue()
    call_command("api_token", "revoke", str(ApiToken.objects.get(name="ops").pk), stdout=io.StringIO())
    assert _bearer(secret).get("/api/v1/corpora/").status_code == 401


def test_browser_session_works_and_keeps_csrf(owner, corpus):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(owner)
    assert browser.get("/api/v1/corpora/").json()["count"] == 1
    refused = browser.post("/api/v1/corpora/", {"name": "x"}, content_type="application/json")
    assert refused.status_code == 403 and "CSRF" in error_of(refused)["message"]


def test_throttle_per_token_with_retry_after(owner, settings):
    settings.API_THROTTLE_RATE = "3/min"
    first, second = token_client(owner), token_client(owner)
    assert [first.get("/api/v1/models").status_code for _ in range(3)] == [200, 200, 200]
    throttled = first.get("/api/v1/models")
    assert throttled.status_code == 429 and 0 < int(throttled["Retry-After"]) <= 60
    assert error_of(throttled)["code"] == "throttled"
    assert second.get("/api/v1/models").status_code == 200  # per token, not per user


def test_one_wrong_token_in_a_loop_locks_that_token_not_the_address(owner, settings):
    """A script retrying its revoked token is refused, while the colleagues behind the same address
    (another token, the login page) are not."""
    revoked, secret = api_token_create(user=owner, name="old")
    api_token_revoke(token=revoked)
    retrying = _bearer(secret)
    statuses = [retrying.get("/api/v1/models").status_code for _ in range(3 * settings.AXES_FAILURE_LIMIT)]
    assert statuses[:settings.AXES_FAILURE_LIMIT - 1] == [401] * (settings.AXES_FAILURE_LIMIT - 1)
    assert set(statuses[settings.AXES_FAILURE_LIMIT - 1:]) == {429}  # as the login page, from the limit on
    blocked = retrying.get("/api/v1/models")
    assert int(blocked["Retry-After"]) == settings.AXES_COOLOFF_TIME.total_seconds()
    assert error_of(blocked)["code"] == "throttled" and "Too many failed" in error_of(blocked)["message"]
    assert token_client(owner).get("/api/v1/models").status_code == 200
    assert Client().post("/accounts/login/", {"username": "owner", "password": PASSWORD}).status_code == 302


def test_guessing_tokens_locks_the_address_not_another_client(owner, settings):
    guesser = APIClient(REMOTE_ADDR="10.0.7.1")
    statuses = [guesser.get("/api/v1/models", HTTP_AUTHORIZATION=f"Bearer hdr_guess-{i}").status_code
                for i in range(settings.LOGIN_ADDRESS_FAILURE_LIMIT + 1)]
    assert statuses == [401] * settings.LOGIN_ADDRESS_FAILURE_LIMIT + [429]
    # One count: the login page refuses that address too...
    login_page = Client(REMOTE_ADDR="10.0.7.1").post(
        "/accounts/login/", {"username": "owner", "password": PASSWORD}
    )
    assert login_page.status_code == 429
    # ...but not another client, and a right token (not guessed) not even there.
    other = APIClient(REMOTE_ADDR="10.0.7.2")
    assert other.get("/api/v1/models", HTTP_AUTHORIZATION="Bearer hdr_typo").status_code == 401
    assert other.get("/api/v1/models", HTTP_AUTHORIZATION=_bearer_header(owner)).status_code == 200
    assert guesser.get("/api/v1/models", HTTP_AUTHORIZATION=_bearer_header(owner)).status_code == 200


def _bearer_header(user) -> str:  # noqa: ANN001
    return f"Bearer {api_token_create(user=user, name='tests')[1]}"


def test_json_body_limit_is_413(owner, settings):
    settings.API_MAX_JSON_BYTES = 1024
    response = token_client(owner).post("/api/v1/corpora/", {"name": "x" * 2000}, format="json")
    assert response.status_code == 413 and error_of(response)["code"] == "too_large"


def test_unknown_api_path_is_a_json_404(owner):
    response = token_client(owner).get("/api/v1/nowhere/")
    assert response.status_code == 404 and error_of(response)["code"] == "not_found"


def test_schema_and_docs_are_served_without_a_cdn(client):
    schema = client.get("/api/schema/?format=json")
    assert schema.status_code == 200
    docs = client.get("/api/docs/").content.decode()
    assert "swagger-ui-bundle.js" in docs
    assert not re.search(r'(src|href)="https?://', docs), "docs assets must be served locally"
    asset = re.search(r'src="(/static/[^"]+swagger-ui-bundle\.js)"', docs).group(1)
    assert client.get(asset).status_code == 200


def test_one_client_s_requests_in_a_row_are_served_by_one_thread(live_api, owner, corpus):
    """The request thread is lent to the next request once the response is sent, not after its
    clean-up: the client's next request would otherwise find it busy and take another thread
    (two threads took turns, each with its own OpenMP team for the engine's kernels)."""
    _, secret = api_token_create(user=owner, name="sequential")
    served_by: list[int] = []

    def record(**_: object) -> None:
        served_by.append(threading.get_ident())

    request_started.connect(record)
    try:
        with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {secret}"}) as http:
            statuses = [
                http.get(f"{live_api.url}/api/v1/corpora/{corpus.pk}/").status_code for _ in range(20)
            ]
    finally:
        request_started.disconnect(record)
    assert statuses == [200] * 20
    assert len(served_by) == 20 and len(set(served_by)) == 1, f"{len(set(served_by))} threads took turns"


# Many requests write their token's last use at once: SQLite's shared in-memory test database locks the
# table ("database table is locked"), so this needs PostgreSQL (DATABASE_URL), as CI gives it.
@pytest.mark.service
async def test_more_requests_at_once_than_kept_threads_all_finish_cleanly(live_api, owner, corpus, caplog):
    """Threads beyond KEPT_THREADS are not lent early (one shut down then could not run its
    request's clean-up): every request is answered and nothing is logged as failing."""
    _, secret = await sync_to_async(api_token_create)(user=owner, name="burst")
    url = f"{live_api.url}/api/v1/corpora/{corpus.pk}/"
    async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {secret}"},
                                 limits=httpx.Limits(max_connections=3 * KEPT_THREADS)) as http:
        for _ in range(3):
            responses = await asyncio.gather(*(http.get(url) for _ in range(3 * KEPT_THREADS)))
            assert [r.status_code for r in responses] == [200] * (3 * KEPT_THREADS)
    await asyncio.sleep(0.5)  # the last clean-ups run after the responses
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_over_http_revoke_and_deactivation_count_at_the_next_request_on_kept_threads(live_api, owner, corpus):
    """The real ASGI app keeps its request threads and their database connections between
    requests (hdrag_site.asgi_http): a revoke from elsewhere (the operator's command, another
    connection) and a user switched off by a bulk update (no signal) still fail the very next
    request, and sequential requests do not start a thread each."""
    _, revoked = api_token_create(user=owner, name="to revoke")
    _, kept = api_token_create(user=owner, name="kept")
    url = f"{live_api.url}/api/v1/corpora/{corpus.pk}/"
    with httpx.Client(timeout=30) as http:
        def status(secret: str) -> int:
            return http.get(url, headers={"Authorization": f"Bearer {secret}"}).status_code

        assert [status(revoked) for _ in range(20)] == [200] * 20
        request_threads = [t for t in threading.enumerate() if t.name.startswith("request")]
        assert 1 <= len(request_threads) <= KEPT_THREADS
        call_command(
            "api_token", "revoke", str(ApiToken.objects.get(name="to revoke").pk), stdout=io.StringIO()
        )
        assert status(revoked) == 401 and status(kept) == 200
        get_user_model().objects.filter(pk=owner.pk).update(is_active=False)
        assert status(kept) == 401
        get_user_model().objects.filter(pk=owner.pk).update(is_active=True)
        assert status(kept) == 200
