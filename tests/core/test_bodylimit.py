"""Request bodies are bounded in front of Django: an oversized body is answered 413 before it is read
(by Content-Length) or as soon as it passes the limit (chunked), and only a logged-in upload may be
as large as UPLOAD_MAX_BYTES. Through the real ASGI app, then through a real Uvicorn on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings as django_settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart
from rest_framework.test import APIClient

from accounts.services.tokens import api_token_create, api_token_revoke
from core.bodylimit import _upload_paths
from hdrag_site.asgi import application
from tests.plugins.portal import TEXTS, jsonl_bytes

pytestmark = pytest.mark.django_db(transaction=True)
KIB = 1024


class Body:
    """An ASGI receive() over `chunks` (endless when `last` is None); counts what the app pulled."""

    def __init__(self, chunks: Iterator[bytes], last: bytes | None = None) -> None:
        self.chunks, self.last, self.pulled, self.done = chunks, last, 0, False

    async def __call__(self) -> dict:
        if self.done:
            await asyncio.sleep(3600)  # like a server: after the body, only a disconnect would come
        chunk = next(self.chunks, None)
        if chunk is None:
            chunk, self.done = self.last or b"", True
        self.pulled += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": not self.done}


def _scope(path: str, headers: list[tuple[bytes, bytes]], client: str) -> dict:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), *headers],
        "client": (client, 50000),
        "server": ("testserver", 80),
    }


async def _exchange(path: str, body: Body, headers: list[tuple[bytes, bytes]],
                    client: str = "127.0.0.1") -> tuple[dict, bytes]:
    """The response's start message and its body."""
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    await asyncio.wait_for(application(_scope(path, headers, client), body, send), timeout=30)
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


async def _post(path: str, body: Body, headers: list[tuple[bytes, bytes]],
                client: str = "127.0.0.1") -> tuple[int, bytes]:
    start, content = await _exchange(path, body, headers, client)
    return start["status"], content


def _endless(size: int = 64 * KIB) -> Iterator[bytes]:
    while True:
        yield b"x" * size


async def test_a_declared_oversized_body_is_refused_unread(settings):
    body = Body(_endless())
    status, text = await _post(
        "/accounts/login/", body, [(b"content-length", str(200 * 1024 * KIB).encode())]
    )
    assert status == 413 and b"larger than the limit of 2.5 MiB" in text
    assert body.pulled == 0


@pytest.mark.parametrize("path", ["/accounts/login/", "/no-such-page/", "/corpora/1/datasets/"])
async def test_a_chunked_body_is_cut_at_the_limit(settings, path):
    settings.REQUEST_MAX_BYTES = 256 * KIB
    body = Body(_endless())
    status, _ = await _post(path, body, [(b"transfer-encoding", b"chunked"),
                                         (b"content-type", b"application/octet-stream")])
    assert status == 413
    assert settings.REQUEST_MAX_BYTES < body.pulled <= settings.REQUEST_MAX_BYTES + 64 * KIB


def _multipart(content: bytes) -> bytes:
    return encode_multipart(BOUNDARY, {"file": SimpleUploadedFile("notes.jsonl", content)})


async def _session(user) -> str:  # noqa: ANN001
    client = Client()
    await sync_to_async(client.force_login)(user)
    return (
        f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"
    )


async def test_only_a_logged_in_upload_gets_the_upload_limit(settings, corpus, owner):
    settings.REQUEST_MAX_BYTES = 16 * KIB
    settings.UPLOAD_MAX_BYTES = 1024 * KIB
    texts = [f"{TEXTS[i % len(TEXTS)]} (copy {i})" for i in range(600)]
    payload = _multipart(jsonl_bytes(texts))
    assert settings.REQUEST_MAX_BYTES < len(payload) < settings.UPLOAD_MAX_BYTES
    headers = [(b"content-length", str(len(payload)).encode()), (b"content-type", MULTIPART_CONTENT.encode())]
    path = f"/corpora/{corpus.pk}/datasets/"

    anonymous = Body(iter(()), last=payload)
    assert (await _post(path, anonymous, headers))[0] == 413 and anonymous.pulled == 0
    forged = Body(iter(()), last=payload)
    assert (await _post(path, forged, [*headers, (b"cookie", b"sessionid=forged")]))[0] == 413

    # The real upload: Django reads it (the limit lets it through) and the view stores it.
    cookie = await _session(owner)
    csrf = "c" * 32
    status, _ = await _post(
        path,
        Body(iter(()), last=payload),
        [*headers, (b"cookie", f"{cookie}; csrftoken={csrf}".encode()), (b"x-csrftoken", csrf.encode())],
    )
    assert status == 302
    assert await corpus.datasets.acount() == 1


