"""The suite in several processes (pytest-xdist, `./portal test` runs `-n auto` unless told `-n`):
each worker gets its own Redis database and scratch DATA_DIR, so that one worker's cache clear,
Celery queue or channel groups never reach another's, and its share of the cores for its libraries'
thread pools. pytest-django gives each worker its own test database (`test_<name>_gw0`, ...); the
fixtures that make more PostgreSQL databases name them uniquely.

Loaded with `-p tests.plugins.workers` (pyproject's addopts), before pytest-django configures
the settings: the environment must be set before `hdrag_site.settings` reads it.
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from pathlib import Path
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


# Seconds each test file took (setup, call and teardown of its tests) on a 2-core machine with two
# workers: only the order files are handed out in depends on it. `--store-durations` writes it anew.
DURATIONS = Path(__file__).with_name("file_durations.json")
UNKNOWN_HEAVY_SECONDS = 10.0  # a file not in DURATIONS: this much per service or slow test it holds


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--store-durations", action="store_true",
                     help=f"write each test file's seconds of this run to {DURATIONS.name} (their order)")


def _file(nodeid: str) -> str:
    return nodeid.split("::")[0]


def _recorded() -> dict[str, float]:
    return json.loads(DURATIONS.read_text(encoding="utf-8")) if DURATIONS.is_file() else {}


# Last, after tests/plugins/tiers.py has marked the service tests.
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first (their seconds in DURATIONS; a file not there counts its service and
    slow tests at UNKNOWN_HEAVY_SECONDS each), whole: `--dist loadfile` hands out files in this order
    as workers come free (`./portal test` keeps it with --no-loadscope-reorder, which xdist would
    otherwise replace by the number of tests a file holds). The longest first is the classic rule
    for the shortest end: the last minutes are short files on both workers rather than one model's
    chain of turns on one while the other waits."""
    recorded = _recorded()
    heavy = Counter(_file(item.nodeid) for item in items
                    if item.get_closest_marker("service") or item.get_closest_marker("slow"))

    def seconds(item: pytest.Item) -> float:
        name = _file(item.nodeid)
        return recorded.get(name, heavy[name] * UNKNOWN_HEAVY_SECONDS)

    items.sort(key=lambda item: -seconds(item))


_seconds: defaultdict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _seconds[_file(report.nodeid)] += report.duration  # the controller sees every worker's reports


def pytest_sessionfinish(session: pytest.Session) -> None:
    if session.config.getoption("store_durations") and not hasattr(session.config, "workerinput"):
        recorded = _recorded()
        # A run of some files replaces their entries only.
        recorded.update((name, round(seconds, 1)) for name, seconds in _seconds.items())
        ordered = dict(sorted(recorded.items(), key=lambda pair: -pair[1]))
        DURATIONS.write_text(json.dumps(ordered, indent=0) + "\n", encoding="utf-8")
