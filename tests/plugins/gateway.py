"""A real OpenAI-compatible gateway in front of the session's llama.cpp: LiteLLM's proxy (pinned in
gateway-requirements.txt, installed by `./portal test` into a virtualenv of its own, `GATEWAY_VENV`:
its proxy extras pin websockets, rich and uvloop below the portal's). It offers only the standard
OpenAI endpoints (no `/tokenize`, no `/apply-template`) and requires its key, as a team's gateway
does. If it cannot start, every test using it fails with its log tail: never a skip."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from engine.llama_server import LlamaServer, free_port
from tests.plugins.waiting import wait_until

GATEWAY_KEY = "sk-gateway-llmservers-5e1d7b"  # the gateway's master key: the one key it takes
GATEWAY_MODEL = "hdrag-chat"  # the name the gateway serves llama.cpp's model under
STARTUP_SECONDS = 180  # importing the proxy takes 20 s on a quiet 2-core machine


@dataclass(frozen=True)
class Gateway:
    base_url: str
    key: str
    model: str
    log: Path


def gateway_venv() -> Path:
    return Path(os.environ.get("GATEWAY_VENV") or f"{sys.prefix}-gateway")


def _wait_live(process: subprocess.Popen, url: str, log: Path) -> None:
    def live() -> bool:
        if process.poll() is not None:
            pytest.fail(
                f"the gateway exited with {process.returncode}:\n{log.read_text()[-3000:]}", pytrace=False
            )
        try:
            return httpx.get(f"{url}/health/liveliness", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(
        live,
        what=lambda: f"the gateway at {url} up:\n{log.read_text()[-3000:]}",
        timeout=STARTUP_SECONDS,
        every=0.5,
    )


@contextmanager
def running_gateway(api_base: str) -> Iterator[Gateway]:
    """LiteLLM's proxy on a free loopback port, serving the OpenAI-compatible server at `api_base`
    (its `/v1`) as `GATEWAY_MODEL` to clients that send `GATEWAY_KEY` (no database: that key only).

    It runs in a session of its own under `exit_with_parent.py`, which ends it when the tests'
    process dies without a teardown; the teardown ends its whole process group."""
    command = gateway_venv() / "bin" / "litellm"
    if not command.exists():
        pytest.fail(
            f"no gateway at {command}: run ./portal test "
            "(it installs tests/plugins/gateway-requirements.txt)",
            pytrace=False,
        )
    folder = Path(tempfile.mkdtemp(prefix="llm-gateway-"))
    # disable_aiohttp_transport: with LiteLLM's default aiohttp transport, a server that dies mid-stream
    # ends the stream as if the answer were finished ("stop", usage and [DONE]); with httpx's, the
    # client gets an error event (docs/llm-servers.md).
    config = {"model_list": [{"model_name": GATEWAY_MODEL, "litellm_params": {
                  "model": "openai/served", "api_base": api_base, "api_key": "none"}}],
              "general_settings": {"master_key": "os.environ/LITELLM_MASTER_KEY"},
              "litellm_settings": {"telemetry": False, "disable_aiohttp_transport": True}}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = folder / "gateway.log"
    # The model price list from the package, not fetched at start (nothing is downloaded at run time);
    # no DATABASE_URL (the portal's: LiteLLM would take it for its own and need Prisma).
    env = {
        **{name: value for name, value in os.environ.items() if name != "DATABASE_URL"},
        "LITELLM_MASTER_KEY": GATEWAY_KEY,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_TELEMETRY": "False",
    }
    guard = Path(__file__).with_name("exit_with_parent.py")
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                str(gateway_venv() / "bin" / "python"),
                str(guard),
                str(command),
                "--config",
                str(folder / "config.yaml"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=folder,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_live(process, url, log)
        yield Gateway(base_url=url, key=GATEWAY_KEY, model=GATEWAY_MODEL, log=log)
    finally:
        _end_group(process)


def _end_group(process: subprocess.Popen) -> None:
    """SIGTERM to the gateway's whole process group; SIGKILL to what is left of it after 15 s."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        process.wait(15)
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@pytest.fixture(scope="session")
def llm_gateway(llama_server: LlamaServer) -> Iterator[Gateway]:
    """The gateway in front of the session's llama.cpp (`running_gateway`)."""
    with running_gateway(f"{llama_server.base_url}/v1") as gateway:
        yield gateway
