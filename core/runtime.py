"""The engine config every app reads, and `reset()`, which forgets all a process keeps.

Each concept's process-wide state lives with its app (`corpus.serving`, `chat.llm.clients`), in
bounded caches (`core.cache`); this module imports Django's settings and the engine, never an app.
"""

from __future__ import annotations

import functools
from pathlib import Path

import yaml
from django.conf import settings

from core.cache import bounded_caches_clear, function_cache_register
from engine.config import Config
from engine.llm.prompt import ContextBudget
from engine.llm.sampling import GenerationSettings


@function_cache_register
@functools.cache
def engine_config() -> Config:
    """The engine defaults with the portal's generation settings (`LLM_CONTEXT_SIZE`, the llama.cpp
    server's context, and `LLM_MAX_NEW_TOKENS`), then `HDRAG_CONFIG_FILE` (YAML) when set."""
    values = {"llama_context_size": settings.LLM_CONTEXT_SIZE, "max_new_tokens": settings.LLM_MAX_NEW_TOKENS}
    if settings.HDRAG_CONFIG_FILE:
        return Config.load(settings.HDRAG_CONFIG_FILE, base=values)
    return Config.from_dict(values)


def check_engine_settings() -> None:
    """Build the engine config (`HDRAG_CONFIG_FILE` over the defaults) and what every chat turn
    derives from it, or raise ImproperlyConfigured naming where the bad value came from. The web
    process, the worker and `manage.py check` (so `./portal run`) call it when they start, so a bad
    setting stops them with a clear message instead of failing the first chat turn."""
    from django.core.exceptions import ImproperlyConfigured

    engine_config.cache_clear()
    try:
        config = engine_config()
        ContextBudget.from_config(config)
        GenerationSettings.from_config(config)
    except (OSError, ValueError, TypeError, yaml.YAMLError) as error:
        source = (f"HDRAG_CONFIG_FILE={settings.HDRAG_CONFIG_FILE}" if settings.HDRAG_CONFIG_FILE
                  else "LLM_CONTEXT_SIZE / LLM_MAX_NEW_TOKENS")
        raise ImproperlyConfigured(f"bad engine settings ({source}): {error}") from None


def default_gguf() -> Path:
    """`GGUF_PATH`, or the packaged Gemma 3 270M (assembled into .cache on first use)."""
    if settings.GGUF_PATH:
        return Path(settings.GGUF_PATH)
    from engine.model_files import default_gguf_path

    return default_gguf_path()


def reset() -> None:
    """Forget everything this process keeps (thread pools stay: they hold no state)."""
    from engine.ocr import clear_caches as clear_ocr_caches
    from engine.vocab import clear_caches

    clear_caches()  # the engine's own (it imports nothing above it, so cannot register them here)
    clear_ocr_caches()
    bounded_caches_clear()  # every BoundedCache and registered function cache, engine_config's too
