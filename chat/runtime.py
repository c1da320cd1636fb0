"""Chat's view of the process-wide engine objects: config, LLM client, token counter.

Settings used: `LLM_BASE_URL`, `LLM_TIMEOUT_SECONDS`; the engine config (temperature, top_p,
max_new_tokens, llama_context_size, system prompt) and the model come from `hdrag_site.runtime`.
"""

from __future__ import annotations

import functools

from django.conf import settings

from engine.config import Config
from engine.llm import ContextBudget, GenerationSettings, LLMClient, ServerTokenCounter, TokenCounter
from hdrag_site import runtime as site_runtime


def engine_config() -> Config:
    return site_runtime.engine_config()


def llm_client() -> LLMClient:
    """A client for the configured server (cheap: it holds no connection between calls)."""
    return LLMClient(settings.LLM_BASE_URL, timeout=float(settings.LLM_TIMEOUT_SECONDS))


def generation_settings(*, temperature: float | None = None) -> GenerationSettings:
    """The engine config's sampling, with a conversation's own `temperature` when it has one."""
    return GenerationSettings.from_config(engine_config(), temperature=temperature)


def context_budget() -> ContextBudget:
    return ContextBudget.from_config(engine_config())


def token_counter() -> TokenCounter:
    """Counts in the served model's own tokens (its server's `/tokenize`, remembered per text):
    the chat model's vocabulary is not the embedding model's."""
    return _counter_for(settings.LLM_BASE_URL)


@functools.lru_cache(maxsize=4)
def _counter_for(base_url: str) -> ServerTokenCounter:
    return ServerTokenCounter(base_url)
