"""Chat's view of the process-wide engine objects: config, LLM client, token counter.

Settings used: `LLM_BASE_URL`, `LLM_TIMEOUT_SECONDS`; the engine config (temperature, top_p,
max_new_tokens, llama_context_size, system prompt) and the model come from `hdrag_site.runtime`.
"""

from __future__ import annotations

from django.conf import settings

from engine.config import Config
from engine.llm import ContextBudget, GenerationSettings, LLMClient
from engine.tokenizer import Tokenizer
from hdrag_site import runtime as site_runtime


def engine_config() -> Config:
    return site_runtime.engine_config()


def llm_client() -> LLMClient:
    """A client for the configured server (cheap: it holds no connection between calls)."""
    return LLMClient(settings.LLM_BASE_URL, timeout=float(settings.LLM_TIMEOUT_SECONDS))


def generation_settings() -> GenerationSettings:
    return GenerationSettings.from_config(engine_config())


def context_budget() -> ContextBudget:
    return ContextBudget.from_config(engine_config())


def token_counter() -> Tokenizer:
    """The served model's exact tokenizer, in process (no HTTP round trip per count)."""
    return site_runtime.tokenizer_for(site_runtime.default_gguf())
