"""The async client that streams chat completions from an OpenAI-compatible server (llama.cpp's
`/v1/chat/completions`), and asks it what llama.cpp offers beside them (`/tokenize`,
`/apply-template`).

The client is async (httpx) so a websocket consumer streams without blocking its event loop.
Cancelling the consuming task, or closing the iterator, closes the HTTP response, and llama.cpp
stops generating for a closed connection. Both clients of the chat model (this one and
`engine.llm.tokens.ServerTokenCounter`) keep one pooled httpx client (per event loop for the async
one) rather than one per call: making an httpx client loads the CA bundle into a new SSL context,
tens of milliseconds before the first byte is sent (`bench/llm_client.py`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx

from engine.llm.errors import LLMConnectionError, LLMHTTPError, LLMTimeoutError, LLMUnauthorizedError
from engine.llm.sampling import GenerationSettings
from engine.llm.stream import ChatChunk, CompletionStream, error_text, sse_lines
from engine.llm.tokens import token_count, tokenize_body
from engine.llm.transport import KEEPALIVE_SECONDS, RetryClosedConnection
from engine.llm_access import Offered, auth_headers, redacted, refused, scrub

# Asks for a trailing assistant message to be continued, not answered anew (vLLM's names, which
# llama.cpp also reads); `LLMClient.continues_prefill` asks with them too, so it asks as a chat does.
CONTINUE_FINAL_MESSAGE = {"continue_final_message": True, "add_generation_prompt": False}
# What `LLMClient.continues_prefill` asks the server to render as the assistant's unfinished answer.
PREFILL_PROBE = "The answer so far"


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
                    timeout=self._timeout,
                    headers=auth_headers(self._api_key),
                    transport=RetryClosedConnection(limits=httpx.Limits(keepalive_expiry=KEEPALIVE_SECONDS)),
                )
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
            response = await self._http().post(f"{self.base_url}/tokenize", json=tokenize_body(text))
        except httpx.HTTPError:
            return None
        self.offered.learn("tokenize", response.status_code)
        return token_count(response)

    async def stream_chat(self, messages: Sequence[dict[str, str]], settings: GenerationSettings
                          ) -> AsyncIterator[ChatChunk]:
        """Yield text deltas as they arrive, then one chunk with `finish_reason` and `usage`.

        An answer that starts reciting its memories ends there (`RecitationCut`): the stream is
        closed, so llama.cpp stops, and the last chunk says "stop" without usage.

        Raises an `LLMError` subclass for every failure (connection, timeout, HTTP status,
        malformed stream); the original exception is chained.
        """
        payload = self.payload(messages, settings)
        stream = CompletionStream(shown_url=self.shown_url, logprobs=settings.logprobs, scrub=self._scrub)
        try:
            # Leaving early (a cut, a cancelled turn) closes the response with its body unread, so
            # the pool closes that connection rather than keeping it: llama.cpp stops generating.
            async with self._http().stream("POST", self.url, json=payload) as response:
                if response.status_code != 200:
                    raise await self._status_error(response)
                async for line in sse_lines(response.aiter_text()):
                    for chunk in stream.read(line):
                        yield chunk
                    if stream.cut:
                        break
        except httpx.TimeoutException as exc:
            raise LLMTimeoutError(f"LLM server at {self.shown_url} timed out ({type(exc).__name__})") from exc
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise LLMConnectionError(
                f"LLM server unreachable at {self.shown_url}: {exc or type(exc).__name__}"
            ) from exc
        except httpx.HTTPError as exc:
            raise LLMConnectionError(
                f"LLM request to {self.shown_url} failed: {exc or type(exc).__name__}"
            ) from exc
        for chunk in stream.end():
            yield chunk

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
        said, status = self._scrub(error_text(body)), response.status_code
        if refused(status, body):
            key = "its API key (LLM_API_KEY)" if self._api_key else "no API key: set LLM_API_KEY"
            return LLMUnauthorizedError(f"LLM server at {self.shown_url} refused the portal's credentials "
                                        f"(HTTP {status}; the portal sent {key}): {said}", status)
        return LLMHTTPError(f"LLM server at {self.shown_url} answered HTTP {status}: {said}", status)
