"""Run a command until it ends or the process that started this one does; then end the command:
a server the tests start (the LLM gateway) must not outlive a pytest run killed outright (SIGKILL
skips every fixture's teardown). Standard library only: the gateway's own virtualenv runs it.

    python exit_with_parent.py COMMAND [ARG...]

The tests start it in a session of its own (`start_new_session=True`), so the command and anything
it starts share its process group, and their teardown ends that whole group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

GRACE_SECONDS = 15


def main() -> int:
    parent = os.getppid()
    command = subprocess.Popen(sys.argv[1:])
    signal.signal(signal.SIGTERM, lambda *_: command.terminate())
    while command.poll() is None and os.getppid() == parent:
        try:
            command.wait(timeout=1)
        except subprocess.TimeoutExpired:
            continue
    if command.poll() is None:  # orphaned: the tests' process is gone
        command.terminate()
        try:
            command.wait(timeout=GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(0, signal.SIGKILL)  # the command's group, this process included
    return command.returncode or 0


if __name__ == "__main__":
    sys.exit(main())
