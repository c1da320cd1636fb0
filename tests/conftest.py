"""Session-wide fixtures. Service fixtures live in tests/plugins/ (one module per service)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["tests.plugins.llama"]


@pytest.fixture(scope="session")
def gemma_gguf() -> Path:
    """The real default model (Gemma 3 270M GGUF), assembled once into the repo's .cache."""
    from engine.models import default_gguf_path

    return default_gguf_path()
