"""Websocket: live build progress of one corpus, for users who may read it.

Like the chat socket, an outsider's handshake is accepted and then closed with 4404 (4401 when
not logged in): a browser only sees the close code of an accepted socket, and both sockets
behave alike. A logout closes the session's sockets, a deactivation all the person's
(`core.sockets`).
"""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.http import Http404

from core.sockets import CLOSE_LOGGED_OUT, session_group, user_group
from corpus.events import corpus_group
from corpus.selectors import get_corpus_for_user

CLOSE_NOT_FOUND = 4404


class BuildProgressConsumer(AsyncJsonWebsocketConsumer):
    groups_joined: tuple[str, ...] = ()

    async def connect(self) -> None:
        user = self.scope.get("user")
        corpus_id = int(self.scope["url_route"]["kwargs"]["corpus_id"])
        await self.accept()
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_LOGGED_OUT)
            return
        try:
            await database_sync_to_async(get_corpus_for_user)(user, corpus_id)
        except Http404:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.groups_joined = (corpus_group(corpus_id), session_group(self.scope["session"].session_key),
                              user_group(user.pk))
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)

    async def disconnect(self, code: int) -> None:
        for group in self.groups_joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: object
    ) -> None:
        """The page only listens; whatever it sends is ignored rather than parsed."""

    async def portal_event(self, event: dict) -> None:
        await self.send_json({key: value for key, value in event.items() if key != "type"})

    async def session_ended(self, event: dict) -> None:
        await self.close(code=CLOSE_LOGGED_OUT)
