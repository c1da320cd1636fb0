"""Prompt assembly, following the spec's budget, `llama_context_size = search + generation + system +
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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from engine.config import Config
from engine.llm.errors import PromptTooLongError

TEMPLATE_TOKENS = 4
MESSAGE_TOKENS = 6
MEMORY_OPEN, MEMORY_CLOSE = "<memory>\n", "\n</memory>\n"
MEMORY_TAGS = (MEMORY_OPEN.strip(), MEMORY_CLOSE.strip())

Role = Literal["user", "assistant"]


class TokenCounter(Protocol):
    """What prompt assembly needs of a tokenizer (every `engine.tokenizer.Tokenizer` is one, and
    `engine.llm.tokens.ServerTokenCounter`)."""

    def count_tokens(self, text: str) -> int: ...


def user_turn_with_memories(question: str, memories: Sequence[str]) -> str:
    """The new user turn: each retrieved memory in `<memory>` tags, then the question.

    `memories` are best first and are written best last, so the best one stands next to the
    question. Paired on `bench.answers` (each question asked both ways in one run): the Jargon File
    40.0 % grounded against 28.9 % best first, the manual pages 55.6 against 48.9 %, the demo set
    70.2 against 73.1 % (2 rounds); 27 answers grounded only best last, 22 only best first."""
    texts = [text.strip() for text in memories if text.strip()]
    return (
        "".join(MEMORY_OPEN + text + MEMORY_CLOSE for text in reversed(texts))
        + ("\n" if texts else "")
        + question
    )


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


def assemble_prompt(
    *,
    system_prompt: str,
    history: Sequence[tuple[Role, str]],
    user_message: str,
    tokenizer: TokenCounter,
    budget: ContextBudget,
    memories: Sequence[str] = (),
) -> PromptPlan:
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
            f"prompt budget of {budget.prompt} tokens (context {budget.context_size} - generation "
            f"{budget.generation})"
        )
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
    return PromptPlan(
        messages=messages,
        system_tokens=system_tokens,
        history_tokens=used,
        user_tokens=user_tokens,
        dropped_messages=start,
        budget=budget,
        memories_used=memories_used,
    )
