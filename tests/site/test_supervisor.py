"""`./portal run` supervises its processes with scripts/supervise.py: a main process killed with
SIGKILL is noticed within 5 s even while its children hold its output, its process group goes with it,
and it is restarted or all stop and it is named; Ctrl-C / SIGTERM leave no process behind. Real
processes (sleep and sh stand-ins), started through the same `supervise` function that `./portal run`
ends with; the last test goes through `./portal run` itself with a Procfile of stand-ins, since the
real llama/worker/web start takes minutes (tests/e2e/test_supervised_worker.py runs a real worker)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.plugins.supervised import ROOT, VENV, Supervised, group_members, pid_alive
from tests.plugins.waiting import wait_until

THREE = ("llama", "worker", "web")  # what `./portal run` starts, and restarts when they crash
DETECTION_SECONDS = 5.0


def _pids(directory: Path, names: list[str], *, every: float = 0.05, other_than: int = 0) -> dict[str, int]:
    files = {name: directory / f"{name}.pid" for name in names}

    def started() -> dict[str, int] | None:
        pids = {name: f.read_text().strip() if f.exists() else "" for name, f in files.items()}
        if all(pids.values()) and other_than not in {int(pid) for pid in pids.values()}:
            return {name: int(pid) for name, pid in pids.items()}
        return None

    return wait_until(started, what=lambda: f"all of {names} started (pid files: "
                                            f"{sorted(p.name for p in directory.iterdir())})", every=every)


def _procfile(tmp_path: Path, **entries: str) -> Path:
    procfile = tmp_path / "Procfile"
    procfile.write_text("".join(f"{name}: {command}\n" for name, command in entries.items()))
    return procfile


def _holding_output(tmp_path: Path, name: str) -> str:
    """A stand-in whose child keeps the output pipe open after its main process is killed, as a Celery
    worker's beat and pool children do; it says it is ready and writes its pid once it has started."""
    return (f"sleep 300 & echo $! > {tmp_path}/{name}-child.pid; echo {name} ready; "
            f"echo $$ > {tmp_path}/{name}.pid; exec sleep 300")


def _long_running(tmp_path: Path) -> dict[str, str]:
    """A plain process, and a shell whose own child would outlive it if only the shell were signalled."""
    return {
        "sleeper": f"echo $$ > {tmp_path}/sleeper.pid; exec sleep 300",
        "parent": f"sleep 300 & echo $! > {tmp_path}/grandchild.pid; echo $$ > {tmp_path}/parent.pid; wait",
    }


def _stop(portal: Supervised, pids: list[int]) -> None:
    portal.process.send_signal(signal.SIGTERM)
    assert portal.finish(timeout=30) == 128 + signal.SIGTERM, portal.output
    assert not [group for group in pids if group_members(group)], portal.output


@pytest.mark.parametrize("victim", THREE)
def test_a_sigkilled_main_process_is_restarted_and_its_group_goes_with_it(tmp_path, victim):
    procfile = _procfile(tmp_path, **{name: _holding_output(tmp_path, name) for name in THREE})
    portal = Supervised("supervise", "--restart", ",".join(THREE), str(procfile))
    pids = _pids(tmp_path, [*THREE, f"{victim}-child"])
    portal.wait_for(rf"^\d\d:\d\d:\d\d {victim:<6} \| {victim} ready$")  # output prefixed with its name
    assert len(group_members(pids[victim])) == 2, group_members(pids[victim])
    os.kill(pids[victim], signal.SIGKILL)
    killed = time.monotonic()
    noticed, _ = portal.wait_for(
        rf"system \| {victim} died \(rc=-9\); restarting it \(restart 1 of 3 a minute\)")
    assert noticed - killed < DETECTION_SECONDS, portal.output
    # The child that held its output went with it; nothing of the group is left, not even a zombie.
    assert group_members(pids[victim]) == [] and not pid_alive(pids[f"{victim}-child"]), portal.output
    restarted = _pids(tmp_path, [victim], other_than=pids[victim])[victim]
    assert pid_alive(restarted) and all(pid_alive(pids[name]) for name in THREE if name != victim)
    _stop(portal, [*(pids[name] for name in THREE), restarted])


