"""`./portal run` supervises its processes with honcho: one that exits stops all of them and is named,
and Ctrl-C / SIGTERM leave no process behind. Real processes (sleep, sh), started through the same
`supervise` function that `./portal run` ends with; the last test goes through `./portal run` itself
with a Procfile of stand-ins, since the real llama/worker/web start takes minutes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.plugins.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
PORTAL = REPO / "portal"
VENV = Path(sys.executable).parent.parent


def _portal(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([str(PORTAL), *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "VENV": str(VENV), **(env or {})})


def _pids(directory: Path, names: list[str], *, every: float = 0.1) -> dict[str, int]:
    files = {name: directory / f"{name}.pid" for name in names}

    def started() -> dict[str, int] | None:
        if all(f.exists() and f.read_text().strip() for f in files.values()):
            return {name: int(f.read_text()) for name, f in files.items()}
        return None

    return wait_until(started, what=lambda: f"all of {names} started (pid files: "
                                            f"{sorted(p.name for p in directory.iterdir())})", every=every)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; only its parent has not collected it yet.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


def _procfile(tmp_path: Path, **entries: str) -> Path:
    procfile = tmp_path / "Procfile"
    procfile.write_text("".join(f"{name}: {command}\n" for name, command in entries.items()))
    return procfile


def _long_running(tmp_path: Path) -> dict[str, str]:
    """A plain process, and a shell whose own child would outlive it if only the shell were signalled."""
    return {
        "sleeper": f"echo $$ > {tmp_path}/sleeper.pid; exec sleep 300",
        "parent": f"sleep 300 & echo $! > {tmp_path}/grandchild.pid; echo $$ > {tmp_path}/parent.pid; wait",
    }


def test_one_process_exiting_stops_all_and_is_named(tmp_path):
    procfile = _procfile(tmp_path, **_long_running(tmp_path), dier="sleep 2; exit 3")
    portal = _portal("supervise", str(procfile))
    pids = _pids(tmp_path, ["sleeper", "parent", "grandchild"])
    output, _ = portal.communicate(timeout=30)
    assert portal.returncode == 3, output
    assert "dier.1 stopped (rc=3)" in output
    assert not [name for name, pid in pids.items() if _alive(pid)], output


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_portal_leaves_no_process_behind(tmp_path, signum):
    entries = _long_running(tmp_path)
    # One that ignores SIGTERM: honcho kills its process group after its 5 s grace.
    entries["stubborn"] = f"trap '' TERM; echo $$ > {tmp_path}/stubborn.pid; while :; do sleep 1; done"
    portal = _portal("supervise", str(_procfile(tmp_path, **entries)))
    pids = _pids(tmp_path, ["sleeper", "parent", "grandchild", "stubborn"])
    assert all(_alive(pid) for pid in pids.values())
    started = time.monotonic()
    portal.send_signal(signum)
    output, _ = portal.communicate(timeout=30)
    assert time.monotonic() - started < 15, output
    assert f"{signal.Signals(signum).name} received" in output
    assert "Traceback" not in output, output
    assert not [name for name, pid in pids.items() if _alive(pid)], output


@pytest.mark.parametrize("attempt", range(4))
def test_a_signal_before_the_supervisor_has_seen_every_start(tmp_path, attempt):
    """A signal the moment the first process runs, before honcho's loop has read the start events:
    honcho 2.0.0's own handler fails there with KeyError('pid') and hangs on its children (4 times
    in 4 when tried); scripts/supervise.py acts on the signal in its loop instead."""
    entries = {name: f"echo $$ > {tmp_path}/{name}.pid; exec sleep 300" for name in ("first", "second", "third")}
    portal = _portal("supervise", str(_procfile(tmp_path, **entries)))
    _pids(tmp_path, ["first"], every=0.002)
    portal.send_signal(signal.SIGTERM)
    output, _ = portal.communicate(timeout=30)
    assert "Traceback" not in output, output
    left = [f.stem for f in tmp_path.glob("*.pid") if f.read_text().strip() and _alive(int(f.read_text()))]
    assert not left, output


def test_portal_run_supervises_its_procfile_with_debug_off(tmp_path):
    """The real `./portal run` path (migrate, collectstatic, bootstrap, supervise) with stand-ins for
    the worker and the web server: the web stand-in reports the settings it runs with (debug off,
    the machine's own host names when served to the LAN) and exits, which stops the worker stand-in."""
    report = ("exec \"$PY\" -c \"import django; django.setup(); from django.conf import settings; "
              "print('debug', settings.DEBUG, 'at', settings.LLM_BASE_URL, 'hosts', settings.ALLOWED_HOSTS)\"")
    procfile = _procfile(tmp_path, worker=f"echo $$ > {tmp_path}/worker.pid; exec sleep 300", web=f"sleep 1; {report}",
                         llama="echo llama must not start when LLM_BASE_URL is set")
    # SQLite, the filesystem broker and the default DEBUG: what a fresh checkout runs with.
    environment = {key: value for key, value in os.environ.items() if key not in ("DEBUG", "DATABASE_URL", "REDIS_URL")}
    environment.update(VENV=str(VENV), PROCFILE=str(procfile), DATA_DIR=str(tmp_path / "data"),
                       LLM_BASE_URL="http://127.0.0.1:9", HDRAG_ADMIN_PASSWORD="a-test-password-123",
                       HOST="0.0.0.0")  # served to the LAN: the machine's own names become allowed hosts
    portal = subprocess.Popen([str(PORTAL), "run"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=environment)
    output, _ = portal.communicate(timeout=300)
    assert "debug False at http://127.0.0.1:9" in output, output
    assert f"'{socket.gethostname()}'" in output.split("hosts", 1)[1].splitlines()[0]
    assert "web.1 stopped (rc=0)" in output and "llama must not start" not in output
    assert not _alive(int((tmp_path / "worker.pid").read_text()))
