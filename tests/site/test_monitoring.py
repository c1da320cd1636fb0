"""/metrics and /healthz/dependencies (hdrag_site.monitoring): closed to anyone without the token or
an allowed address, the counters and the database's numbers a scrape returns, and which dependency
is down. The down ones are real: a port nobody listens on, a bucket the real S3 server lacks."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from engine.llama_server import free_port
from tests.plugins.portal import build_now, login

TOKEN = "monitoring-token-for-tests-0123456789"


def _sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample `name{labels...}` in Prometheus text, None when absent."""
    for line in text.splitlines():
        match = re.fullmatch(rf"{re.escape(name)}(?:{{(.*)}})? (\S+)", line)
        if match and all(f'{key}="{value}"' in (match.group(1) or "") for key, value in labels.items()):
            return float(match.group(2))
    return None


@pytest.fixture
def monitoring(settings):
    settings.METRICS_TOKEN, settings.METRICS_ALLOWED_NETWORKS = TOKEN, []
    return settings


@pytest.mark.parametrize("path", ["/metrics", "/healthz/dependencies"])
def test_closed_without_the_token_or_an_allowed_address(db, settings, path, owner, staff):
    settings.METRICS_TOKEN, settings.METRICS_ALLOWED_NETWORKS = "", []
    assert Client().get(path, HTTP_AUTHORIZATION="Bearer ").status_code == 403
    settings.METRICS_TOKEN = TOKEN
    for client in (Client(), login(owner), login(staff)):  # a login is no monitoring credential
        assert client.get(path).status_code == 403
    assert Client().get(path, HTTP_AUTHORIZATION=f"Bearer {TOKEN}x").status_code == 403
    assert Client().get(path, HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code in (200, 503)
    assert b"hdrag" not in Client().get(path).content


def test_an_allowed_network_reads_without_a_token_and_a_proxied_client_does_not(db, settings):
    settings.METRICS_TOKEN, settings.METRICS_ALLOWED_NETWORKS = "", ["10.20.0.0/16"]
    assert Client(REMOTE_ADDR="10.20.3.4").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="10.21.3.4").get("/metrics").status_code == 403
    # Behind a trusted proxy the client is the forwarded address, not the proxy's.
    settings.TRUSTED_PROXIES = ["10.20.0.1"]
    proxied = Client(REMOTE_ADDR="10.20.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9")
    assert proxied.get("/metrics").status_code == 403


def test_requests_are_timed_by_route_pattern_never_by_the_path_sent(monitoring, owner, corpus, client_for):
    page = client_for(owner)
    assert page.get(f"/corpora/{corpus.pk}/").status_code == 200
    assert page.get("/no/such/page/12345/").status_code == 404
    text = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
    assert _sample(text, "hdrag_http_request_duration_seconds_count", route="corpora/<int:pk>/",
                   method="GET", status="2xx") >= 1
    assert _sample(text, "hdrag_http_request_duration_seconds_count", route="unmatched", status="4xx") >= 1
    routes = set(re.findall(r'route="([^"]*)"', text))
    assert "no/such/page" not in text and f"corpora/{corpus.pk}/" not in routes


def test_builds_and_searches_are_counted(monitoring, data_dir, celery_eager, owner, corpus, dataset,
                                         django_capture_on_commit_callbacks, client_for):
    before = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
    searches = _sample(before, "hdrag_search_duration_seconds_count") or 0.0
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == "succeeded"
    assert (
        client_for(owner).get("/memory/search/", {"q": "binary search", "corpora": corpus.pk}).status_code
        == 200
    )
    text = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
    assert _sample(text, "hdrag_build_duration_seconds_count", kind="build", status="succeeded") == 1.0
    seconds = _sample(text, "hdrag_build_duration_seconds_sum", kind="build", status="succeeded")
    assert seconds == pytest.approx((build.finished - build.started).total_seconds(), abs=0.01)
    assert _sample(text, "hdrag_search_duration_seconds_count") >= searches + 1
    assert _sample(text, "hdrag_chat_turns_queued") == 0.0


def _states(response) -> dict[str, dict]:  # noqa: ANN001
    return {state["name"]: state for state in response.json()["dependencies"]}


def test_dependencies_say_which_one_is_down(monitoring, db):
    closed = free_port()
    monitoring.LLM_SERVERS, monitoring.LLM_BASE_URL, monitoring.LLM_API_KEY = (
        "",
        f"http://127.0.0.1:{closed}",
        "k3y",
    )
    response = Client().get("/healthz/dependencies", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 503 and response.json()["status"] == "down"
    states = _states(response)
    assert states["database"]["up"] is True
    assert states["llm"]["up"] is False and states["llm"]["error"] == "ConnectError"
    assert str(closed) in states["llm"]["target"] and "k3y" not in response.content.decode()


@pytest.mark.service
def test_every_dependency_up_then_the_broker_and_the_store_down(
    monitoring, db, llama_server, s3_server, s3_prefix, monkeypatch
):
    from tests.plugins.services import REDIS_URL

    for name, value in s3_server.env(s3_prefix).items():
        monkeypatch.setenv(name, value)
    monitoring.BUILD_STORAGE_URL = f"s3://hdrag/{s3_prefix}"
    monitoring.CELERY_BROKER_URL = REDIS_URL
    monitoring.LLM_SERVERS, monitoring.LLM_BASE_URL = "", llama_server.base_url
    response = Client().get("/healthz/dependencies", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    assert {name: state["up"] for name, state in _states(response).items()} == {
        "database": True, "broker": True, "llm": True, "object_store": True}
    monitoring.BUILD_STORAGE_URL = "s3://no-such-bucket/x"
    monitoring.CELERY_BROKER_URL = f"redis://127.0.0.1:{free_port()}/0"
    states = _states(Client().get("/healthz/dependencies", HTTP_AUTHORIZATION=f"Bearer {TOKEN}"))
    assert (states["broker"]["up"], states["object_store"]["up"], states["llm"]["up"]) == (False, False, True)