def test_a_sigkilled_process_that_is_not_restarted_stops_all_and_is_named(tmp_path):
    procfile = _procfile(tmp_path, **{name: _holding_output(tmp_path, name) for name in THREE})
    portal = Supervised("supervise", "--restart", "worker,web", str(procfile))
    pids = _pids(tmp_path, list(THREE))
    os.kill(pids["llama"], signal.SIGKILL)
    killed = time.monotonic()
    noticed, _ = portal.wait_for(r"system \| llama stopped \(rc=-9\)")
    assert noticed - killed < DETECTION_SECONDS, portal.output
    assert portal.finish(timeout=30) == 128 + signal.SIGKILL, portal.output
    assert "sending SIGTERM to worker" in portal.output and "sending SIGTERM to web" in portal.output
    assert not [name for name in THREE if group_members(pids[name])], portal.output


def test_a_process_that_keeps_dying_stops_all_past_its_restarts_a_minute(tmp_path):
    procfile = _procfile(tmp_path, **{name: _holding_output(tmp_path, name) for name in ("worker", "web")})
    portal = Supervised("supervise", "--restart", "worker,web", "--restarts-per-minute", "2", str(procfile))
    pids = _pids(tmp_path, ["worker", "web"])
    killed = [pids["worker"]]
    for restart in (1, 2):
        os.kill(killed[-1], signal.SIGKILL)
        portal.wait_for(rf"worker died \(rc=-9\); restarting it \(restart {restart} of 2 a minute\)")
        killed.append(_pids(tmp_path, ["worker"], other_than=killed[-1])["worker"])
    os.kill(killed[-1], signal.SIGKILL)
    portal.wait_for(r"system \| worker died \(rc=-9\) after 2 restarts within 60 s: stopping all")
    assert portal.finish(timeout=30) == 128 + signal.SIGKILL, portal.output
    assert not [group for group in [*killed, pids["web"]] if group_members(group)], portal.output


def test_a_crash_is_restarted_and_a_clean_exit_stops_all(tmp_path):
    """A crash (a non-zero exit) is restarted like a SIGKILL; a clean exit means the process was asked
    to stop (SIGTERM from outside): all stop, and it is named."""
    crashes = tmp_path / "crashes"
    procfile = _procfile(tmp_path, **_long_running(tmp_path),
                         dier=f"echo crash >> {crashes}; [ $(wc -l < {crashes}) -ge 2 ] && exit 0; exit 3")
    portal = Supervised("supervise", "--restart", "dier", str(procfile))
    pids = _pids(tmp_path, ["sleeper", "parent", "grandchild"])
    assert portal.finish(timeout=30) == 0, portal.output
    assert "dier died (rc=3); restarting it" in portal.output and "dier stopped (rc=0)" in portal.output
    assert not [name for name, pid in pids.items() if pid_alive(pid)], portal.output


def test_one_process_exiting_stops_all_and_is_named(tmp_path):
    procfile = _procfile(tmp_path, **_long_running(tmp_path), dier="sleep 2; exit 3")
    portal = Supervised("supervise", str(procfile))
    pids = _pids(tmp_path, ["sleeper", "parent", "grandchild"])
    assert portal.finish(timeout=30) == 3, portal.output
    assert "dier stopped (rc=3)" in portal.output
    assert not [name for name, pid in pids.items() if pid_alive(pid)], portal.output


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_to_portal_leaves_no_process_behind(tmp_path, signum):
    entries = _long_running(tmp_path)
    # One that ignores SIGTERM: its process group is killed after the 5 s grace.
    entries["stubborn"] = f"trap '' TERM; echo $$ > {tmp_path}/stubborn.pid; while :; do sleep 1; done"
    portal = Supervised("supervise", str(_procfile(tmp_path, **entries)))
    pids = _pids(tmp_path, ["sleeper", "parent", "grandchild", "stubborn"])
    assert all(pid_alive(pid) for pid in pids.values())
    started = time.monotonic()
    portal.process.send_signal(signum)
    assert portal.finish(timeout=30) == 128 + signum, portal.output
    assert time.monotonic() - started < 15, portal.output
    assert f"{signum.name} received" in portal.output and "sending SIGKILL to stubborn" in portal.output
    assert "Traceback" not in portal.output, portal.output
    assert not [name for name, pid in pids.items() if pid_alive(pid)], portal.output


