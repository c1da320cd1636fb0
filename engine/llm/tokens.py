"""Token counts of the served chat model, asked of its server (llama.cpp's `/tokenize`)."""

from __future__ import annotations

import threading
from typing import Any

import httpx
from cachetools import LRUCache

from engine.llm.transport import KEEPALIVE_SECONDS, RetryClosedConnectionSync
from engine.llm_access import Offered, auth_headers


class ServerTokenCounter:
    """Token counts of the served model, from its server's `/tokenize` (llama.cpp), remembered.

    The chat model need not be a file this process can read (any `LLM_BASE_URL`), and its
    tokenizer need not be one the engine implements (Qwen's is byte-level BPE), so the server
    counts. A count is one loopback request of about a millisecond; the last `cache_size` texts
    (a conversation's history, the system prompt) are remembered. Where the server cannot count
    (down, or an OpenAI-compatible server without `/tokenize`), the UTF-8 length / 2 stands in: an
    upper bound for text in any BPE vocabulary of this size, so a prompt never overflows for it.
    """

    def __init__(
        self, base_url: str, *, timeout: float = 5.0, cache_size: int = 4096, api_key: str = ""
    ) -> None:
        if cache_size < 1:  # cachetools refuses every insert into a cache of size 0
            raise ValueError(f"cache_size must be >= 1, got {cache_size}")
        self.url = base_url.rstrip("/") + "/tokenize"
        self.offered = Offered()  # a server without `/tokenize` is asked once, not per count
        # One pooled client for every thread that counts (httpx's Client is thread-safe).
        self._http = httpx.Client(
            timeout=timeout,
            headers=auth_headers(api_key),
            transport=RetryClosedConnectionSync(limits=httpx.Limits(keepalive_expiry=KEEPALIVE_SECONDS)),
        )
        self._cache: LRUCache[str, int] = LRUCache(maxsize=cache_size)
        self._lock = threading.Lock()

    def count_tokens(self, text: str) -> int:
        with self._lock:
            cached = self._cache.get(text)
        if cached is not None:
            return cached
        count = self._server_count(text)
        if count is None:
            return (len(text.encode("utf-8")) + 1) // 2
        with self._lock:
            self._cache[text] = count
        return count

    def _server_count(self, text: str) -> int | None:
        if self.offered.get("tokenize") is False:
            return None
        try:
            response = self._http.post(self.url, json=tokenize_body(text))
        except httpx.HTTPError:
            return None
        self.offered.learn("tokenize", response.status_code)
        return token_count(response)


def tokenize_body(text: str) -> dict[str, Any]:
    """A llama.cpp `/tokenize` request for `text` as plain text (no special tokens added or parsed)."""
    return {"content": text, "add_special": False, "parse_special": False}


def token_count(response: httpx.Response) -> int | None:
    """The count a `/tokenize` response gives; None for an error status or a body without one."""
    try:
        tokens = response.json()["tokens"] if response.status_code == 200 else None
    except (ValueError, KeyError, TypeError):
        return None
    return len(tokens) if isinstance(tokens, list) else None
