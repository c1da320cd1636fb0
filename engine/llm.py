"""OpenAI-compatible streaming chat client (llama.cpp's `/v1/chat/completions`) and prompt assembly.

Prompt assembly follows the spec's budget, `llama_context_size = search + generation + system +
history`: the system message is the working-memory framing followed by the retrieved memories
(their size is the "search" part), `max_new_tokens` is reserved for generation, and the history
gets what is left, dropped oldest-first in whole user/assistant exchanges.

Token counts of a chat are estimated from the message texts with the same tokenizer the server
uses, plus the chat template's markers: `TEMPLATE_TOKENS` once (BOS and the generation prompt
`<start_of_turn>model\\n`) and `MESSAGE_TOKENS` per message (`<start_of_turn>`, role, newline,
`<end_of_turn>`, newline, one spare for merges at the trimmed edges). Gemma's template has no
system role: llama.cpp prepends the system text to the first user turn with a blank line, which
costs fewer tokens than a message of its own, so the estimate is an upper bound (tested against
the real server's `usage.prompt_tokens`).

The client is async (httpx) so a websocket consumer streams without blocking its event loop.
Cancelling the consuming task, or closing the iterator, closes the HTTP response, and llama.cpp
stops generating for a closed connection.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from engine.config import Config
from engine.tokenizer import Tokenizer

TEMPLATE_TOKENS = 4
MESSAGE_TOKENS = 6
MEMORY_HEADER = "\nMemories:\n"
MEMORY_DELIMITER = "\n\n---\n\n"

Role = Literal["user", "assistant"]


class LLMError(RuntimeError):
    """Generation failed; the message is fit to show a user (names the server URL)."""


class LLMConnectionError(LLMError):
    """The server could not be reached (refused, DNS, reset before an answer)."""


class LLMTimeoutError(LLMError):
    """The server did not answer, or stopped sending tokens, within the timeout."""


class LLMHTTPError(LLMError):
    """The server answered with an HTTP error status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class LLMProtocolError(LLMError):
    """The server's stream was not the OpenAI chat-completion SSE format."""


class PromptTooLongError(LLMError):
    """The new user turn and system prompt alone leave no room in the context."""


@dataclass(frozen=True)
class GenerationSettings:
    """Sampling parameters sent with each request."""

    temperature: float = 0.7
    top_p: float = 0.9
    max_tokens: int = 4096

    def __post_init__(self) -> None:
        if not 0.0 <= self.temperature <= 5.0:
            raise ValueError(f"temperature must be in 0..5, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")

    @classmethod
    def from_config(cls, config: Config) -> GenerationSettings:
        return cls(temperature=config.temperature, top_p=config.top_p, max_tokens=config.max_new_tokens)


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class ChatChunk:
    """One streamed piece: a text delta, or (last) the finish reason and the usage."""

    delta: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None


class LLMClient:
    """Streams chat completions from an OpenAI-compatible server (llama.cpp `llama-server`).

    `timeout` bounds connecting and each wait for the next bytes (a stalled stream), not the
    whole generation.
    """

    def __init__(self, base_url: str, *, timeout: float = 60.0, connect_timeout: float = 5.0,
                 model: str = "default") -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"LLM base URL must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._timeout = httpx.Timeout(timeout, connect=connect_timeout)

    @property
    def url(self) -> str:
        return f"{self.base_url}/v1/chat/completions"

    def payload(self, messages: Sequence[dict[str, str]], settings: GenerationSettings) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": list(messages),
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": settings.temperature,
            "top_p": settings.top_p,
            "max_tokens": settings.max_tokens,
        }

    async def stream_chat(self, messages: Sequence[dict[str, str]], settings: GenerationSettings
                          ) -> AsyncIterator[ChatChunk]:
        """Yield text deltas as they arrive, then one chunk with `finish_reason` and `usage`.

        Raises an `LLMError` subclass for every failure (connection, timeout, HTTP status,
        malformed stream); the original exception is chained.
        """
        payload = self.payload(messages, settings)
        finish_reason: str | None = None
        usage: Usage | None = None
        try:
            async with httpx.AsyncClient(timeout=self._timeout) as client, \
                    client.stream("POST", self.url, json=payload) as response:
                if response.status_code != 200:
                    body = (await response.aread()).decode("utf-8", errors="replace")
                    raise LLMHTTPError(f"LLM server at {self.base_url} answered HTTP {response.status_code}: "
                                       f"{_error_text(body)}", response.status_code)
                async for line in response.aiter_lines():
                    event = self._parse_line(line)
                    if event is None:
                        continue
                    if event == "[DONE]":
                        break
                    for choice in event.get("choices") or []:
                        text = (choice.get("delta") or {}).get("content")
                        if text:
                            yield ChatChunk(delta=text)
                        finish_reason = choice.get("finish_reason") or finish_reason
                    if event.get("usage"):
                        usage = _usage(event["usage"], self.base_url)
        except httpx.TimeoutException as exc:
            raise LLMTimeoutError(f"LLM server at {self.base_url} timed out ({type(exc).__name__})") from exc
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise LLMConnectionError(f"LLM server unreachable at {self.base_url}: {exc or type(exc).__name__}") from exc
        except httpx.HTTPError as exc:
            raise LLMConnectionError(f"LLM request to {self.base_url} failed: {exc or type(exc).__name__}") from exc
        yield ChatChunk(finish_reason=finish_reason, usage=usage)

    async def complete(self, messages: Sequence[dict[str, str]], settings: GenerationSettings
                       ) -> tuple[str, ChatChunk]:
        """The whole answer and its final chunk (finish reason, usage), streamed underneath."""
        parts: list[str] = []
        final = ChatChunk()
        async for chunk in self.stream_chat(messages, settings):
            parts.append(chunk.delta)
            if chunk.finish_reason or chunk.usage:
                final = chunk
        return "".join(parts), final

    def _parse_line(self, line: str) -> dict[str, Any] | str | None:
        # SSE: "data: <json>" lines separated by blank lines; comments start with ":".
        if not line or line.startswith(":"):
            return None
        if not line.startswith("data:"):
            if line.startswith(("event:", "id:", "retry:")):
                return None
            raise LLMProtocolError(f"LLM server at {self.base_url} sent a non-SSE line: {line[:200]!r}")
        data = line[5:].strip()
        if data == "[DONE]":
            return data
        try:
            event = json.loads(data)
        except json.JSONDecodeError as exc:
            raise LLMProtocolError(f"LLM server at {self.base_url} sent invalid JSON in the stream: {data[:200]!r}") from exc
        if not isinstance(event, dict):
            raise LLMProtocolError(f"LLM server at {self.base_url} sent a non-object event: {data[:200]!r}")
        if "error" in event:
            raise LLMHTTPError(f"LLM server at {self.base_url} reported an error: {_error_text(data)}", 500)
        return event


