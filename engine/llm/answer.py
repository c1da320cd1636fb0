"""One answer with the repetition guard watching (`stream_answer`: a loop is cut, taken back and
continued), and the log-probabilities of its tokens as byte spans of its text (`AnswerTokens`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from engine.llm.client import LLMClient
from engine.llm.sampling import GenerationSettings, loop_retry_settings
from engine.llm.stream import ChatChunk, Usage
from engine.repetition import RepetitionGuard


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
