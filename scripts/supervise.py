"""The supervisor of `./portal run`: a Procfile's processes, their output prefixed with their names,
and the death of any process's main process noticed within a second, whoever holds its output.

`./portal run` ends in `python scripts/supervise.py --restart NAME,... PROCFILE [PROCESS...]`.
Each process runs as `sh -c COMMAND` in a session (and process group) of its own. Every 0.2 s the
loop reaps any main process that has exited: a process given in --restart that died of a signal or
exited non-zero (a crash, a SIGKILL, the OOM killer) is restarted once every member of its group is
gone, up to --restarts-per-minute times in any 60 s; a clean exit (rc 0: it was asked to stop), a
process not given in --restart, or one past its limit stops all, naming it. Stopping all sends
SIGTERM to every group and SIGKILL to what is left of it after GRACE_SECONDS.

The standard library, not a supervisor package: honcho (what ran here before) learns of an exit only
when the process's output pipe closes, and a Celery worker's pool and beat children keep that pipe
open after its main process is killed; its public API has no other way to know. supervisord is a
daemon with a configuration format of its own in place of the Procfile. The cost is this file, and
orphans reaped by it only where prctl(PR_SET_CHILD_SUBREAPER) exists (Linux); elsewhere the killed
children of a dead main process are left to init to reap.

Signal handlers only record the signal; the loop acts on it in its next turn, so a signal at any
moment (before a process has started, or while one is being started or restarted) is safe.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PROCFILE_LINE = re.compile(r"^([A-Za-z0-9_-]+):\s*(.+)$")
TICK_SECONDS = 0.2
GRACE_SECONDS = 5.0
RESTART_WINDOW_SECONDS = 60.0
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass
class Process:
    name: str
    command: str
    restart: bool
    popen: subprocess.Popen | None = None
    restarts: collections.deque[float] = field(default_factory=collections.deque)

    @property
    def group(self) -> int:
        # start_new_session: the main process leads its own session and process group. Its pid stays
        # reserved (never reused) while any member of that group or session lives, so signalling the
        # group after the main process is reaped reaches only what it left behind.
        assert self.popen is not None
        return self.popen.pid


def procfile_read(path: Path) -> dict[str, str]:
    """The `name: command` entries of a Procfile, in order; blank lines and `#` comments skipped."""
    entries: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = PROCFILE_LINE.match(line)
        if match is None or match[1] in entries:
            raise SystemExit(f"{path}:{number}: not a `name: command` line with a new name")
        entries[match[1]] = match[2]
    return entries


def exit_status(returncode: int) -> int:
    """A process's exit status as a shell reports it (killed by signal N: 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)  # a zombie still counts: the group is gone only once all are reaped
    except ProcessLookupError:
        return False
    return True


def group_signal(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signum)


