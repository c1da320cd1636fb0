"""A person deactivated (by an admin, or refused at a sign-in through the provider) stops at once:
their build-progress sockets are closed, their chat socket refuses its next frame. (Their API
tokens: tests/api/test_tokens.py.)"""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from chat.services import conversation_create
from tests.core.test_sockets import _logged_in, _open

pytestmark = pytest.mark.django_db(transaction=True)


def _deactivate(user) -> None:  # noqa: ANN001
    user.is_active = False
    user.save(update_fields=["is_active"])


async def test_deactivation_closes_the_build_progress_socket_at_once(corpus, member):
    socket = await _open(f"/ws/corpora/{corpus.pk}/builds/", await _logged_in(member))
    connected, _ = await socket.connect(timeout=10)
    assert connected and await socket.receive_nothing(timeout=0.5)
    await sync_to_async(_deactivate)(member)
    assert await socket.receive_output(timeout=10) == {"type": "websocket.close", "code": 4401}


async def test_deactivation_makes_the_chat_socket_refuse_its_next_frame(owner):
    conversation = await sync_to_async(conversation_create)(user=owner)
    socket = await _open(f"/ws/chat/{conversation.pk}/", await _logged_in(owner))
    connected, _ = await socket.connect(timeout=10)
    assert connected and (await socket.receive_json_from(timeout=10))["type"] == "chat.ready"
    await sync_to_async(_deactivate)(owner)
    await socket.send_json_to({"type": "chat.send", "content": "still there?"})
    assert await socket.receive_output(timeout=10) == {"type": "websocket.close", "code": 4401}