@pytest.mark.parametrize("attempt", range(4))
def test_a_signal_before_the_supervisor_has_started_every_process(tmp_path, attempt):
    """A signal the moment the first process runs, while the others are being started: the handler
    only records it, and the loop stops what has started and starts nothing more."""
    entries = {name: f"echo $$ > {tmp_path}/{name}.pid; exec sleep 300"
               for name in ("first", "second", "third")}
    portal = Supervised("supervise", str(_procfile(tmp_path, **entries)))
    _pids(tmp_path, ["first"], every=0.002)
    portal.process.send_signal(signal.SIGTERM)
    assert portal.finish(timeout=30) == 128 + signal.SIGTERM, portal.output
    assert "Traceback" not in portal.output, portal.output
    left = [f.stem for f in tmp_path.glob("*.pid") if f.read_text().strip() and pid_alive(int(f.read_text()))]
    assert not left, portal.output


def _venv_installed(tmp_path: Path) -> Path:
    """A virtualenv that is the test's own (its site-packages linked), marked as installed from this
    checkout's requirements: `./portal run` then installs nothing into the shared one."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(VENV / "bin" / "python")
    (venv / "pyvenv.cfg").symlink_to(VENV / "pyvenv.cfg")
    (venv / "lib").symlink_to(VENV / "lib")
    digest = subprocess.run(["bash", "-c", "cat requirements*.txt | sha256sum | cut -d' ' -f1"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout  # as ./portal's install() does
    (venv / ".installed-requirements.txt").write_text(digest)
    return venv


@pytest.mark.slow
def test_portal_run_restarts_a_killed_worker_and_runs_with_debug_off(tmp_path):
    """The real `./portal run` path (migrate, collectstatic, bootstrap, supervise) with stand-ins for
    the worker and the web server: the worker stand-in killed with SIGKILL is restarted (the policy
    `./portal run` gives its processes); the web stand-in then reports the settings it runs with (debug
    off, the machine's own host names when served to the LAN) and exits cleanly, which stops all."""
    report = ("exec \"$PY\" -c \"import django; django.setup(); from django.conf import settings; "
              "print('debug', settings.DEBUG, 'at', settings.LLM_BASE_URL, "
              "'hosts', settings.ALLOWED_HOSTS)\"")
    procfile = _procfile(tmp_path, worker=_holding_output(tmp_path, "worker"), meaning="exec sleep 300",
                         web=f"while [ ! -e {tmp_path}/report ]; do sleep 0.1; done; {report}",
                         llama="echo llama must not start when LLM_BASE_URL is set")
    # SQLite, the filesystem broker and the default DEBUG: what a fresh checkout runs with.
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("DEBUG", "DATABASE_URL", "REDIS_URL")}
    environment.update(VENV=str(_venv_installed(tmp_path)), PROCFILE=str(procfile),
                       DATA_DIR=str(tmp_path / "data"),
                       LLM_BASE_URL="http://127.0.0.1:9", HDRAG_ADMIN_PASSWORD="a-test-password-123",
                       HOST="0.0.0.0")  # served to the LAN: the machine's own names become allowed hosts
    portal = Supervised("run", env=environment)
    worker = _pids(tmp_path, ["worker"], every=0.2)["worker"]
    os.kill(worker, signal.SIGKILL)
    portal.wait_for(r"worker died \(rc=-9\); restarting it", timeout=DETECTION_SECONDS + 5)
    restarted = _pids(tmp_path, ["worker"], other_than=worker)["worker"]
    (tmp_path / "report").touch()
    assert portal.finish(timeout=120) == 0, portal.output
    assert "debug False at http://127.0.0.1:9" in portal.output, portal.output
    assert f"'{socket.gethostname()}'" in portal.output.split("hosts", 1)[1].splitlines()[0]
    assert "web stopped (rc=0)" in portal.output and "llama must not start" not in portal.output
    assert not group_members(worker) and not group_members(restarted), portal.output
