"""Fixtures for the multi-vector store: an embedded Chroma per test and one real
`chroma run` server per session. Store tests run on both through `make_store`."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.llama_server import free_port
from engine.multivector import ChromaClient
from tests.plugins.waiting import wait_until

CHROMA_BIN = Path(sys.executable).with_name("chroma")
SERVER_START_S = 60.0


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a real Chroma server (`chroma run`) on a free port, for the whole session.

    Fails (never skips) when the server cannot start: the server path is a requirement.
    """
    if not CHROMA_BIN.exists():
        pytest.fail(f"the chroma CLI is missing at {CHROMA_BIN}; install chromadb into the venv")
    workdir = tmp_path_factory.mktemp("chroma-server")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = workdir / "server.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [
                str(CHROMA_BIN),
                "run",
                "--path",
                str(workdir / "data"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
        )
    try:
        def answering() -> bool:
            if server.poll() is not None:
                pytest.fail(f"chroma run exited with {server.returncode}:\n{log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=1):
                    return True
            except OSError:
                return False

        wait_until(answering, what=lambda: f"chroma run answering at {url}:\n{log_path.read_text()[-2000:]}",
                   timeout=SERVER_START_S, every=0.2)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


StoreFactory = Callable[..., ChromaClient]


@pytest.fixture(params=["embedded", "server"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """Factory of ChromaClient on the parametrised backend; fresh collections per call
    unless `name` repeats, so tests sharing the session server never see each other."""

    def make(storage_version: str = "1.0", dim: int = 768, name: str | None = None) -> ChromaClient:
        suffix = name or uuid.uuid4().hex[:12]
        options = dict(
            visual_collection=f"visual-{suffix}",
            text_collection=f"text-{suffix}",
            dim=dim,
            storage_version=storage_version,
        )
        if request.param == "embedded":
            return ChromaClient(path=tmp_path / "chroma", **options)
        return ChromaClient(url=request.getfixturevalue("chroma_server"), **options)

    return make


@pytest.fixture
def store(make_store: StoreFactory) -> ChromaClient:
    return make_store()
