"""Fixtures for real llama.cpp servers (xllamacpp): the default Gemma model, and the packaged chat model
as a second model beside it."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from engine.llama_server import LlamaServer, LlamaServerError


def started(server: LlamaServer) -> LlamaServer:
    """`server` started; a test fails with its log's tail when it cannot start (a missing LLM is a
    broken environment, not a skip)."""
    try:
        return server.start()
    except LlamaServerError as exc:
        pytest.fail(f"llama.cpp server could not start: {exc}", pytrace=False)


@contextmanager
def running(server: LlamaServer) -> Iterator[LlamaServer]:
    """`server` started (`started`), and stopped afterwards."""
    started(server)
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def paused(server: LlamaServer) -> Iterator[None]:
    """`server` stopped (SIGSTOP) until the block ends: an answer it streams is still open to the
    portal, with no end in sight, however short the model would have made it."""
    os.kill(server.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.pid, signal.SIGCONT)


@pytest.fixture(scope="session")
def llama_server(gemma_gguf: Path) -> Iterator[LlamaServer]:
    """One llama.cpp server for the whole session, as a child process on a free port.

    Yields the `LlamaServer` (use `.base_url`). If it cannot start, every test using it
    fails with the server's log tail: a missing LLM is a broken environment, not a skip.
    """
    with running(LlamaServer(gemma_gguf, threads=2, ctx_size=8192, parallel=4)) as server:
        yield server


@pytest.fixture(scope="session")
def chat_llama_server() -> Iterator[LlamaServer]:
    """A second model beside `llama_server`'s Gemma: the packaged chat model (Qwen2.5-Coder 0.5B,
    `engine.model_files.default_chat_gguf_path`), one llama.cpp for the session, on a free port."""
    from engine.model_files import default_chat_gguf_path

    with running(LlamaServer(default_chat_gguf_path(), threads=1, ctx_size=4096, parallel=2)) as server:
        yield server


def slot_tasks(server: LlamaServer) -> list[int | None]:
    """The last task each of `server`'s slots ran (llama.cpp's `GET /slots`): a request it served
    changes them, so a test can tell which server answered."""
    response = requests.get(f"{server.base_url}/slots", timeout=30)
    response.raise_for_status()
    return [slot.get("id_task") for slot in response.json()]
