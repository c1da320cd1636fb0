from __future__ import annotations

from django.urls import path

from corpus.consumers import BuildProgressConsumer

websocket_urlpatterns = [
    path("ws/corpora/<int:corpus_id>/builds/", BuildProgressConsumer.as_asgi()),
]
