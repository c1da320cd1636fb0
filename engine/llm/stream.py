"""Reading one streamed chat completion (OpenAI's server-sent events, as llama.cpp sends them)
into `ChatChunk`s: text deltas with the tokens that came with them, then the finish reason and
the usage. An answer that starts reciting its memories is ended there (`RecitationCut`)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from engine.llm.errors import LLMHTTPError, LLMProtocolError
from engine.llm.prompt import MEMORY_TAGS

# An event stream's lines end at CRLF, LF or CR, and only there: a JSON string may hold U+2028, U+2029
# or NEL (U+0085) raw, where str.splitlines (and httpx's aiter_lines) would cut the line in two.
_SSE_LINE_END = re.compile(r"\r\n|\r|\n")


async def sse_lines(texts: AsyncIterator[str]) -> AsyncIterator[str]:
    """The lines of an event stream read as text in pieces (`httpx.Response.aiter_text`), split where
    the SSE format ends a line only. A CRLF split between two pieces ends its line at the CR and
    makes an empty line of the LF, which an SSE reader skips."""
    pending = ""
    async for text in texts:
        *lines, pending = _SSE_LINE_END.split(pending + text)
        for line in lines:
            yield line
    if pending:
        yield pending


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


class CompletionStream:
    """One streamed completion read into chunks: `read` each line as it arrives, then `end`.

    Text passes through a `RecitationCut`; once it has ended the answer (`cut`), read no more: the
    last chunk says "stop" without usage. Log-probabilities are kept while every byte of text so
    far came with its tokens; once one is missing or malformed, later tokens could not be placed in
    the text: none are kept. `scrub` takes the API key out of what the server said in an error."""

    def __init__(self, *, shown_url: str, logprobs: bool, scrub: Callable[[str], str]) -> None:
        self.shown_url = shown_url
        self._scrub = scrub
        self._recitation = RecitationCut()
        self._finish_reason: str | None = None
        self._usage: Usage | None = None
        self._tokens: list[TokenLogprob] = []  # arrived, not yet handed on with a chunk
        self._placed = logprobs
        self._token_bytes = self._text_bytes = 0
        self._done = False

    @property
    def cut(self) -> bool:
        return self._recitation.cut

    def read(self, line: str) -> Iterator[ChatChunk]:
        """The chunks one line of the response gives, as its choices are read."""
        if self._done:
            # Lines after [DONE] are read and ignored: a response read to its end (the chunked
            # body's last chunk follows [DONE]) leaves its connection in the pool for the next one
            # where the server keeps it (this llama.cpp closes it after a stream).
            return
        event = self._event(line)
        if event is None:
            return
        if event == "[DONE]":
            self._done = True
            return
        for choice in event.get("choices") or []:
            chunk = self._choice(choice)
            if chunk is not None:
                yield chunk
            if self.cut:
                self._finish_reason = "stop"
                return
        if event.get("usage"):
            self._usage = _usage(event["usage"], self.shown_url)

    def end(self) -> list[ChatChunk]:
        """The last chunks: the text held back, if any, then the finish reason and the usage."""
        held = self._recitation.flush()
        last = [ChatChunk(delta=held, tokens=tuple(self._tokens))] if held else []
        return [*last, ChatChunk(finish_reason=self._finish_reason, usage=self._usage)]

    def _choice(self, choice: dict[str, Any]) -> ChatChunk | None:
        """The chunk a choice's text gives (None where none may be shown yet), with the tokens that
        arrived since the last one; its finish reason is kept unless the text ended the answer."""
        text = (choice.get("delta") or {}).get("content")
        if self._placed:
            self._place_tokens(choice, text)
        chunk = None
        if text:
            shown = self._recitation.feed(text)
            if shown:
                chunk = ChatChunk(delta=shown, tokens=tuple(self._tokens))
                self._tokens.clear()
            if self._recitation.cut:
                return chunk
        self._finish_reason = choice.get("finish_reason") or self._finish_reason
        return chunk

    def _place_tokens(self, choice: dict[str, Any], text: object) -> None:
        """Keep the choice's tokens while they cover the text so far; else stop keeping any."""
        received = token_logprobs(choice)
        self._token_bytes += sum(token.size for token in received or ())
        self._text_bytes += len(text.encode("utf-8")) if isinstance(text, str) else 0
        if received is None or self._token_bytes < self._text_bytes:
            self._placed = False
            self._tokens.clear()
        else:
            self._tokens.extend(received)

    def _event(self, line: str) -> dict[str, Any] | str | None:
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
            raise LLMProtocolError(
                f"LLM server at {self.shown_url} sent invalid JSON in the stream: {data[:200]!r}"
            ) from exc
        if not isinstance(event, dict):
            raise LLMProtocolError(f"LLM server at {self.shown_url} sent a non-object event: {data[:200]!r}")
        if "error" in event:
            raise LLMHTTPError(
                f"LLM server at {self.shown_url} reported an error: {self._scrub(error_text(data))}", 500
            )
        return event


def token_logprobs(choice: dict[str, Any]) -> list[TokenLogprob] | None:
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


def error_text(body: str) -> str:
    """What an error body says: OpenAI's `error.message`, else its `error`, else the body itself
    (at most 300 characters)."""
    try:
        error = json.loads(body).get("error")
    except (json.JSONDecodeError, AttributeError):
        return body[:300]
    if isinstance(error, dict):
        return str(error.get("message", error))[:300]
    return str(error)[:300]


def _usage(data: dict[str, Any], base_url: str) -> Usage:
    try:
        return Usage(
            prompt_tokens=int(data["prompt_tokens"]), completion_tokens=int(data["completion_tokens"])
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise LLMProtocolError(f"LLM server at {base_url} sent malformed usage: {data!r:.200}") from exc
