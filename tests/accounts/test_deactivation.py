"""A person deactivated (by an admin, or refused at a sign-in through the provider) stops at once:
their build-progress sockets are closed, their chat socket refuses its next frame, and an answer
streaming to them stops (stored as stopped) and its socket closes. (Their API
tokens: tests/api/test_tokens.py.)"""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async

from chat.models import Message
from chat.services import conversation_create
from tests.core.test_sockets import _logged_in, _open
from tests.plugins.chat import events_until, open_socket, set_engine_config
from tests.plugins.llama import paused

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


async def test_deactivation_stops_an_answer_that_is_streaming(chat_settings, users, llama_server, tmp_path):
    owner, _, _ = users
    set_engine_config(chat_settings, tmp_path, max_new_tokens=1500)
    conversation = await sync_to_async(conversation_create)(user=owner, use_memory=False)
    socket, _, _ = await open_socket(owner, conversation.pk)
    await socket.receive_json_from()
    await socket.send_json_to(
        {"type": "chat.send", "content": "Write a very long story about a dragon and a city."}
    )
    await events_until(socket, "chat.delta")
    with paused(llama_server):
        await sync_to_async(_deactivate)(owner)
        # The answer is cut at the next session check (every 2 s), and the socket closes.
        while (output := await socket.receive_output(timeout=30))["type"] != "websocket.close":
            assert output["type"] == "websocket.send"
            event = json.loads(output["text"])
            stopped = event["type"] == "chat.done" and event["status"] == "stopped"
            assert event["type"] in {"chat.delta", "chat.rewind"} or stopped, event
    assert output == {"type": "websocket.close", "code": 4401}
    answer = await sync_to_async(
        lambda: Message.objects.filter(conversation=conversation).order_by("id").last()
    )()
    assert answer.role == "assistant" and answer.status == "stopped"
    assert answer.content  # what had streamed is kept
