"""The tests' one way to wait for something (their one free loopback port is `engine.llama_server.free_port`).

A test that waits names what it waits for and a bound it is never expected to reach: the bound is
generous (a busy 2-core machine is slow), it is not what the test measures, and reaching it fails
the test with the thing waited for in the message. No test sleeps a fixed time instead.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")
# How long anything a test waits for may take on a busy shared machine before it counts as never.
PATIENCE_SECONDS = 60.0


class NeverHappened(AssertionError):
    """What a test waited for did not come within its bound."""


def wait_until(
    check: Callable[[], T],
    *,
    what: str | Callable[[], str],
    timeout: float = PATIENCE_SECONDS,
    every: float = 0.05,
) -> T:
    """The first truthy value of `check()`, asked every `every` seconds; NeverHappened (naming
    `what`, or what `what()` says then: a log's tail, say) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise NeverHappened(f"{_said(what)}: not within {timeout:g} s")
        time.sleep(every)


async def wait_until_async(
    check: Callable[[], T | Awaitable[T]],
    *,
    what: str | Callable[[], str],
    timeout: float = PATIENCE_SECONDS,
    every: float = 0.05,
) -> T:
    """`wait_until` on the event loop; `check` may be a coroutine function."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise NeverHappened(f"{_said(what)}: not within {timeout:g} s")
        await asyncio.sleep(every)


def _said(what: str | Callable[[], str]) -> str:
    return what() if callable(what) else what


def wait_for_server(
    process: subprocess.Popen, port: int, *, name: str, log_path: Path, timeout: float
) -> None:
    """Until `process` (a server the tests started) accepts connections on 127.0.0.1:`port`; the
    test fails at once with the tail of its log when it exits instead."""
    def answering() -> bool:
        if process.poll() is not None:
            pytest.fail(
                f"{name} exited with {process.returncode}:\n{log_path.read_text()[-2000:]}", pytrace=False
            )
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    wait_until(answering, what=f"{name} answering on port {port}", timeout=timeout, every=0.1)
