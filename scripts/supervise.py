"""honcho (`honcho start`), with its Manager made safe against a signal at any moment.

`./portal run` ends in `python scripts/supervise.py --procfile Procfile start [PROCESS...]`:
honcho's own command line, unchanged, with one fix to `honcho.manager.Manager` (2.0.0).

honcho's SIGINT/SIGTERM handler prints, then signals every process not yet stopped by its pid.
The loop records a pid only when it reads the process's "start" event, so a signal that comes
before that (Ctrl-C in the first moments, or a test that signals as soon as the processes run)
raises KeyError('pid') inside the handler: the loop dies with a traceback and the supervisor
hangs on its children, which run on. A handler that writes to stdout while the loop is writing
can also fail ("reentrant call"). Here the handler only records the signal; the loop acts on it
in its next turn (within 0.1 s), signalling the processes it knows and each one whose start it
reads later.
"""

from __future__ import annotations

import signal
import sys

from honcho import command
from honcho.manager import SIGNALS, Manager


class SignalSafeManager(Manager):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._signals: list[int] = []

    def _start(self) -> None:
        # loop() has just installed honcho's handlers; replace them before any process starts.
        signal.signal(signal.SIGTERM, self._record_signal)
        signal.signal(signal.SIGINT, self._record_signal)
        super()._start()

    def _record_signal(self, signum: int, frame: object) -> None:
        self._signals.append(signum)

    def _all_started(self) -> bool:
        # The one hook loop() calls in every turn: act on recorded signals here, in the loop.
        while self._signals:
            signum = self._signals.pop(0)
            self._system_print(f"{SIGNALS[signum]['name']} received\n")
            self.returncode = SIGNALS[signum]["rc"]
            self._terminating = True
        if self._terminating:
            self._killall()
        return super()._all_started()

    def _killall(self, force: bool = False) -> None:
        # Each running process whose pid is known gets SIGTERM once (and SIGKILL when forced);
        # one whose start has not been read yet gets it in a later turn.
        for name, process in self._processes.items():
            if "returncode" in process or "pid" not in process:
                continue
            if not force and process.get("terminated"):
                continue
            process["terminated"] = True
            signame = "SIGKILL" if force else "SIGTERM"
            self._system_print(f"sending {signame} to {name} (pid {process['pid']})\n")
            if force:
                self._procmgr.kill(process["pid"])
            else:
                self._procmgr.terminate(process["pid"])


if __name__ == "__main__":
    command.Manager = SignalSafeManager  # honcho's `start` builds the Manager by this name
    sys.exit(command.main())
