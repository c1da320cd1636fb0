"""A real Prometheus (Debian's `prometheus`, which `./portal test` installs) scrapes the live portal's
/metrics with the bearer token, and a query returns the chat turns after they ran through the
conversations API on the real llama.cpp server. Loopback only."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from accounts.services.tokens import api_token_create
from engine.llama_server import free_port
from tests.plugins.chat import make_corpus
from tests.plugins.waiting import wait_for_server, wait_until

pytestmark = pytest.mark.service
TOKEN = "prometheus-scrape-token-0123456789abcdef"
TURNS = ("What does a generator function return when it is called?", "How do I sort a list in place?")


@pytest.fixture
def prometheus(live_api, settings, tmp_path: Path):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail(
            "no prometheus binary (apt-get install prometheus; ./portal test installs it)", pytrace=False
        )
    settings.METRICS_TOKEN = TOKEN
    target = live_api.url.removeprefix("http://")
    config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
              "scrape_configs": [{"job_name": "hdrag", "metrics_path": "/metrics",
                                  "authorization": {"type": "Bearer", "credentials": TOKEN},
                                  "static_configs": [{"targets": [target]}]}]}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log_path = tmp_path / "prometheus.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [
                binary,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_server(server, port, name="prometheus", log_path=log_path, timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def _query(prometheus: str, expression: str) -> float | None:
    result = httpx.get(f"{prometheus}/api/v1/query", params={"query": expression}, timeout=10).json()
    assert result["status"] == "success", result
    values = result["data"]["result"]
    return float(values[0]["value"][1]) if values else None


def test_prometheus_scrapes_the_turn_count_after_turns(
    chat_settings, prometheus, live_api, owner, pydoc_build
):
    wait_until(lambda: _query(prometheus, 'up{job="hdrag"}') == 1.0, what="Prometheus scraping the portal",
               timeout=60, every=0.5)
    # The counters are this process's: earlier tests in it may have counted turns already.
    turns, first_tokens = (_query(prometheus, f"sum({name})") or 0.0 for name in (
        'hdrag_chat_turns_total{surface="chat"}', "hdrag_chat_time_to_first_token_seconds_count"))
    corpus = make_corpus(owner, pydoc_build)
    secret = api_token_create(user=owner, name="prometheus test")[1]
    base = f"{live_api.url}/api/v1"
    with httpx.Client(headers={"Authorization": f"Bearer {secret}"}, timeout=120) as http:
        conversation = http.post(f"{base}/conversations/", json={"corpora": [corpus.pk]}).json()["id"]
        for question in TURNS:
            turn = http.post(f"{base}/conversations/{conversation}/messages/", json={"content": question})
            assert turn.status_code == 201, turn.text
    wait_until(
        lambda: _query(prometheus, 'sum(hdrag_chat_turns_total{surface="chat"})') == turns + len(TURNS),
        what=f"Prometheus reading {len(TURNS)} more chat turns",
        timeout=60,
        every=0.5,
    )
    assert _query(prometheus, "sum(hdrag_chat_time_to_first_token_seconds_count)") == first_tokens + len(
        TURNS
    )
    assert _query(prometheus, "hdrag_chat_turns_queued") == 0.0
