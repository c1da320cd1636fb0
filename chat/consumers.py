"""The chat websocket: `/ws/chat/<conversation_id>/`.

Only the conversation's owner may connect: anyone else is closed at once with 4401 (not logged
in) or 4404 (not theirs, or missing: an outsider learns nothing). The handshake is accepted
before that close, because a browser only sees the close code of an accepted socket (a refused
handshake is a bare 1006), and the page must know not to reconnect.
Protocol (JSON objects with a `type`):

    client -> server   {"type": "chat.send", "content": str}
                       {"type": "chat.regenerate"}   answer the last user turn again
                       {"type": "chat.stop"}
                       {"type": "chat.feedback", "message": id, "rating": "up"|"down"|null, "comment": str}
                                         rate an answer of this conversation (answered by chat.feedback)
    server -> client   chat.ready on connect ({"conversation": id, "blend_turns": int}), then per
                       turn the events of `chat.turns.run_turn`; chat.error with code "busy",
                       "invalid" or "unknown_type" for a message the server refuses, and "llm_busy"
                       (with `retry_after`, seconds) when too many turns wait for the LLM,
                       "daily_quota_exceeded" (with `retry_after`: the next day) when the person's daily
                       quota is used up.

One turn at a time per connection. While a turn runs, the session is checked every
`SESSION_RECHECK_SECONDS`: a logout or a deactivation stops the answer (stored as stopped, as a
chat.stop would) and closes the socket with 4401, rather than letting it stream to its end.
Everything lives on the consumer instance (one per connection); the blend history is read from and
written to the conversation row.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.http import Http404

from accounts.quotas import QuotaExceeded
from chat.feedback import feedback_set
from chat.llm.queue import QueueFull
from chat.selectors import conversation_find_for_user
from chat.serializers import FeedbackSerializer, FeedbackWriteSerializer
from chat.turns import run_turn
from core.errors import ApplicationError
from core.sockets import session_user_is_current

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
SESSION_RECHECK_SECONDS = 2.0
_BINARY, _INVALID = object(), object()


class ChatConsumer(AsyncJsonWebsocketConsumer):
    # Every event goes to this one socket, so the consumer joins no channel layer (an alias
    # that is not configured gives none): a chat neither waits on nor holds a Redis connection.
    channel_layer_alias = None
    conversation_id: int
    _turn: asyncio.Task | None = None
    _watch: asyncio.Task | None = None
    _connected: bool = False

    async def connect(self) -> None:
        user = self.scope.get("user")
        conversation = None
        if user is not None and user.is_authenticated:
            conversation = await database_sync_to_async(conversation_find_for_user)(
                user=user, pk=int(self.scope["url_route"]["kwargs"]["conversation_id"]))
        await self.accept()
        if conversation is None:
            unauthenticated = user is None or not user.is_authenticated
            await self.close(code=CLOSE_UNAUTHENTICATED if unauthenticated else CLOSE_NOT_FOUND)
            return
        self.conversation_id = conversation.pk
        self._connected = True
        await self.send_json({"type": "chat.ready", "conversation": conversation.pk,
                              "blend_turns": len((conversation.blend_state or {}).get("responses", []))})

    async def disconnect(self, code: int) -> None:
        self._connected = False
        if self._watch is not None:
            self._watch.cancel()
        turn, self._turn = self._turn, None
        if turn is not None and not turn.done():
            # The partial answer is stored as "stopped" by the turn's own cancellation path.
            turn.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await turn

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        """Every frame is a JSON text frame; anything else is answered, never a crash (which would
        close the socket with 1011 and make the page reconnect in a loop)."""
        if not self._connected:
            return  # a refused client's frames that raced the close
        if not await self._still_logged_in():
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        try:
            content = json.loads(text_data) if text_data is not None else _BINARY
        except (ValueError, RecursionError):  # JSONDecodeError is a ValueError; RecursionError: nesting
            content = _INVALID
        if content is _BINARY or content is _INVALID:
            what = "binary frames are not accepted" if content is _BINARY else "the message is not valid JSON"
            await self._emit({"type": "chat.error", "code": "invalid",
                              "error": f"{what}; send a JSON object with a type (chat.send or chat.stop)"})
            return
        await self.receive_json(content, **kwargs)

    async def _still_logged_in(self) -> bool:
        """The session this socket opened with still logs in its user. A logout (or a password
        change) ends the session in the database; the socket then closes at its next frame.
        Checked per frame rather than pushed through the channel layer, which the chat avoids."""
        return await database_sync_to_async(session_user_is_current)(scope=self.scope)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "chat.send":
            await self._start_turn(content.get("content"))
        elif kind == "chat.regenerate":
            await self._start_turn(None, regenerate=True)
        elif kind == "chat.stop":
            if self._turn is not None and not self._turn.done():
                self._turn.cancel()
        elif kind == "chat.feedback":
            await self._feedback(content)
        else:
            await self._emit({"type": "chat.error", "code": "unknown_type",
                              "error": f"unknown message type {kind!r}; expected chat.send, chat.regenerate, "
                                       "chat.stop or chat.feedback"})

    async def _feedback(self, content: dict[str, Any]) -> None:
        """Rate an answer of this conversation; the page hears back what is stored."""
        rating = FeedbackWriteSerializer(data=content)
        message_id = content.get("message")
        if not rating.is_valid() or not isinstance(message_id, int):
            await self._emit(
                {
                    "type": "chat.error",
                    "code": "invalid",
                    "error": "chat.feedback needs message (an answer's id), rating (up, down or null) "
                    "and an optional comment",
                }
            )
            return
        try:
            feedback = await database_sync_to_async(feedback_set)(
                user=self.scope["user"], conversation_id=self.conversation_id, message_id=message_id,
                **rating.validated_data)
        except Http404:
            await self._emit({"type": "chat.error", "code": "not_found", "error": "No such answer here."})
            return
        await self._emit({"type": "chat.feedback", "message": message_id,
                          "feedback": None if feedback is None else FeedbackSerializer(feedback).data})

    async def _start_turn(self, text: Any, *, regenerate: bool = False) -> None:
        if self._turn is not None and not self._turn.done():
            await self._emit({"type": "chat.error", "code": "busy",
                              "error": "an answer is still being generated; stop it or wait"})
            return
        if not regenerate and (not isinstance(text, str) or not text.strip()):
            await self._emit(
                {"type": "chat.error", "code": "invalid", "error": "content must be a non-empty string"}
            )
            return
        self._turn = asyncio.create_task(self._run(text or "", regenerate=regenerate))
        self._watch = asyncio.create_task(self._stop_when_logged_out(self._turn))

    async def _stop_when_logged_out(self, turn: asyncio.Task) -> None:
        """End `turn` and the socket once the session no longer logs its user in (logout,
        deactivation): one session read every few seconds of a running answer, none when idle."""
        while not turn.done():
            await asyncio.wait({turn}, timeout=SESSION_RECHECK_SECONDS)
            if turn.done() or await self._still_logged_in():
                continue
            turn.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await turn
            await self.close(code=CLOSE_UNAUTHENTICATED)
            self._connected = False
            return

    async def _run(self, text: str, *, regenerate: bool) -> None:
        try:
            await run_turn(conversation_id=self.conversation_id, user_id=self.scope["user"].pk, content=text,
                           emit=self._emit, regenerate=regenerate)
        except (QueueFull, QuotaExceeded) as exc:
            # Refused before anything was stored: the page puts the message back in the composer.
            await self._emit({"type": "chat.error", "code": exc.code, "error": exc.message,
                              "retry_after": exc.retry_after})
        except ApplicationError as exc:  # e.g. an empty message (invalid), the shared queue's Redis down
            await self._emit({"type": "chat.error", "code": exc.code, "error": exc.message})
        except asyncio.CancelledError:
            # A stop from this client: run_turn stored the partial answer and reported it.
            return
        except Exception:
            # Storing failed (e.g. the conversation was deleted in another tab meanwhile).
            logger.exception("chat turn crashed in conversation %s", self.conversation_id)
            await self._emit({"type": "chat.error", "code": "internal",
                              "error": "The answer could not be stored; reload the page."})

    async def _emit(self, event: dict[str, Any]) -> None:
        # After a disconnect the turn still stores its result; there is just no one to tell.
        if self._connected:
            await self.send_json(event)
