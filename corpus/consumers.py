"""Websocket: live build progress of one corpus, for users who may read it."""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.http import Http404

from corpus.events import corpus_group
from corpus.selectors import get_corpus_for_user


class BuildProgressConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        corpus_id = int(self.scope["url_route"]["kwargs"]["corpus_id"])
        try:
            await database_sync_to_async(get_corpus_for_user)(user, corpus_id)
        except Http404:
            await self.close(code=4404)
            return
        self.group = corpus_group(corpus_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def portal_event(self, event: dict) -> None:
        await self.send_json({key: value for key, value in event.items() if key != "type"})
