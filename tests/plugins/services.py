"""The services of the environment (PostgreSQL of DATABASE_URL, Redis of REDIS_URL: fail, never
skip, when unreachable) and the real Celery worker on them, for the tests that run portal processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
import redis

ROOT = Path(__file__).resolve().parents[2]
PG_URL = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres"
REDIS_URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"

def e2e_env(database: str, redis_url: str, queue: str, data_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a portal process (web, driver or worker) in these tests."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "hdrag_site.settings",
        "HDRAG_ENV": "development",
        "DATABASE_URL": database,
        "REDIS_URL": redis_url,
        "CELERY_QUEUE": queue,
        "CELERY_TASK_ALWAYS_EAGER": "0",
        "DATA_DIR": str(data_dir),
        "PYTHONPATH": str(ROOT),
        **extra,
    }


def migrate(env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=300,
    )


@contextmanager
def celery_worker(env: dict[str, str], log_path: Path, *options: str) -> Iterator[subprocess.Popen]:
    """A real Celery worker on `env`'s queue, logging to `log_path`, stopped (SIGTERM to its process
    group, then waited for) when the block ends."""
    with open(log_path, "wb") as log:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "hdrag_site",
                "worker",
                "-Q",
                env["CELERY_QUEUE"],
                *options,
                "--without-gossip",
                "--without-mingle",
                "-l",
                "info",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield worker
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)


def _with_database(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


@pytest.fixture
def e2e_database():
    """A fresh PostgreSQL database on the server of DATABASE_URL, dropped afterwards."""
    name = f"hdrag_e2e_{uuid.uuid4().hex[:10]}"
    admin_url = _with_database(PG_URL, "postgres")
    try:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as error:
        pytest.fail(f"PostgreSQL at {admin_url} is unreachable: {error}", pytrace=False)
    yield _with_database(PG_URL, name)
    with psycopg.connect(admin_url, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def redis_url() -> str:
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=5).ping()
    except redis.exceptions.ConnectionError as error:
        pytest.fail(f"Redis at {REDIS_URL} is unreachable: {error}", pytrace=False)
    return REDIS_URL


def redis_namespaces_delete(redis_url: str, namespaces: Iterable[str]) -> None:
    """Delete every key of the LLM queues' `namespaces` (what a test's queues left in Redis)."""
    client = redis.Redis.from_url(redis_url)
    for namespace in set(namespaces):
        keys = list(client.scan_iter(match=f"{namespace}:*"))
        if keys:
            client.delete(*keys)
