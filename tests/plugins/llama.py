"""Fixtures for a real llama.cpp server (xllamacpp) on the default Gemma model. Owned by the tokenizer work."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.llama_server import LlamaServer, LlamaServerError


@pytest.fixture(scope="session")
def llama_server(gemma_gguf: Path) -> Iterator[LlamaServer]:
    """One llama.cpp server for the whole session, as a child process on a free port.

    Yields the `LlamaServer` (use `.base_url`). If it cannot start, every test using it
    fails with the server's log tail: a missing LLM is a broken environment, not a skip.
    """
    server = LlamaServer(gemma_gguf, threads=2, ctx_size=8192, parallel=4)
    try:
        server.start()
    except LlamaServerError as exc:
        pytest.fail(f"llama.cpp server could not start: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()
