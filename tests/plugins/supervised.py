"""`./portal supervise` (scripts/supervise.py) run by a test: its output read as it comes, each line
with the moment it arrived, and what /proc says of a process group."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.plugins.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent


class Supervised:
    """`./portal ARGS...` (supervise, or run) with its output read in a thread."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.lines: list[tuple[float, str]] = []
        self.process = subprocess.Popen([str(ROOT / "portal"), *args], cwd=ROOT, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True,
                                        env={"VENV": str(VENV), **(env if env is not None else os.environ)})
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    @property
    def output(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def wait_for(self, pattern: str, *, after: float = 0.0, timeout: float = 60.0) -> tuple[float, re.Match]:
        """The first line that arrived after `after` (a time.monotonic()) and matches `pattern`, with
        when it arrived."""
        def found() -> tuple[float, re.Match] | None:
            for at, line in list(self.lines):
                if at >= after and (match := re.search(pattern, line)):
                    return at, match
            return None

        return wait_until(found, what=lambda: f"a line matching {pattern!r} in:\n{self.output[-4000:]}",
                          timeout=timeout)

    def finish(self, timeout: float = 60.0) -> int:
        returncode = self.process.wait(timeout=timeout)
        self.reader.join(timeout=10)
        return returncode


def group_members(group: int) -> list[str]:
    """Every process in process group `group`, zombies included: 'PID STATE COMMAND'."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            command, _, rest = stat.read_text().partition(" (")[2].rpartition(") ")
        except OSError:
            continue  # it ended while we looked
        state, _, process_group = rest.split()[:3]
        if int(process_group) == group:
            members.append(f"{stat.parent.name} {state} {command}")
    return members


def pid_alive(pid: int) -> bool:
    """Whether `pid` runs: a zombie has exited, only its parent has not collected it yet."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(") ")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"