def become_subreaper() -> bool:
    """Whether the children that our processes' dead main processes leave are now adopted by us."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


class Supervisor:
    def __init__(self, processes: list[Process], *, restarts_per_minute: int) -> None:
        self.processes = processes
        self.restarts_per_minute = restarts_per_minute
        self.width = max(len(name) for name in [*(p.name for p in processes), "system"])
        self.selector = selectors.DefaultSelector()
        self.signals: list[int] = []
        self.subreaper = False
        self.returncode: int | None = None

    def run(self) -> int:
        for signum in STOP_SIGNALS:
            signal.signal(signum, lambda signum, frame: self.signals.append(signum))
        self.subreaper = become_subreaper()
        for process in self.processes:
            if self.signals:
                break
            self.start(process)
        while self.returncode is None:
            self.pump(TICK_SECONDS)
            if self.signals:
                self.say("system", f"{signal.Signals(self.signals[0]).name} received")
                self.returncode = 128 + self.signals[0]
                break
            for process in self.deaths():
                self.died(process)
                if self.returncode is not None:
                    break
        self.stop_all()
        return self.returncode

    def start(self, process: Process) -> None:
        process.popen = subprocess.Popen(
            ["/bin/sh", "-c", process.command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True)
        assert process.popen.stdout is not None
        os.set_blocking(process.popen.stdout.fileno(), False)
        # The pipe is read until its last holder closes it, which may be after a restart.
        self.selector.register(process.popen.stdout, selectors.EVENT_READ, [process.name, b""])
        self.say("system", f"{process.name} started (pid={process.popen.pid})")

    def running(self) -> list[Process]:
        return [p for p in self.processes if p.popen is not None and p.popen.returncode is None]

    def deaths(self) -> list[Process]:
        """The processes whose main process has exited, reaped; orphans adopted from them reaped too."""
        self.orphans_reap()
        # Not only running(): a main process may have been reaped while another's group was awaited.
        return [p for p in self.processes if p.popen is not None and p.popen.poll() is not None]

    def orphans_reap(self) -> None:
        if not self.subreaper:
            return
        mains = {p.popen.pid for p in self.running()}
        while True:
            try:
                # WNOWAIT: look without reaping, so that a main process is left to its Popen.
                exited = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if exited is None or exited.si_pid in mains:
                return
            os.waitpid(exited.si_pid, 0)

    def died(self, process: Process) -> None:
        returncode = process.popen.returncode
        # Its children (Celery's beat and pool processes) would run on without it: a second beat,
        # or a pool that nothing feeds.
        group_signal(process.group, signal.SIGKILL)
        if not self.group_wait([process.group], GRACE_SECONDS):
            self.say("system", f"{process.name}: its process group {process.group} outlived SIGKILL")
        now = time.monotonic()
        while process.restarts and now - process.restarts[0] > RESTART_WINDOW_SECONDS:
            process.restarts.popleft()
        if not process.restart or returncode == 0:
            self.say("system", f"{process.name} stopped (rc={returncode})")
        elif len(process.restarts) >= self.restarts_per_minute:
            self.say("system", f"{process.name} died (rc={returncode}) after {len(process.restarts)} "
                               f"restarts within {RESTART_WINDOW_SECONDS:g} s: stopping all")
        else:
            process.restarts.append(now)
            self.say("system", f"{process.name} died (rc={returncode}); restarting it (restart "
                               f"{len(process.restarts)} of {self.restarts_per_minute} a minute)")
            if not self.signals:
                self.start(process)
            return
        self.returncode = exit_status(returncode)

    def stop_all(self) -> None:
        """SIGTERM to every process group still there, SIGKILL after GRACE_SECONDS (at once on a
        second signal), every child reaped, and the last of their output printed."""
        if self.returncode is None:
            self.returncode = 0
        seen = len(self.signals)
        groups = {p.group: p.name for p in self.processes if p.popen is not None and group_alive(p.group)}
        for group, name in groups.items():
            self.say("system", f"sending SIGTERM to {name} (pid {group})")
            group_signal(group, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_SECONDS
        while time.monotonic() < deadline and len(self.signals) == seen:
            if self.group_wait(list(groups), TICK_SECONDS):
                break
        for group, name in groups.items():
            if group_alive(group):
                self.say("system", f"sending SIGKILL to {name} (pid {group})")
                group_signal(group, signal.SIGKILL)
        self.group_wait(list(groups), GRACE_SECONDS)
        self.pump(0)
        for key in list(self.selector.get_map().values()):
            self.close(key)

    def group_wait(self, groups: list[int], seconds: float) -> bool:
        """Whether every one of `groups` is gone within `seconds`; output printed and children reaped
        meanwhile."""
        deadline = time.monotonic() + seconds
        while True:
            for process in self.running():
                process.popen.poll()
            self.orphans_reap()
            if not any(group_alive(group) for group in groups):
                return True
            if time.monotonic() >= deadline:
                return False
            self.pump(0.05)

    def pump(self, timeout: float) -> None:
        """Print the complete lines the processes have written, waiting at most `timeout` seconds."""
        for key, _ in self.selector.select(timeout):
            name, pending = key.data
            try:
                chunk = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            *lines, key.data[1] = (pending + chunk).split(b"\n")
            for line in lines:
                self.say(name, line.decode(errors="replace"))
            if not chunk:
                self.close(key)

    def close(self, key: selectors.SelectorKey) -> None:
        name, pending = key.data
        if pending:
            self.say(name, pending.decode(errors="replace"))
        self.selector.unregister(key.fileobj)
        key.fileobj.close()

    def say(self, name: str, line: str) -> None:
        # When no one reads the output any more, supervising still matters more than printing.
        with contextlib.suppress(OSError):
            sys.stdout.write(f"{time.strftime('%H:%M:%S')} {name:<{self.width}} | {line}\n")
            sys.stdout.flush()


def main(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("procfile", type=Path)
    parser.add_argument("names", nargs="*", metavar="PROCESS", help="the entries to run (default: all)")
    parser.add_argument("--restart", default="", metavar="NAME,...",
                        help="restart these when they crash (default: any exit stops all)")
    parser.add_argument("--restarts-per-minute", type=int, default=3)
    options = parser.parse_args(arguments)
    entries = procfile_read(options.procfile)
    names = options.names or list(entries)
    restart = {name for name in options.restart.split(",") if name}
    unknown = sorted((set(names) - set(entries)) | (restart - set(names)))
    if unknown:
        parser.error(f"not among the processes to run from {options.procfile}: {', '.join(unknown)}")
    processes = [Process(name, entries[name], restart=name in restart) for name in names]
    return Supervisor(processes, restarts_per_minute=options.restarts_per_minute).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
