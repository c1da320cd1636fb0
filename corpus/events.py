"""Realtime events: plain dicts with `type` and `op`, all sent through `send_event`.

Build progress goes to the group of its corpus; the websocket consumer forwards it to pages.
With the in-memory channel layer a separate worker process cannot reach the web process, so
pages also poll (`corpus:build_status`); a lost event therefore costs only latency.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from corpus.selectors import build_state

logger = logging.getLogger(__name__)


def corpus_group(corpus_id: int) -> str:
    return f"corpus-{corpus_id}"


def send_event(group: str, *, op: str, **payload: object) -> None:
    """Send {"type": "portal.event", "op": op, **payload} to a channel-layer group once the current
    transaction commits (at once outside one), so no listener hears of a row it cannot read yet,
    nor of one rolled back (as Zulip's send_event_on_commit). Never raises: a missing listener or a
    busy layer must not fail the work that reports progress."""
    transaction.on_commit(lambda: _send(group, {"type": "portal.event", "op": op, **payload}))


def _send(group: str, event: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    op = event["op"]
    try:
        async_to_sync(layer.group_send)(group, event)
    except Exception:  # noqa: BLE001 - events are best effort; the row holds the truth
        logger.warning("could not send %s event to %s", op, group, exc_info=True)


def send_build_event(build, *, op: str = "progress") -> None:  # corpus.models.IndexBuild
    send_event(corpus_group(build.corpus_id), op=op, build=build_state(build))
