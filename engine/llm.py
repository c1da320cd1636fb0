"""OpenAI-compatible streaming chat client (llama.cpp's `/v1/chat/completions`) and prompt assembly.

Prompt assembly follows the spec's budget, `llama_context_size = search + generation + system +
history`, in the shape an instruction-tuned model is trained on:

* the **system** message is fixed (the instructions: use the recollections, never recite them), so
  llama.cpp's prompt cache keeps it, and the history after it, from one turn to the next;
* the **history** gets what is left, dropped oldest-first in whole user/assistant exchanges; past
  user turns are their bare text, so an earlier turn's memories are never shown again;
* the **new user turn** carries the retrieved memories, each in `<memory>` tags, before the
  question: the spec's latent priming, placed where a small model reads it as context for this
  question rather than as text to continue (their size is the "search" part);
* `max_new_tokens` is reserved for generation.

Token counts are estimated with the served model's tokenizer plus the chat template's markers:
`TEMPLATE_TOKENS` once (BOS and the generation prompt) and `MESSAGE_TOKENS` per message (ChatML's
`<|im_start|>`, role, newline, `<|im_end|>`, newline; Gemma's turn markers are as many), so the
estimate is an upper bound (tested against the real server's `usage.prompt_tokens`).

The client is async (httpx) so a websocket consumer streams without blocking its event loop.
Cancelling the consuming task, or closing the iterator, closes the HTTP response, and llama.cpp
stops generating for a closed connection. Both clients here keep one pooled httpx client (per event
loop for the async one) rather than one per call: making an httpx client loads the CA bundle into a
new SSL context, tens of milliseconds before the first byte is sent (`bench/llm_client.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

import httpx
from cachetools import LRUCache

from engine.config import Config, Range, check_ranges
from engine.llm_access import Offered, auth_headers, redacted, refused, scrub
from engine.repetition import RepetitionGuard

TEMPLATE_TOKENS = 4
MESSAGE_TOKENS = 6
MEMORY_OPEN, MEMORY_CLOSE = "<memory>\n", "\n</memory>\n"
MEMORY_TAGS = (MEMORY_OPEN.strip(), MEMORY_CLOSE.strip())
# Idle kept-alive connections are dropped after this many seconds: before the server drops them
# (llama.cpp's server answers `Keep-Alive: timeout=5`; Uvicorn keeps one 5 s by default), so a
# request is never sent on a connection the server is closing.
KEEPALIVE_SECONDS = 4.0


class RecitationCut:
    """Ends an answer where the model writes one of the prompt's memory tags after some answer text:
    it has begun copying its recollections (seen through the OpenAI-compatible endpoint: after its
    answer the 0.5B chat model wrote "</memory>\n<memory>" and recited the other memories one after
    another). A tag before any answer text is dropped instead: a model that opens with one (the Gemma
    base model does) would otherwise answer nothing. A delta's tail that may begin a tag is held back
    until the next one tells, so no part of a tag is ever shown.

    `feed(delta)` returns the text that may be shown now; `cut` is True once the answer has ended
    (nothing more to feed); `flush()` returns what was held back when the stream ends."""

    def __init__(self) -> None:
        self.cut = False
        self._held = ""
        self._answered = False

    def feed(self, delta: str) -> str:
        text = self._held + delta
        self._held = ""
        while True:
            found = [(text.find(tag), tag) for tag in MEMORY_TAGS if tag in text]
            if not found:
                break
            at, tag = min(found)
            if self._answered or text[:at].strip():
                self.cut = True
                return text[:at]
            text = text[at + len(tag):]
        start = text.rfind("<")
        if start >= 0 and any(tag.startswith(text[start:]) for tag in MEMORY_TAGS):
            text, self._held = text[:start], text[start:]
        self._answered = self._answered or bool(text.strip())
        return text

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held


Role = Literal["user", "assistant"]


class TokenCounter(Protocol):
    """What prompt assembly needs of a tokenizer (every `engine.tokenizer.Tokenizer` is one)."""

    def count_tokens(self, text: str) -> int: ...


class ServerTokenCounter:
    """Token counts of the served model, from its server's `/tokenize` (llama.cpp), remembered.

    The chat model need not be a file this process can read (any `LLM_BASE_URL`), and its
    tokenizer need not be one the engine implements (Qwen's is byte-level BPE), so the server
    counts. A count is one loopback request of about a millisecond; the last `cache_size` texts
    (a conversation's history, the system prompt) are remembered. Where the server cannot count
    (down, or an OpenAI-compatible server without `/tokenize`), the UTF-8 length / 2 stands in: an
    upper bound for text in any BPE vocabulary of this size, so a prompt never overflows for it.
    """

    def __init__(self, base_url: str, *, timeout: float = 5.0, cache_size: int = 4096, api_key: str = "") -> None:
        if cache_size < 1:  # cachetools refuses every insert into a cache of size 0
            raise ValueError(f"cache_size must be >= 1, got {cache_size}")
        self.url = base_url.rstrip("/") + "/tokenize"
        self.offered = Offered()  # a server without `/tokenize` is asked once, not per count
        # One pooled client for every thread that counts (httpx's Client is thread-safe).
        self._http = httpx.Client(timeout=timeout, headers=auth_headers(api_key), transport=_RetryClosedConnectionSync(
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_SECONDS)))
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
            response = self._http.post(self.url, json=_tokenize_body(text))
        except httpx.HTTPError:
            return None
        self.offered.learn("tokenize", response.status_code)
        return _token_count(response)


def _tokenize_body(text: str) -> dict[str, Any]:
    """A llama.cpp `/tokenize` request for `text` as plain text (no special tokens added or parsed)."""
    return {"content": text, "add_special": False, "parse_special": False}


def _token_count(response: httpx.Response) -> int | None:
    """The count a `/tokenize` response gives; None for an error status or a body without one."""
    try:
        tokens = response.json()["tokens"] if response.status_code == 200 else None
    except (ValueError, KeyError, TypeError):
        return None
    return len(tokens) if isinstance(tokens, list) else None


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


class LLMUnauthorizedError(LLMHTTPError):
    """The server refused the portal's credentials (HTTP 401 or 403): a wrong or missing API key."""


class LLMProtocolError(LLMError):
    """The server's stream was not the OpenAI chat-completion SSE format."""


class PromptTooLongError(LLMError):
    """The new user turn and system prompt alone leave no room in the context."""


_DEFAULTS = Config()
_SAMPLING_RANGES: tuple[Range, ...] = (
    ("temperature", lambda value: 0.0 <= value <= 5.0, "in 0..5"),
    ("top_p", lambda value: 0.0 < value <= 1.0, "in (0, 1]"),
    ("max_tokens", lambda value: value >= 1, ">= 1"),
    ("top_k", lambda value: value >= 0, ">= 0 (0: off)"),
    ("min_p", lambda value: 0.0 <= value < 1.0, "in [0, 1)"),
    ("repeat_penalty", lambda value: 1.0 <= value <= 2.0, "in 1..2"),
    ("dry_multiplier", lambda value: 0.0 <= value <= 5.0, "in 0..5 (0: off)"),
    ("dry_base", lambda value: 1.0 < value <= 4.0, "in (1, 4]"),
    ("dry_allowed_length", lambda value: value >= 1, ">= 1"),
    ("dry_penalty_last_n", lambda value: value >= -1, ">= -1 (-1: the whole context)"),
)


@dataclass(frozen=True)
class GenerationSettings:
    """Sampling parameters sent with each request (llama.cpp's names for the non-OpenAI ones:
    `top_k`, `min_p`, `repeat_penalty`, and the DRY sampler's `dry_multiplier` (0: off) with its
    `dry_base`, `dry_allowed_length` and `dry_penalty_last_n` (-1: the whole context); other
    OpenAI-compatible servers ignore or map them)."""

    # The defaults are the engine config's (declared once, in engine.config.Config).
    temperature: float = _DEFAULTS.temperature
    top_p: float = _DEFAULTS.top_p
    max_tokens: int = _DEFAULTS.max_new_tokens
    top_k: int = _DEFAULTS.top_k
    min_p: float = _DEFAULTS.min_p
    repeat_penalty: float = _DEFAULTS.repeat_penalty
    dry_multiplier: float = _DEFAULTS.dry_multiplier
    dry_base: float = _DEFAULTS.dry_base
    dry_allowed_length: int = _DEFAULTS.dry_allowed_length
    dry_penalty_last_n: int = _DEFAULTS.dry_penalty_last_n
    logprobs: bool = _DEFAULTS.answer_logprobs

    def __post_init__(self) -> None:
        check_ranges(self, _SAMPLING_RANGES)

    @classmethod
    def from_config(cls, config: Config, *, temperature: float | None = None) -> GenerationSettings:
        """The config's sampling; `temperature` (a conversation's own) overrides the config's."""
        return cls(temperature=config.temperature if temperature is None else temperature, top_p=config.top_p,
                   max_tokens=config.max_new_tokens, top_k=config.top_k, min_p=config.min_p,
                   repeat_penalty=config.repeat_penalty, dry_multiplier=config.dry_multiplier,
                   dry_base=config.dry_base, dry_allowed_length=config.dry_allowed_length,
                   dry_penalty_last_n=config.dry_penalty_last_n, logprobs=config.answer_logprobs)


# Asks for a trailing assistant message to be continued, not answered anew (vLLM's names, which
# llama.cpp also reads); `LLMClient.continues_prefill` asks with them too, so it asks as a chat does.
CONTINUE_FINAL_MESSAGE = {"continue_final_message": True, "add_generation_prompt": False}
# What `LLMClient.continues_prefill` asks the server to render as the assistant's unfinished answer.
PREFILL_PROBE = "The answer so far"

# DRY for continuing an answer cut for looping: llama.cpp's default strength, over a window of the
# answer's recent tokens rather than the whole context (whose memories an answer must quote).
LOOP_RETRY_DRY_MULTIPLIER = 0.8
LOOP_RETRY_DRY_LAST_N = 128


def loop_retry_settings(settings: GenerationSettings) -> GenerationSettings:
    """`settings` for continuing an answer cut for looping: the DRY sampler on, at least at
    `LOOP_RETRY_DRY_MULTIPLIER`, over the last `LOOP_RETRY_DRY_LAST_N` tokens unless a window is set."""
    window = settings.dry_penalty_last_n if settings.dry_penalty_last_n >= 0 else LOOP_RETRY_DRY_LAST_N
    return replace(settings, dry_multiplier=max(settings.dry_multiplier, LOOP_RETRY_DRY_MULTIPLIER),
                   dry_penalty_last_n=window)


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token: its length in UTF-8 bytes and the log-probability it was sampled with."""

    size: int
    logprob: float


@dataclass(frozen=True)
class ChatChunk:
    """One streamed piece: a text delta, or (last) the finish reason and the usage. `tokens`: the
    tokens that arrived since the previous chunk, in order (empty where the server sent no
    log-probabilities); their text is the deltas', though one chunk's tokens need not be its delta."""

    delta: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None
    tokens: tuple[TokenLogprob, ...] = ()


class _RetryClosedConnection(httpx.AsyncHTTPTransport):
    """httpx's transport, sending a request once more, on a new connection, when the kept-alive
    connection it went out on was closed by the server as it arrived ("Server disconnected without
    sending a response": nothing was answered). Servers and proxies close idle connections on their
    own clocks, and the pool cannot see it coming. Only before a response: no body is read twice."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await super().handle_async_request(request)
        except httpx.RemoteProtocolError:
            return await super().handle_async_request(request)


class _RetryClosedConnectionSync(httpx.HTTPTransport):
    """`_RetryClosedConnection` for the synchronous client (`ServerTokenCounter`)."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return super().handle_request(request)
        except httpx.RemoteProtocolError:
            return super().handle_request(request)


class LLMClient:
    """Streams chat completions from an OpenAI-compatible server (llama.cpp `llama-server`).

    `timeout` bounds connecting and each wait for the next bytes (a stalled stream), not the
    whole generation.

    Requests go through one pooled `httpx.AsyncClient` per event loop (a connection belongs to the
    loop that opened it): the portal's web process runs every turn on its one loop, so they share
    the pool; a loop that has closed has its pool forgotten. Safe to share between threads.
    """

    def __init__(self, base_url: str, *, timeout: float = 60.0, connect_timeout: float = 5.0,
                 model: str = "default", api_key: str = "") -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"LLM base URL must start with http:// or https://, got {redacted(base_url)!r}")
        self.base_url = base_url.rstrip("/")
        self.shown_url = redacted(self.base_url)  # what messages name: no credentials
        self.model = model
        self.offered = Offered()  # which of llama.cpp's endpoints the server has, learnt once each
        self._api_key = api_key
        self._timeout = httpx.Timeout(timeout, connect=connect_timeout)
        self._continues_prefill: bool | None = None  # the server's answer, once it has given one
        self._pools: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}
        self._pools_lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"{self.base_url}/v1/chat/completions"

    def _http(self) -> httpx.AsyncClient:
        """The running event loop's pooled client, made on its first request."""
        loop = asyncio.get_running_loop()
        with self._pools_lock:
            client = self._pools.get(loop)
            if client is None:
                # A closed loop's connections cannot be closed any more; dropping the client lets
                # them be collected (their sockets close then).
                for closed in [other for other in self._pools if other.is_closed()]:
                    del self._pools[closed]
                client = self._pools[loop] = httpx.AsyncClient(
                    timeout=self._timeout, headers=auth_headers(self._api_key), transport=_RetryClosedConnection(
                    limits=httpx.Limits(keepalive_expiry=KEEPALIVE_SECONDS)))
            return client

    def payload(self, messages: Sequence[dict[str, str]], settings: GenerationSettings) -> dict[str, Any]:
        body = {
            "model": self.model,
            "messages": list(messages),
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": settings.temperature,
            "top_p": settings.top_p,
            "top_k": settings.top_k,
            "min_p": settings.min_p,
            "repeat_penalty": settings.repeat_penalty,
            "dry_multiplier": settings.dry_multiplier,
            "dry_base": settings.dry_base,
            "dry_allowed_length": settings.dry_allowed_length,
            "max_tokens": settings.max_tokens,
        }
        # -1 (the whole context) is llama.cpp's default and is left unsaid: servers that check the
        # field's range (xllamacpp's) refuse -1 with HTTP 400.
        if settings.dry_penalty_last_n >= 0:
            body["dry_penalty_last_n"] = settings.dry_penalty_last_n
        if settings.logprobs:
            # The sampled token's log-probability; llama.cpp sends none with top_logprobs 0.
            body.update(logprobs=True, top_logprobs=1)
        if messages and messages[-1]["role"] == "assistant":
            # A trailing assistant message is a prefill the answer continues: llama.cpp does so by
            # default under a Jinja template; these fields ask for it explicitly.
            body.update(CONTINUE_FINAL_MESSAGE)
        return body

    async def continues_prefill(self) -> bool:
        """Whether the server continues a trailing assistant message rather than closing that turn
        and answering anew: the prompt llama.cpp's `/apply-template` renders for one must end with
        it. Asked once per client (the portal keeps one per server: `chat.llm.clients.llm_client`).
        False where it does not (this llama.cpp closes the turn under the built-in Gemma template,
        and continues under a model's own Jinja template such as Qwen's), and for a server without
        the endpoint; an unreachable server is asked again next time."""
        if self._continues_prefill is not None:
            return self._continues_prefill
        messages = [{"role": "user", "content": "Hello."}, {"role": "assistant", "content": PREFILL_PROBE}]
        body = {"messages": messages, **CONTINUE_FINAL_MESSAGE}
        try:
            response = await self._http().post(f"{self.base_url}/apply-template", json=body)
            self.offered.learn("apply-template", response.status_code)
            prompt = response.json().get("prompt") if response.status_code == 200 else None
        except httpx.HTTPError:
            return False
        except (ValueError, AttributeError):  # not JSON, or not an object
            prompt = None
        self._continues_prefill = isinstance(prompt, str) and prompt.endswith(PREFILL_PROBE)
        return self._continues_prefill

    async def count_tokens(self, text: str) -> int | None:
        """Tokens of `text` by the server's own tokenizer (llama.cpp's `/tokenize`), without
        special tokens; None where the server cannot say (no endpoint, an error, unreachable)."""
        if self.offered.get("tokenize") is False:
            return None
        try:
            response = await self._http().post(f"{self.base_url}/tokenize", json=_tokenize_body(text))
        except httpx.HTTPError:
            return None
        self.offered.learn("tokenize", response.status_code)
        return _token_count(response)

    async def stream_chat(self, messages: Sequence[dict[str, str]], settings: GenerationSettings
                          ) -> AsyncIterator[ChatChunk]:
        """Yield text deltas as they arrive, then one chunk with `finish_reason` and `usage`.

        An answer that starts reciting its memories ends there (`RecitationCut`): the stream is
        closed, so llama.cpp stops, and the last chunk says "stop" without usage.

        Raises an `LLMError` subclass for every failure (connection, timeout, HTTP status,
        malformed stream); the original exception is chained.
        """
        payload = self.payload(messages, settings)
        finish_reason: str | None = None
        usage: Usage | None = None
        recitation = RecitationCut()
        tokens: list[TokenLogprob] = []  # arrived, not yet handed on with a chunk
        # Log-probabilities are kept while every byte of text so far came with its tokens; once
        # one is missing or malformed, later tokens could not be placed in the text: none are kept.
        placed = settings.logprobs
        token_bytes = text_bytes = 0
        try:
            # Leaving early (a cut, a cancelled turn) closes the response with its body unread, so
            # the pool closes that connection rather than keeping it: llama.cpp stops generating.
            async with self._http().stream("POST", self.url, json=payload) as response:
                if response.status_code != 200:
                    raise await self._status_error(response)
                done = False
                async for line in response.aiter_lines():
                    if done:
                        # Read to the response's end (the chunked body's last chunk follows [DONE]):
                        # a response read whole leaves its connection in the pool for the next one
                        # where the server keeps it (this llama.cpp closes it after a stream).
                        continue
                    event = self._parse_line(line)
                    if event is None:
                        continue
                    if event == "[DONE]":
                        done = True
                        continue
                    for choice in event.get("choices") or []:
                        text = (choice.get("delta") or {}).get("content")
                        if placed:
                            received = _token_logprobs(choice)
                            token_bytes += sum(token.size for token in received or ())
                            text_bytes += len(text.encode("utf-8")) if isinstance(text, str) else 0
                            if received is None or token_bytes < text_bytes:
                                placed = False
                                tokens.clear()
                            else:
                                tokens.extend(received)
                        if text:
                            shown = recitation.feed(text)
                            if shown:
                                yield ChatChunk(delta=shown, tokens=tuple(tokens))
                                tokens.clear()
                            if recitation.cut:
                                break
                        finish_reason = choice.get("finish_reason") or finish_reason
                    if recitation.cut:
                        finish_reason = "stop"
                        break
                    if event.get("usage"):
                        usage = _usage(event["usage"], self.shown_url)
        except httpx.TimeoutException as exc:
            raise LLMTimeoutError(f"LLM server at {self.shown_url} timed out ({type(exc).__name__})") from exc
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise LLMConnectionError(f"LLM server unreachable at {self.shown_url}: {exc or type(exc).__name__}") from exc
        except httpx.HTTPError as exc:
            raise LLMConnectionError(f"LLM request to {self.shown_url} failed: {exc or type(exc).__name__}") from exc
        held = recitation.flush()
        if held:
            yield ChatChunk(delta=held, tokens=tuple(tokens))
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

    def _scrub(self, text: str) -> str:
        return scrub(text, self._api_key)

    async def _status_error(self, response: httpx.Response) -> LLMHTTPError:
        """The error for a refused request: `LLMUnauthorizedError` for refused credentials, with
        what the server said (its text, never the key)."""
        body = (await response.aread()).decode("utf-8", errors="replace")
        said, status = self._scrub(_error_text(body)), response.status_code
        if refused(status, body):
            key = "its API key (LLM_API_KEY)" if self._api_key else "no API key: set LLM_API_KEY"
            return LLMUnauthorizedError(f"LLM server at {self.shown_url} refused the portal's credentials "
                                        f"(HTTP {status}; the portal sent {key}): {said}", status)
        return LLMHTTPError(f"LLM server at {self.shown_url} answered HTTP {status}: {said}", status)

    def _parse_line(self, line: str) -> dict[str, Any] | str | None:
        # SSE: "data: <json>" lines separated by blank lines; comments start with ":".
        if not line or line.startswith(":"):
            return None
        if not line.startswith("data:"):
            if line.startswith(("event:", "id:", "retry:")):
                return None
            raise LLMProtocolError(f"LLM server at {self.shown_url} sent a non-SSE line: {line[:200]!r}")
        data = line[5:].strip()
        if data == "[DONE]":
            return data
        try:
            event = json.loads(data)
        except json.JSONDecodeError as exc:
            raise LLMProtocolError(f"LLM server at {self.shown_url} sent invalid JSON in the stream: {data[:200]!r}") from exc
        if not isinstance(event, dict):
            raise LLMProtocolError(f"LLM server at {self.shown_url} sent a non-object event: {data[:200]!r}")
        if "error" in event:
            raise LLMHTTPError(f"LLM server at {self.shown_url} reported an error: {self._scrub(_error_text(data))}", 500)
        return event


def _token_logprobs(choice: dict[str, Any]) -> list[TokenLogprob] | None:
    """The tokens a streamed choice carries log-probabilities for (OpenAI's `logprobs.content`,
    each token's size from its `bytes`, else its text); None when an entry is malformed."""
    logprobs = choice.get("logprobs") or {}
    items = logprobs.get("content") if isinstance(logprobs, dict) else None
    out: list[TokenLogprob] = []
    for item in items or ():
        if not isinstance(item, dict) or isinstance(item.get("logprob"), bool) \
                or not isinstance(item.get("logprob"), int | float):
            return None
        raw = item.get("bytes")
        size = len(raw) if isinstance(raw, list) else len(str(item.get("token", "")).encode("utf-8"))
        out.append(TokenLogprob(size, float(item["logprob"])))
    return out


@dataclass(frozen=True)
class Rewind:
    """The answer began looping: what streamed after `kept` is taken back, and it goes on from `kept`."""

    kept: str


@dataclass(frozen=True)
class AnswerEnd:
    """How a guarded answer ended: its text, and whether it was cut for looping (`looping`, after
    beginning to loop `loops` times in all)."""

    content: str
    finish_reason: str
    usage: Usage | None
    loops: int
    looping: bool


# A token's place in an answer: [start, end) in the UTF-8 bytes of its text, and its log-probability.
TokenSpan = tuple[int, int, float]


class AnswerTokens:
    """The log-probabilities of a guarded answer's tokens (`stream_answer`'s events fed in order),
    as byte spans of its text: a `Rewind` drops the tokens past the kept text, and the
    continuation's follow it. Tokens past the answer's end (a cut tail) are left for the reader
    to ignore. Empty where the server sent none."""

    def __init__(self) -> None:
        self.spans: list[TokenSpan] = []
        self._end = 0

    def feed(self, event: ChatChunk | Rewind | AnswerEnd) -> None:
        if isinstance(event, Rewind):
            self._end = len(event.kept.encode("utf-8"))
            self.spans = [span for span in self.spans if span[1] <= self._end]
        elif isinstance(event, ChatChunk):
            for token in event.tokens:
                self.spans.append((self._end, self._end + token.size, token.logprob))
                self._end += token.size


async def stream_answer(client: LLMClient, messages: list[dict[str, str]], settings: GenerationSettings, *,
                        loop_retries: int) -> AsyncIterator[ChatChunk | Rewind | AnswerEnd]:
    """One answer with the repetition guard watching: the chunks that carry text, a `Rewind` each
    time a loop is cut and continued, then one `AnswerEnd`.

    A loop is cut where it began (leaving the stream closes it, and llama.cpp stops) and, up to
    `loop_retries` times where the server can continue an answer, continued from the cut: the kept
    text as the assistant's prefilled message, sampled with `loop_retry_settings`. Otherwise the
    answer ends at the cut, `looping`. The one mechanism of the portal's chat and the
    OpenAI-compatible replies (a stream passes 0: what it sent cannot be taken back).

    The usage is the whole answer's: a continuation's request holds the kept text in its prompt,
    so those tokens (counted by the server's tokenizer) move from its prompt to the completion;
    None where they cannot be counted, and where the last request was cut (no usage was sent)."""
    kept, loops, request = "", 0, (messages, settings)
    kept_tokens: int | None = 0
    while True:
        parts = [kept]
        finish_reason, usage = "", None
        guard = RepetitionGuard()
        guard.feed(kept)  # a loop in the continuation may repeat what was kept
        async with contextlib.aclosing(client.stream_chat(*request)) as stream:
            async for chunk in stream:
                if chunk.delta:
                    parts.append(chunk.delta)
                    yield chunk
                    if guard.feed(chunk.delta):
                        break
                usage = chunk.usage or usage
                finish_reason = chunk.finish_reason or finish_reason
        usage = _whole_answer_usage(usage, kept_tokens)
        if not guard.looping:
            yield AnswerEnd("".join(parts), finish_reason, usage, loops, looping=False)
            return
        loops += 1
        if loops > loop_retries or not await client.continues_prefill():
            yield AnswerEnd(guard.kept, finish_reason, usage, loops, looping=True)
            return
        kept = guard.kept
        kept_tokens = await client.count_tokens(kept) if kept else 0
        yield Rewind(kept)
        request = ([*messages, {"role": "assistant", "content": kept}] if kept else messages,
                   loop_retry_settings(settings))


def _whole_answer_usage(usage: Usage | None, kept_tokens: int | None) -> Usage | None:
    """A request's usage as the answer's: the `kept_tokens` of the answer it continued (prefilled,
    so counted in its prompt) moved to the completion; None where they are unknown."""
    if usage is None or kept_tokens is None:
        return None
    return Usage(prompt_tokens=max(0, usage.prompt_tokens - kept_tokens),
                 completion_tokens=usage.completion_tokens + kept_tokens)


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


def user_turn_with_memories(question: str, memories: Sequence[str]) -> str:
    """The new user turn: each retrieved memory in `<memory>` tags, then the question.

    `memories` are best first and are written best last, so the best one stands next to the
    question. Paired on `bench.answers` (each question asked both ways in one run): the Jargon File
    40.0 % grounded against 28.9 % best first, the manual pages 55.6 against 48.9 %, the demo set
    70.2 against 73.1 % (2 rounds); 27 answers grounded only best last, 22 only best first."""
    texts = [text.strip() for text in memories if text.strip()]
    return "".join(MEMORY_OPEN + text + MEMORY_CLOSE for text in reversed(texts)) + ("\n" if texts else "") + question


def message_tokens(tokenizer: TokenCounter, content: str) -> int:
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

    def search_budget(self, *, system_prompt: str, user_message: str, tokenizer: TokenCounter, requested: int,
                      memory_count: int = 8) -> int:
        """Tokens retrieval may fill: `requested`, capped so the system prompt, the new turn and the
        tags of up to `memory_count` memories fit beside the generation reserve."""
        # Tags cost a little more inside a turn than alone (merges at their edges): 2 tokens each.
        tags = memory_count * (tokenizer.count_tokens(MEMORY_OPEN + MEMORY_CLOSE) + 2) + 2
        fixed = (TEMPLATE_TOKENS + message_tokens(tokenizer, system_prompt)
                 + message_tokens(tokenizer, user_message) + tags)
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
    memories_used: int = 0  # how many of the given memories (the best first) the new turn carries

    @property
    def prompt_tokens(self) -> int:
        return TEMPLATE_TOKENS + self.system_tokens + self.history_tokens + self.user_tokens


def assemble_prompt(*, system_prompt: str, history: Sequence[tuple[Role, str]], user_message: str,
                    tokenizer: TokenCounter, budget: ContextBudget, memories: Sequence[str] = ()) -> PromptPlan:
    """System message + as much recent history as fits + the new user turn with its `memories`.

    `history` is oldest first, as (role, text) with role "user" or "assistant". Whole messages
    are dropped from the oldest end; the kept history always starts with a user turn, so the
    template sees alternating turns. `memories` are best first: when they do not all fit (they were
    counted in another model's tokens, say), the last ones are left out. Raises
    `PromptTooLongError` when the system prompt and the bare new turn alone exceed the budget.
    """
    for number, (role, _) in enumerate(history):
        if role not in ("user", "assistant"):
            raise ValueError(f"history[{number}]: role must be 'user' or 'assistant', got {role!r}")
    system_tokens = message_tokens(tokenizer, system_prompt) if system_prompt else 0
    memories_used = len(memories)
    while True:
        turn = user_turn_with_memories(user_message, memories[:memories_used])
        user_tokens = message_tokens(tokenizer, turn)
        room = budget.prompt - TEMPLATE_TOKENS - system_tokens - user_tokens
        if room >= 0 or memories_used == 0:
            break
        memories_used -= 1
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
    messages.append({"role": "user", "content": turn})
    return PromptPlan(messages=messages, system_tokens=system_tokens, history_tokens=used, user_tokens=user_tokens,
                      dropped_messages=start, budget=budget, memories_used=memories_used)