def test_a_real_server_answers_oversized_bodies_at_once(tmp_path):
    """bench/abuse.py's cases against Uvicorn running the portal: 413 within 1 s, <= 64 MB growth."""
    from bench.abuse import Portal, abuse

    portal = Portal("uvicorn", tmp_path)
    try:
        assert abuse(portal, 100)
    finally:
        portal.stop()


def _upload(settings) -> tuple[bytes, list[tuple[bytes, bytes]]]:  # noqa: ANN001
    """A dataset upload over REQUEST_MAX_BYTES and under UPLOAD_MAX_BYTES, and its headers."""
    settings.REQUEST_MAX_BYTES = 16 * KIB
    settings.UPLOAD_MAX_BYTES = 1024 * KIB
    payload = _multipart(jsonl_bytes([f"{TEXTS[i % len(TEXTS)]} (copy {i})" for i in range(600)]))
    assert settings.REQUEST_MAX_BYTES < len(payload) < settings.UPLOAD_MAX_BYTES
    return payload, [
        (b"content-length", str(len(payload)).encode()),
        (b"content-type", MULTIPART_CONTENT.encode()),
    ]


async def test_an_api_token_admits_a_large_upload_body_and_a_wrong_one_does_not(settings, corpus, owner):
    """The API's dataset upload takes bodies past REQUEST_MAX_BYTES for a valid bearer token, as the
    page upload does for a session; a garbage or revoked token is held to REQUEST_MAX_BYTES."""
    payload, headers = _upload(settings)
    path = f"/api/v1/corpora/{corpus.pk}/datasets/"
    token, raw = await sync_to_async(api_token_create)(user=owner, name="ci")
    for authorization in ("Bearer not-a-token", "Basic abc"):
        body = Body(iter(()), last=payload)
        assert (await _post(path, body, [*headers, (b"authorization", authorization.encode())]))[0] == 413
        assert body.pulled == 0
    status, _ = await _post(
        path, Body(iter(()), last=payload), [*headers, (b"authorization", f"bearer {raw}".encode())]
    )
    assert status == 201 and await corpus.datasets.acount() == 1
    await sync_to_async(api_token_revoke)(token=token)
    status, _ = await _post(
        path, Body(iter(()), last=payload), [*headers, (b"authorization", f"Bearer {raw}".encode())]
    )
    assert status == 413


async def test_wrong_tokens_at_the_body_limit_count_and_are_refused(settings, corpus, owner):
    """The layer's token check is the throttle's: guessing there is counted, then refused with 429,
    by the API too; a right token still gets the upload limit."""
    payload, headers = _upload(settings)
    path = f"/api/v1/corpora/{corpus.pk}/datasets/"
    for i in range(settings.LOGIN_ADDRESS_FAILURE_LIMIT):
        body = Body(_endless())
        status, _ = await _post(path, body, [*headers, (b"authorization", f"Bearer hdr_guess-{i}".encode())])
        assert status == 413 and body.pulled == 0
    body = Body(_endless())
    start, text = await _exchange(path, body, [*headers, (b"authorization", b"Bearer hdr_guess-last")])
    assert start["status"] == 429 and b"Too many failed" in text and body.pulled == 0
    assert int(dict(start["headers"])[b"retry-after"]) == settings.AXES_COOLOFF_TIME.total_seconds()
    api = await sync_to_async(APIClient().get)("/api/v1/models", HTTP_AUTHORIZATION="Bearer hdr_guess-api")
    assert api.status_code == 429  # the same address (127.0.0.1), the same count
    _, raw = await sync_to_async(api_token_create)(user=owner, name="ci")
    status, _ = await _post(
        path, Body(iter(()), last=payload), [*headers, (b"authorization", f"Bearer {raw}".encode())]
    )
    assert status == 201


def test_the_upload_paths():
    pattern = _upload_paths(django_settings.UPLOAD_PATH_PATTERN)
    for path in ("/corpora/3/datasets/", "/api/v1/corpora/3/datasets/", "/api/v1/corpora/3/store/pages/"):
        assert pattern.fullmatch(path), path
    for path in ("/accounts/login/", "/api/v1/chat/completions", "/api/v1/corpora/3/search/"):
        assert not pattern.fullmatch(path), path
