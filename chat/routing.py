from __future__ import annotations

from django.urls import URLPattern, path

from chat.consumers import ChatConsumer

websocket_urlpatterns: list[URLPattern] = [
    path("ws/chat/<int:conversation_id>/", ChatConsumer.as_asgi(), name="chat-socket"),
]
