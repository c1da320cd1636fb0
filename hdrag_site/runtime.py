"""Process-wide engine objects the apps share: engine config, model paths, tokenizers.

Loading a tokenizer parses the GGUF vocabulary (about a second for Gemma's 262k tokens), so one
instance per model file lives for the whole process.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path

from django.conf import settings

from engine.config import Config

_lock = threading.Lock()
_tokenizers: dict[str, object] = {}


@functools.cache
def engine_config() -> Config:
    """The engine defaults with the portal's generation settings (`LLM_CONTEXT_SIZE`, the llama.cpp
    server's context, and `LLM_MAX_NEW_TOKENS`), then `HDRAG_CONFIG_FILE` (YAML) when set."""
    values = {"llama_context_size": settings.LLM_CONTEXT_SIZE, "max_new_tokens": settings.LLM_MAX_NEW_TOKENS}
    if settings.HDRAG_CONFIG_FILE:
        return Config.load(settings.HDRAG_CONFIG_FILE, base=values)
    return Config.from_dict(values)


def default_gguf() -> Path:
    """`GGUF_PATH`, or the packaged Gemma 3 270M (assembled into .cache on first use)."""
    if settings.GGUF_PATH:
        return Path(settings.GGUF_PATH)
    from engine.models import default_gguf_path

    return default_gguf_path()


def tokenizer_for(gguf_path: str | Path):  # noqa: ANN201 - engine.spm.GGUFTokenizer, imported lazily
    """The in-process tokenizer of a GGUF model, loaded once per process and path."""
    from engine.spm import GGUFTokenizer

    key = str(Path(gguf_path).resolve())
    with _lock:
        if key not in _tokenizers:
            _tokenizers[key] = GGUFTokenizer.from_gguf(key)
        return _tokenizers[key]
