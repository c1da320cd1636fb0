"""`./portal run` starts its own llama.cpp only when the portal serves the model itself: with
`LLM_SERVERS` (and no `LLM_BASE_URL`) the deployment named its servers, and no local llama.cpp takes
its RAM and cores. Driven through the real `./portal run` (migrate, collectstatic, bootstrap,
supervise) with a Procfile of stand-ins, as tests/site/test_supervisor.py does: the llama stand-in
says it started, the web stand-in reports the LLM settings it runs with and exits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Tens of seconds of CPU each, no service: out of the quick tier (`./portal test --quick`).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PORTAL = REPO / "portal"
VENV = Path(sys.executable).parent.parent
# Nothing listens on port 9: the stand-ins only report the setting, nothing is asked of it.
SERVERS = json.dumps([{"url": "http://127.0.0.1:9", "model": "qwen", "slots": 2}])


def _portal_run(tmp_path: Path, **llm: str) -> str:
    procfile = tmp_path / "Procfile"
    report = ("exec \"$PY\" -c \"import django; django.setup(); from django.conf import settings; "
              "print('llm at', settings.LLM_BASE_URL, 'servers', settings.LLM_SERVERS)\"")
    procfile.write_text(f"llama: echo llama stand-in started on $GGUF; exec sleep 300\n"
                        f"worker: exec sleep 300\n"
                        f"meaning: exec sleep 300\n"
                        f"web: sleep 1; {report}\n")
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("DEBUG", "DATABASE_URL", "REDIS_URL", "LLM_BASE_URL", "LLM_SERVERS")}
    environment.update(VENV=str(VENV), PROCFILE=str(procfile), DATA_DIR=str(tmp_path / "data"),
                       HDRAG_ADMIN_PASSWORD="a-test-password-123", LLAMA_PORT="8089",
                       CHAT_GGUF_PATH=str(tmp_path / "chat.gguf"), **llm)
    portal = subprocess.run([str(PORTAL), "run"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=environment, timeout=300)
    return portal.stdout


@pytest.mark.parametrize(("llm", "starts_llama"), [
    ({"LLM_SERVERS": SERVERS}, False),
    ({}, True),
], ids=["llm-servers-alone", "no-server-named"])
def test_portal_run_starts_llama_only_when_it_serves_the_model_itself(tmp_path, llm, starts_llama):
    output = _portal_run(tmp_path, **llm)
    assert "web stopped (rc=0)" in output, output
    starting = next(line for line in output.splitlines() if line.startswith("portal: starting"))
    assert ("llama" in starting.split()) is starts_llama, output
    assert ("llama stand-in started" in output) is starts_llama, output
    if starts_llama:
        assert f"llama stand-in started on {tmp_path / 'chat.gguf'}" in output
        assert "llm at http://127.0.0.1:8089 servers" in output, output  # the portal's own llama.cpp
    else:
        assert f"servers {SERVERS}" in output, output
