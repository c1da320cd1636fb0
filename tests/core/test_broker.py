"""The embedded mode's Celery broker (core.broker): kombu's filesystem transport whose messages
appear in the queue folder only whole, so a worker never reads a half-written one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from kombu import Connection

from core.broker import FilesystemTransport

REPO = Path(__file__).resolve().parents[2]


def _connection(root: Path) -> Connection:
    return Connection(transport=FilesystemTransport, transport_options={
        "data_folder_in": str(root / "queue"), "data_folder_out": str(root / "queue"),
        "staging_folder": str(root / "staging"), "control_folder": str(root / "control"),
        "processed_folder": str(root / "processed"), "store_processed": False})


def test_messages_sent_while_a_consumer_drains_arrive_whole_and_once(tmp_path):
    for folder in ("queue", "staging", "control", "processed"):
        (tmp_path / folder).mkdir()
    count, seen, bad = 300, [], []

    def watch() -> None:
        """What a worker's listing can see: every message file in the queue folder is whole."""
        while len(seen) < count:
            for name in os.listdir(tmp_path / "queue"):
                try:
                    data = (tmp_path / "queue" / name).read_bytes()
                except FileNotFoundError:
                    continue  # taken by the consumer meanwhile
                try:
                    json.loads(data)
                except ValueError:
                    bad.append((name, data))

    with _connection(tmp_path) as producer_side, _connection(tmp_path) as consumer_side:
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        queue_in = consumer_side.SimpleQueue("jobs")
        producer = threading.Thread(target=lambda: [producer_side.SimpleQueue("jobs").put({"n": i})
                                                    for i in range(count)])
        producer.start()
        for _ in range(count):
            message = queue_in.get(timeout=60)
            seen.append(message.payload["n"])
            message.ack()
        producer.join(60)
        watcher.join(60)
    # Order within one millisecond is by a random name, as with kombu's own: none lost, none twice.
    assert sorted(seen) == list(range(count))
    assert bad == []
    assert list((tmp_path / "staging").iterdir()) == []


def test_the_embedded_settings_use_it():
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    script = ("import django; django.setup(); from hdrag_site.celery import app; "
              "print(app.connection_for_write().get_transport_cls().__module__)")
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "DJANGO_SETTINGS_MODULE": "hdrag_site.settings"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "core.broker"
