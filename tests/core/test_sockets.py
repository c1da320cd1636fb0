"""Websocket hardening through the real ASGI app (origin check, session auth, routing, consumers):
bad frames are answered, foreign origins refused (port included), logout closes sockets, and both
sockets treat outsiders alike (accept, then close 4404)."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.test import Client

from chat.services import conversation_create
from hdrag_site.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)
SITE = "http://testserver"


def _cookie(client: Client) -> str:
    return (
        f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"
    )


async def _open(path: str, client: Client | None = None, *, origin: str = SITE,
                host: str = "testserver") -> WebsocketCommunicator:
    headers = [(b"origin", origin.encode()), (b"host", host.encode())]
    if client is not None:
        headers.append((b"cookie", _cookie(client).encode()))
    return WebsocketCommunicator(application, path, headers=headers)


async def _logged_in(user) -> Client:  # noqa: ANN001
    client = Client()
    await sync_to_async(client.force_login)(user)
    return client


async def _chat(owner, client: Client) -> WebsocketCommunicator:  # noqa: ANN001
    conversation = await sync_to_async(conversation_create)(user=owner)
    socket = await _open(f"/ws/chat/{conversation.pk}/", client)
    connected, _ = await socket.connect(timeout=10)
    assert connected and (await socket.receive_json_from(timeout=10))["type"] == "chat.ready"
    return socket


@pytest.mark.parametrize("frame", [{"text_data": "not json {"}, {"bytes_data": b"\x00\x01binary"},
                                   {"text_data": "[" * 100_000 + "]" * 100_000}, {"text_data": "null"}],
                         ids=["not-json", "binary", "deep", "null"])
async def test_bad_frames_are_answered_and_the_socket_stays_open(owner, frame):
    socket = await _chat(owner, await _logged_in(owner))
    await socket.send_to(**frame)
    answer = await socket.receive_json_from(timeout=10)
    assert answer["type"] == "chat.error" and answer["code"] in ("invalid", "unknown_type"), answer
    # Still usable: the next frame is answered too.
    await socket.send_json_to({"type": "chat.send", "content": "  "})
    assert (await socket.receive_json_from(timeout=10))["code"] == "invalid"
    await socket.disconnect()


@pytest.mark.parametrize(("origin", "host", "accepted"), [
    (SITE, "testserver", True),
    ("http://testserver:9999", "testserver", False),
    ("http://localhost:9999", "localhost:8000", False),
    ("http://localhost:8000", "localhost:8000", True),
    ("https://localhost:8000", "localhost:8000", False),
    ("http://evil.example", "testserver", False),
    ("null", "testserver", False),
])
async def test_origin_must_match_scheme_host_and_port(owner, origin, host, accepted):
    conversation = await sync_to_async(conversation_create)(user=owner)
    socket = await _open(f"/ws/chat/{conversation.pk}/", await _logged_in(owner), origin=origin, host=host)
    connected, _ = await socket.connect(timeout=10)
    assert connected is accepted
    await socket.disconnect()


async def test_a_trusted_origin_is_accepted(owner, settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://portal.example.org"]
    conversation = await sync_to_async(conversation_create)(user=owner)
    socket = await _open(f"/ws/chat/{conversation.pk}/", await _logged_in(owner), origin="https://portal.example.org")
    assert (await socket.connect(timeout=10))[0]
    await socket.disconnect()


async def test_logout_closes_the_chat_socket_at_its_next_frame(owner):
    client = await _logged_in(owner)
    socket = await _chat(owner, client)
    await sync_to_async(client.post)("/accounts/logout/")
    await socket.send_json_to({"type": "chat.send", "content": "still there?"})
    assert await socket.receive_output(timeout=10) == {"type": "websocket.close", "code": 4401}


async def test_logout_closes_the_build_progress_socket_at_once(corpus, member):
    client = await _logged_in(member)
    socket = await _open(f"/ws/corpora/{corpus.pk}/builds/", client)
    assert (await socket.connect(timeout=10))[0]
    await sync_to_async(client.post)("/accounts/logout/")
    assert await socket.receive_output(timeout=10) == {"type": "websocket.close", "code": 4401}


async def test_outsiders_are_closed_with_4404_on_both_sockets(corpus, owner, outsider):
    client = await _logged_in(outsider)
    conversation = await sync_to_async(conversation_create)(user=owner)
    for path in (f"/ws/corpora/{corpus.pk}/builds/", f"/ws/chat/{conversation.pk}/"):
        socket = await _open(path, client)
        connected, _ = await socket.connect(timeout=10)
        assert connected, path
        assert await socket.receive_output(timeout=10) == {"type": "websocket.close", "code": 4404}, path
    for path in (f"/ws/corpora/{corpus.pk}/builds/", f"/ws/chat/{conversation.pk}/"):
        socket = await _open(path)
        assert (await socket.connect(timeout=10))[0]
        assert await socket.receive_output(timeout=10) == {"type": "websocket.close", "code": 4401}, path
