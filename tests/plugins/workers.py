"""The suite in several processes (pytest-xdist, `./portal test` runs `-n auto` unless told `-n`):
each worker gets its own Redis database and scratch DATA_DIR, so that one worker's cache clear,
Celery queue or channel groups never reach another's. pytest-django gives each worker its own
test database (`test_<name>_gw0`, ...); the fixtures that make more PostgreSQL databases name
them uniquely.

Loaded with `-p tests.plugins.workers` (pyproject's addopts), before pytest-django configures
the settings: the environment must be set before `hdrag_site.settings` reads it.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

REDIS_DATABASES = 16  # Redis's default `databases`


def worker_number() -> int | None:
    """This process's xdist worker number (gw0: 0), None without xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ...; unset without xdist
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None


def redis_url_for_worker(url: str, number: int) -> str:
    """`url` with its database number moved up by `number` (wrapping at 16): worker 0 keeps it."""
    parts = urlsplit(url)
    path = parts.path.strip("/")
    base = int(path) if path.isdigit() else 0
    return urlunsplit(parts._replace(path=f"/{(base + number) % REDIS_DATABASES}"))


# The environment as the suite was started with, before this worker's share was taken.
STARTED_WITH = {name: os.environ.get(name, "") for name in ("REDIS_URL", "LLM_QUEUE_REDIS_URL", "DATA_DIR")}


def _isolate(number: int) -> None:
    for name in ("REDIS_URL", "LLM_QUEUE_REDIS_URL"):
        if os.environ.get(name):
            os.environ[name] = redis_url_for_worker(os.environ[name], number)
    if os.environ.get("DATA_DIR"):
        os.environ["DATA_DIR"] = f"{os.environ['DATA_DIR'].rstrip('/')}-gw{number}"


if (_number := worker_number()) is not None:
    _isolate(_number)
