"""The two tiers of the suite: the `service` marker, given at collection to every test that needs a
service, so that `-m "not service"` (the fast tier) runs without PostgreSQL, Redis, llama.cpp, a Chroma
server, the S3 store, the LLM gateway, Node or Chromium.

A test is a service test when its fixture closure holds one of SERVICE_FIXTURES, when it is a browser
test, or when it is marked by hand (a test that starts a service itself, a fixture parameter that
reaches one). tests/test_service_marker.py holds the list and the hand marks true.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

# Every fixture that starts or reaches a service: the shared ones of tests/plugins/ and the browser
# tests, and the test modules' own that start a server of their own.
SERVICE_FIXTURES = frozenset({
    "llama_server", "chat_llama_server",  # llama.cpp (tests/plugins/llama.py)
    "e2e_database", "redis_url",  # PostgreSQL, Redis (tests/plugins/services.py)
    "own_redis",  # a redis-server of its own (tests/chat/llm/test_queue_redis.py)
    "s3_server",  # rclone serve s3 (tests/plugins/s3.py)
    "oidc_provider",  # Node (tests/plugins/oidc.py)
    "llm_gateway",  # the gateway's own virtualenv (tests/plugins/gateway.py)
    "chroma_server", "own_chroma_server",  # chroma run (tests/plugins/chroma.py)
    "live_portal", "browser",  # a portal in processes and Chromium (tests/e2e/browser/conftest.py)
    "keyed_server",  # tests/engine/test_llm_access.py
    "two_servers",  # tests/chat/test_servers.py
    "own_llm",  # tests/chat/test_llm_killed.py
})
BROWSER_TESTS = Path(__file__).resolve().parents[1] / "e2e" / "browser"
# Set by tests/test_service_marker.py for the collection it runs: where this plugin writes what it saw.
COLLECTED_FILE_VARIABLE = "HDRAG_COLLECTED_FILE"


@dataclass(frozen=True)
class Collected:
    """One collected test, as it is before `-m` deselects anything."""

    nodeid: str
    path: str
    function: str
    fixtures: tuple[str, ...]
    marks: tuple[str, ...]


COLLECTED = pytest.StashKey[list[Collected]]()


def _service_fixtures_of(item: pytest.Item) -> set[str]:
    return SERVICE_FIXTURES.intersection(getattr(item, "fixturenames", ()))


# First, so that the marks are given before `-m` deselects by them.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(BROWSER_TESTS):
            item.add_marker(pytest.mark.browser)
            item.add_marker(pytest.mark.service)
        elif _service_fixtures_of(item):
            item.add_marker(pytest.mark.service)
    collected = [Collected(item.nodeid, str(item.path), getattr(item, "originalname", item.name),
                           tuple(sorted(getattr(item, "fixturenames", ()))),
                           tuple(sorted({mark.name for mark in item.iter_markers()}))) for item in items]
    config.stash[COLLECTED] = collected
    if target := os.environ.get(COLLECTED_FILE_VARIABLE):
        Path(target).write_text(json.dumps([asdict(each) for each in collected]))


def collected_read(path: Path) -> list[Collected]:
    """What a collection run with COLLECTED_FILE_VARIABLE set wrote."""
    return [Collected(**{key: tuple(value) if isinstance(value, list) else value
                         for key, value in each.items()}) for each in json.loads(path.read_text())]
