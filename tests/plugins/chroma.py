"""Fixtures for the multi-vector store: an embedded Chroma per test and one real
`chroma run` server per session. Store tests run on both through `make_store`.

`ChromaServer` is one `chroma run` process on a port and a data directory of its own: the session's
server, and the servers the fault tests kill (SIGKILL, mid-request) and start again on the same
port and data directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from engine.llama_server import free_port
from engine.multivector import ChromaClient
from tests.plugins.waiting import wait_until

CHROMA_BIN = Path(sys.executable).with_name("chroma")
SERVER_START_S = 60.0


class ChromaServer:
    """A real Chroma server (`chroma run`) on 127.0.0.1:`port` storing into `workdir`/data.

    `start` fails the test (never skips) when the server does not answer: the server path is a
    requirement. It may be started again after `kill`, on the same port and data directory."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.workdir, self.port = workdir, port or free_port()
        self.log_path = workdir / "server.log"
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ChromaServer:
        if not CHROMA_BIN.exists():
            pytest.fail(f"the chroma CLI is missing at {CHROMA_BIN}; install chromadb into the venv")
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [str(CHROMA_BIN), "run", "--path", str(self.workdir / "data"), "--host", "127.0.0.1",
                 "--port", str(self.port)],
                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "ANONYMIZED_TELEMETRY": "False"})
        wait_until(self._answering, what=lambda: f"chroma run answering at {self.url}:\n{self._log_tail()}",
                   timeout=SERVER_START_S, every=0.2)
        return self

    def _answering(self) -> bool:
        if self.process.poll() is not None:
            pytest.fail(f"chroma run exited with {self.process.returncode}:\n{self._log_tail()}")
        try:
            with urllib.request.urlopen(f"{self.url}/api/v2/heartbeat", timeout=1):
                return True
        except OSError:
            return False

    def _log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:]

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, as a crash or an OOM kill."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    @contextmanager
    def killed_mid_request(self) -> Iterator[None]:
        """Kill the server while it holds the next request it receives, unanswered: stopped
        (SIGSTOP) on entry, it is sent SIGKILL once a request's bytes wait in one of its sockets,
        so the client's request is in flight when the server dies, whatever the machine's speed."""
        os.kill(self.process.pid, signal.SIGSTOP)
        failure: list[BaseException] = []

        def kill_when_asked() -> None:
            try:
                wait_until(self._request_waiting, what=f"a request waiting at the stopped server {self.url}")
            except BaseException as error:  # noqa: BLE001 - handed to the test's thread below
                failure.append(error)
            finally:
                self.kill()

        killer = threading.Thread(target=kill_when_asked, name="chroma-killer", daemon=True)
        killer.start()
        try:
            yield
        finally:
            killer.join()
        if failure:
            raise failure[0]

    def _request_waiting(self) -> bool:
        """Whether bytes wait unread in a connection to the server's port (/proc/net/tcp: local
        address, state 01 = established, rx_queue)."""
        local = f"0100007F:{self.port:04X}"
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[1] == local and fields[3] == "01" and int(fields[4].split(":")[1], 16) > 0:
                return True
        return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a real Chroma server (`chroma run`) on a free port, for the whole session."""
    server = ChromaServer(tmp_path_factory.mktemp("chroma-server"))
    try:
        yield server.start().url
    finally:
        server.stop()


@pytest.fixture
def own_chroma_server(tmp_path: Path) -> Iterator[ChromaServer]:
    """A `chroma run` of this test's own, started, for a test that kills it (the session's is shared)."""
    server = ChromaServer(tmp_path / "chroma-server")
    server.workdir.mkdir()
    try:
        yield server.start()
    finally:
        server.stop()


StoreFactory = Callable[..., ChromaClient]


@pytest.fixture(params=["embedded", pytest.param("server", marks=pytest.mark.service)])
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