def _error_text(body: str) -> str:
    try:
        error = json.loads(body).get("error")
    except (json.JSONDecodeError, AttributeError):
        return body[:300]
    if isinstance(error, dict):
        return str(error.get("message", error))[:300]
    return str(error)[:300]


def _usage(data: dict[str, Any], base_url: str) -> Usage:
    try:
        return Usage(prompt_tokens=int(data["prompt_tokens"]), completion_tokens=int(data["completion_tokens"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise LLMProtocolError(f"LLM server at {base_url} sent malformed usage: {data!r:.200}") from exc


# ---------------------------------------------------------------- prompt assembly


def system_prompt_with_memories(framing: str, memories: Sequence[str]) -> str:
    """The spec's working-memory framing, then the retrieved texts joined by "---" separators."""
    framing = framing.rstrip()
    texts = [text.strip() for text in memories if text.strip()]
    if not texts:
        return framing
    return framing + "\n" + MEMORY_HEADER + MEMORY_DELIMITER.join(texts)


def message_tokens(tokenizer: Tokenizer, content: str) -> int:
    """Upper bound of the tokens one chat message costs inside the template."""
    return tokenizer.count_tokens(content) + MESSAGE_TOKENS


@dataclass(frozen=True)
class ContextBudget:
    """`context_size = search + generation + system + history` (all in tokens)."""

    context_size: int
    generation: int

    def __post_init__(self) -> None:
        if self.generation < 1:
            raise ValueError(f"generation reserve must be >= 1 token, got {self.generation}")
        if self.context_size <= self.generation + TEMPLATE_TOKENS:
            raise ValueError(f"context_size {self.context_size} leaves no room beside the generation "
                             f"reserve {self.generation}")

    @classmethod
    def from_config(cls, config: Config) -> ContextBudget:
        return cls(context_size=config.llama_context_size, generation=config.max_new_tokens)

    @property
    def prompt(self) -> int:
        """Tokens the whole prompt (template included) may use."""
        return self.context_size - self.generation

    def search_budget(self, *, framing: str, user_message: str, tokenizer: Tokenizer, requested: int) -> int:
        """Tokens retrieval may fill: `requested`, capped so framing + memories + the new turn fit."""
        fixed = (TEMPLATE_TOKENS + message_tokens(tokenizer, framing + "\n" + MEMORY_HEADER)
                 + message_tokens(tokenizer, user_message))
        return max(0, min(int(requested), self.prompt - fixed))


@dataclass(frozen=True)
class PromptPlan:
    """The messages to send and how the context was spent (token estimates, upper bounds)."""

    messages: list[dict[str, str]]
    system_tokens: int
    history_tokens: int
    user_tokens: int
    dropped_messages: int
    budget: ContextBudget

    @property
    def prompt_tokens(self) -> int:
        return TEMPLATE_TOKENS + self.system_tokens + self.history_tokens + self.user_tokens


def assemble_prompt(*, system_prompt: str, history: Sequence[tuple[Role, str]], user_message: str,
                    tokenizer: Tokenizer, budget: ContextBudget) -> PromptPlan:
    """System message + as much recent history as fits + the new user turn.

    `history` is oldest first, as (role, text) with role "user" or "assistant". Whole messages
    are dropped from the oldest end; the kept history always starts with a user turn, so the
    template sees alternating turns. Raises `PromptTooLongError` when the system prompt and the
    new turn alone exceed the prompt budget.
    """
    for number, (role, _) in enumerate(history):
        if role not in ("user", "assistant"):
            raise ValueError(f"history[{number}]: role must be 'user' or 'assistant', got {role!r}")
    system_tokens = message_tokens(tokenizer, system_prompt) if system_prompt else 0
    user_tokens = message_tokens(tokenizer, user_message)
    room = budget.prompt - TEMPLATE_TOKENS - system_tokens - user_tokens
    if room < 0:
        raise PromptTooLongError(
            f"the message ({user_tokens} tokens) and the system prompt ({system_tokens} tokens) exceed the "
            f"prompt budget of {budget.prompt} tokens (context {budget.context_size} - generation {budget.generation})")
    costs = [message_tokens(tokenizer, text) for _, text in history]
    start = len(history)
    used = 0
    while start > 0 and used + costs[start - 1] <= room:
        start -= 1
        used += costs[start]
    while start < len(history) and history[start][0] != "user":
        used -= costs[start]
        start += 1
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages += [{"role": role, "content": text} for role, text in history[start:]]
    messages.append({"role": "user", "content": user_message})
    return PromptPlan(messages=messages, system_tokens=system_tokens, history_tokens=used, user_tokens=user_tokens,
                      dropped_messages=start, budget=budget)
