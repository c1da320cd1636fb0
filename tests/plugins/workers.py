"""The suite in several processes (pytest-xdist, `./portal test` runs `-n auto` unless told `-n`):
each worker gets its own Redis database and scratch DATA_DIR, so that one worker's cache clear,
Celery queue or channel groups never reach another's, and its share of the cores for its libraries'
thread pools. pytest-django gives each worker its own test database (`test_<name>_gw0`, ...); the
fixtures that make more PostgreSQL databases name them uniquely.

Loaded with `-p tests.plugins.workers` (pyproject's addopts), before pytest-django configures
the settings: the environment must be set before `hdrag_site.settings` reads it.
"""

from __future__ import annotations

import os
from collections import Counter
from urllib.parse import urlsplit, urlunsplit

import pytest

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


# The thread pools of torch (OpenMP), BLAS and numba, which size themselves to every core when first
# used: N workers on N cores would each run N threads, and OpenMP's waiting threads spin on the cores
# the other workers need. Each worker gets its share; a variable already set is left as it is.
THREAD_POOLS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")


def _share_cores() -> None:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    share = max(1, len(os.sched_getaffinity(0)) // workers)
    for name in THREAD_POOLS:
        os.environ.setdefault(name, str(share))


if (_number := worker_number()) is not None:
    _isolate(_number)
    _share_cores()


# Last, after tests/plugins/tiers.py has marked the service tests.
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files that hold service or slow tests (tens of seconds each: a real model's turns, a portal
    in processes, a build) go to the workers first, those with the most of them first, the many short
    files after: `--dist loadfile` hands out files in this order as workers come free, so the last
    minutes are short files on both workers rather than one long file on one while the other waits.
    A file stays whole and in its order."""
    heavy = Counter(item.nodeid.split("::")[0] for item in items
                    if item.get_closest_marker("service") or item.get_closest_marker("slow"))
    items.sort(key=lambda item: -heavy[item.nodeid.split("::")[0]])
