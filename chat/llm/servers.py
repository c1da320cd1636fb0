"""Several LLM servers behind one portal: which server answers a turn.

`LLM_SERVERS` names them (JSON in the variable, or the path of a YAML file): a list of
`{url, key, model, slots}` (`key` optional, `model` defaults to `LLM_MODEL`, `slots` to
`LLM_STREAMS`). Unset, the one server is `LLM_BASE_URL` with `LLM_API_KEY`, so `./portal run` needs
no new setting.

`ServerPool` (one per process) chooses the server of a turn when the queue has admitted it:

* among the servers of the turn's model that are up, the one this conversation used last while it
  has a free slot (its prompt cache holds the conversation), else the one with the most free slots;
* a server that cannot be reached or stops answering is taken out for `RETRY_SECONDS`, then tried
  again; a turn that had not begun streaming on it goes to another server of its model, a turn that
  was streaming ends with the error (stored as failed, with the text it had: nothing is stored as
  complete that was not). The loop that does so is `chat.llm.answer.turn_answer`.

A key is a secret: a server is named by its URL without credentials (`engine.llm_access.redacted`).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cachetools import LRUCache

from engine.llm.errors import LLMConnectionError
from engine.llm_access import redacted

RETRY_SECONDS = 10.0  # a server taken out is tried again after this long
AFFINITIES = 4096  # conversations whose last server is remembered
TAKE_POLL_SECONDS = 0.05  # how often a turn waiting for a free slot looks again (in-process pool)


@dataclass(frozen=True)
class LLMServer:
    url: str
    model: str
    slots: int
    key: str = field(default="", repr=False)

    @property
    def shown_url(self) -> str:
        return redacted(self.url)


class ServersError(ValueError):
    """`LLM_SERVERS` is malformed; the message names the entry, never a key."""


def servers_parse(text: str, *, default_model: str, default_slots: int) -> list[LLMServer]:
    """The servers `text` names: JSON (starting with `[`) or the path of a YAML file holding the list."""
    text = text.strip()
    try:
        entries = json.loads(text) if text.startswith("[") else yaml.safe_load(Path(text).read_text())
    except (OSError, ValueError, yaml.YAMLError) as error:
        raise ServersError(f"LLM_SERVERS: cannot read it ({type(error).__name__}: {error})") from None
    if not isinstance(entries, list) or not entries:
        raise ServersError("LLM_SERVERS: expected a non-empty list of {url, key, model, slots}")
    servers = [_server(number, entry, default_model, default_slots) for number, entry in enumerate(entries)]
    if len({server.url for server in servers}) < len(servers):
        raise ServersError("LLM_SERVERS: a URL is named twice")
    return servers


def _server(number: int, entry: Any, default_model: str, default_slots: int) -> LLMServer:
    if not isinstance(entry, dict) or not isinstance(entry.get("url"), str):
        raise ServersError(f"LLM_SERVERS[{number}]: expected an object with a url")
    url = entry["url"].rstrip("/")
    where = f"LLM_SERVERS[{number}] ({redacted(url)})"
    unknown = set(entry) - {"url", "key", "model", "slots"}
    if unknown:
        raise ServersError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    if not url.startswith(("http://", "https://")):
        raise ServersError(f"{where}: the url must start with http:// or https://")
    key, model, slots = (
        entry.get("key", ""),
        entry.get("model", default_model),
        entry.get("slots", default_slots),
    )
    if not isinstance(key, str):
        raise ServersError(f"{where}: key must be a string")
    if not isinstance(model, str) or not model:
        raise ServersError(f"{where}: model must be a non-empty string")
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise ServersError(f"{where}: slots must be an integer >= 1")
    return LLMServer(url=url, key=key, model=model, slots=slots)


class ServerPool:
    """Which servers are up and busy, and which one each conversation used last. Thread-safe."""

    def __init__(self, servers: Sequence[LLMServer], *, retry_seconds: float = RETRY_SECONDS) -> None:
        self.servers = list(servers)
        self.retry_seconds = retry_seconds
        self._busy = {server.url: 0 for server in self.servers}
        self._down_until = {server.url: 0.0 for server in self.servers}
        self._last: LRUCache[Any, str] = LRUCache(maxsize=AFFINITIES)
        self._lock = threading.Lock()

    @property
    def models(self) -> list[str]:
        return list(dict.fromkeys(server.model for server in self.servers))

    @property
    def default_model(self) -> str:
        return self.servers[0].model

    def unserved(self, model: str) -> LLMConnectionError:
        """The error of a turn whose model no server serves."""
        return LLMConnectionError(
            f"no LLM server serves the model {model!r} (served: {', '.join(self.models)})"
        )

    def last_server(self, affinity: Any) -> str | None:
        """The URL of the server this process last gave a turn of `affinity` (a conversation) to."""
        with self._lock:
            return self._last.get(affinity)

    def up(self, server: LLMServer) -> bool:
        with self._lock:
            return self._down_until[server.url] <= time.monotonic()

    def status(self) -> list[dict[str, Any]]:
        """Each server as a page may show it: URL without credentials, model, slots, busy, up."""
        now = time.monotonic()
        with self._lock:
            return [{"url": server.shown_url, "model": server.model, "slots": server.slots,
                     "busy": self._busy[server.url], "up": self._down_until[server.url] <= now}
                    for server in self.servers]

    def choose(
        self, model: str, affinity: Any = None, *, avoid: Sequence[LLMServer] = ()
    ) -> LLMServer | None:
        """The server for a turn of `model` (see the module docstring); None when none serves it.
        When every server of the model is out, the one out longest is tried (it may be back)."""
        now = time.monotonic()
        with self._lock:
            serving = [server for server in self.servers if server.model == model and server not in avoid]
            if not serving:
                return None
            up = [server for server in serving if self._down_until[server.url] <= now]
            if not up:
                return min(serving, key=lambda server: self._down_until[server.url])
            free = {server.url: server.slots - self._busy[server.url] for server in up}
            last = self._last.get(affinity) if affinity is not None else None
            for server in up:
                if server.url == last and free[server.url] > 0:
                    return server
            return max(up, key=lambda server: free[server.url])  # the first of the freest, in order

    async def take(self, ticket: Any, model: str, affinity: Any = None, *,
                   avoid: Sequence[LLMServer] = ()) -> LLMServer | None:
        """The server for an admitted turn (`ticket`): `choose`, waiting while every server of the
        model that is up has all its slots busy. The queue admits as many turns as all the servers
        have slots; with one out, the others would get more than theirs, and llama.cpp would queue
        them behind its slots, out of the queue's order. The pool shared through Redis
        (`chat.llm.servers_redis`) takes the slot there, over every process."""
        while (server := self.choose(model, affinity, avoid=avoid)) is not None and self._full(server):
            await asyncio.sleep(TAKE_POLL_SECONDS)
        return server

    def _full(self, server: LLMServer) -> bool:
        """Up, with every slot busy (a server that is out is tried as it is: see `choose`)."""
        with self._lock:
            return self._down_until[server.url] <= time.monotonic() and self._busy[server.url] >= server.slots

    @contextmanager
    def lease(self, server: LLMServer, affinity: Any = None) -> Iterator[None]:
        """Holds one of `server`'s slots; the conversation (`affinity`) sticks to it."""
        with self._lock:
            self._busy[server.url] += 1
            if affinity is not None:
                self._last[affinity] = server.url
        try:
            yield
        finally:
            with self._lock:
                self._busy[server.url] -= 1

    def mark_down(self, server: LLMServer) -> None:
        with self._lock:
            self._down_until[server.url] = time.monotonic() + self.retry_seconds

    def mark_up(self, server: LLMServer) -> None:
        with self._lock:
            self._down_until[server.url] = 0.0
