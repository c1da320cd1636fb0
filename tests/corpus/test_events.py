"""Build progress over websockets: readers of the corpus receive events, outsiders cannot connect."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from corpus.events import send_build_event
from corpus.models import IndexBuild
from hdrag_site.asgi import application


async def _connect(client, corpus_id: int) -> tuple[WebsocketCommunicator, bool]:  # noqa: ANN001
    cookie = client.cookies["sessionid"].value
    communicator = WebsocketCommunicator(application, f"/ws/corpora/{corpus_id}/builds/",
                                         headers=[(b"cookie", f"sessionid={cookie}".encode()),
                                                  (b"origin", b"http://localhost"), (b"host", b"localhost")])
    connected, _ = await communicator.connect()
    return communicator, connected


@pytest.mark.django_db(transaction=True)
async def test_member_receives_progress_and_outsider_is_refused(corpus, member, outsider, client_for):
    member_client = await sync_to_async(client_for)(member)
    outsider_client = await sync_to_async(client_for)(outsider)
    watcher, connected = await _connect(member_client, corpus.pk)
    assert connected
    intruder, intruder_connected = await _connect(outsider_client, corpus.pk)
    assert intruder_connected  # like the chat: accepted, so the page can read the close code
    assert await intruder.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}
    build = await IndexBuild.objects.acreate(corpus=corpus, status=IndexBuild.Status.RUNNING, phase="encode",
                                             done=30, total=120)
    await sync_to_async(send_build_event)(build, op="progress")
    event = await watcher.receive_json_from(timeout=5)
    assert event["op"] == "progress" and "type" not in event
    # One bar for the whole build: encoding a quarter through, after the phases before it (41 %).
    assert event["build"] == {
        **event["build"],
        "id": build.pk,
        "number": 1,
        "status": "running",
        "phase": "encode",
        "done": 30,
        "total": 120,
        "percent": 51,
    }
    await watcher.disconnect()
    await intruder.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_events_wait_for_the_commit_and_are_plain_json(corpus, member, client_for):
    """An event sent inside a transaction reaches listeners only once it commits (never for a
    rollback), and what arrives is JSON (dates, decimals or models would not survive the trip)."""
    import json

    from django.db import transaction

    from corpus.events import corpus_group, send_event

    watcher, connected = await _connect(await sync_to_async(client_for)(member), corpus.pk)
    assert connected

    def inside_a_transaction(commit: bool) -> None:
        try:
            with transaction.atomic():
                send_event(corpus_group(corpus.pk), op="probe", committed=commit)
                assert watcher.output_queue.empty()  # nothing leaves before the commit
                if not commit:
                    raise RuntimeError("roll back")
        except RuntimeError:
            pass

    await sync_to_async(inside_a_transaction)(False)
    await sync_to_async(inside_a_transaction)(True)
    build = await IndexBuild.objects.acreate(corpus=corpus, status=IndexBuild.Status.QUEUED)
    await sync_to_async(send_build_event)(build, op="started")
    received = [await watcher.receive_json_from(timeout=5) for _ in range(2)]
    assert [e["op"] for e in received] == ["probe", "started"] and received[0]["committed"] is True
    for event in received:
        assert json.loads(json.dumps(event)) == event
    assert await watcher.receive_nothing(timeout=0.5)
    await watcher.disconnect()
