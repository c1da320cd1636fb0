"""How the portal reaches an LLM server: its credentials, and what it may show of them.

An OpenAI-compatible server that requires a key (vLLM with `--api-key`, a LiteLLM or other gateway, a
hosted endpoint) takes it as `Authorization: Bearer <key>`. The key is a secret: every text the
client makes for a person (an error, a log line, a page) names the server by `redacted(url)` (no
user, password or query) and passes what the server said through `scrub`, which takes the key out
(a gateway may echo the key it refused).

What a server offers beyond the standard endpoints (`/tokenize`, `/apply-template`) is learnt once
per client (`Offered`): a server that answers 404 for an endpoint is not asked again.
"""

from __future__ import annotations

import json
import threading
from urllib.parse import urlsplit, urlunsplit

# What a key is replaced with in any text a person may see.
HIDDEN = "[key hidden]"
# HTTP statuses by which a server says it does not have an endpoint (so it is not asked again):
# not found, method not allowed, not implemented.
ABSENT_STATUSES = frozenset({404, 405, 501})
# HTTP statuses by which a server refuses the credentials.
REFUSED_STATUSES = frozenset({401, 403})
# The error type LiteLLM's proxy answers a key it does not know with, as HTTP 400, when it runs
# without a database (only its master key is known then: BerriAI/litellm#12273).
LITELLM_UNKNOWN_KEY = "no_db_connection"


def redacted(url: str) -> str:
    """`url` without its credentials (user, password, query): what an error may show."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2], query=""))


def auth_headers(api_key: str) -> dict[str, str]:
    """The request headers that carry `api_key` (none without one)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def scrub(text: str, api_key: str) -> str:
    """`text` with every occurrence of `api_key` (and of its userinfo-free form) hidden."""
    return text.replace(api_key, HIDDEN) if api_key else text


def refused(status: int, body: str) -> bool:
    """Whether an error answer (`status`, its JSON `body`) refuses the credentials: 401 or 403, or
    LiteLLM's 400 for a key it does not know (`LITELLM_UNKNOWN_KEY`)."""
    if status in REFUSED_STATUSES:
        return True
    if status != 400:
        return False
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return False
    return isinstance(error, dict) and error.get("type") == LITELLM_UNKNOWN_KEY


class Offered:
    """Which optional endpoints one server has: unknown until asked, then remembered for good once
    the server said yes (an answer) or no (`ABSENT_STATUSES`). An unreachable server, or one that
    refused the key, is asked again next time. Thread-safe."""

    def __init__(self) -> None:
        self._known: dict[str, bool] = {}
        self._lock = threading.Lock()

    def get(self, endpoint: str) -> bool | None:
        with self._lock:
            return self._known.get(endpoint)

    def learn(self, endpoint: str, status: int) -> None:
        """Remember what `status`, the server's answer to `endpoint`, says of it (if anything)."""
        if status in ABSENT_STATUSES:
            offered = False
        elif 200 <= status < 300:
            offered = True
        else:
            return
        with self._lock:
            self._known[endpoint] = offered

    def known(self) -> dict[str, bool]:
        with self._lock:
            return dict(self._known)
