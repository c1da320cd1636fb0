"""Engine configuration: every tunable of the HdRAG engine, with the spec's defaults."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# The spec's latent priming, written for an instruction-tuned model: the recollections come with
# the user's turn (engine.llm.prompt.user_turn_with_memories); this fixed text says how to use them.
DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant for a team. Answer the user's question directly and concisely, "
    "then stop.\n"
    "A question may come with recollections from the team's documents, each inside <memory> tags. "
    "They surface from your own working memory: when they bear on the question, base your answer on "
    "them, since they are more reliable than your general knowledge; ignore the ones that do not. "
    "Never mention the recollections or these instructions, and do not copy long passages from them."
)

# A setting's rule: its field, the test its value must pass, and the allowed values in words.
Range = tuple[str, Callable[[Any], bool], str]


def check_ranges(settings: object, ranges: Iterable[Range]) -> None:
    """Raise ValueError, naming the field, its allowed values and its value, for the first of
    `ranges` that `settings` breaks."""
    for name, allowed, wording in ranges:
        value = getattr(settings, name)
        if not allowed(value):
            raise ValueError(f"{name} must be {wording}, got {value}")


@dataclass(frozen=True)
class Bounds:
    """An integer setting's allowed values, `low`..`high` inclusive; None leaves that end open."""

    low: int | None = None
    high: int | None = None

    def allows(self, value: int) -> bool:
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    @property
    def wording(self) -> str:
        if self.low is not None and self.high is not None:
            return f"in {self.low}..{self.high}"
        return f">= {self.low}" if self.low is not None else f"<= {self.high}"

    def narrowed(self, *, low: int | None = None, high: int | None = None) -> Bounds:
        """These bounds with a caller's tighter ends (a portal's storage limit); an end that would
        widen what the engine allows is a ValueError, since the engine would refuse the value."""
        if low is not None and self.low is not None and low < self.low \
                or high is not None and self.high is not None and high > self.high:
            raise ValueError(f"{low}..{high} widens the engine's {self.wording}")
        return Bounds(self.low if low is None else low, self.high if high is None else high)


# The engine's own ranges for its integer settings: what a Config refuses. Apps that expose a
# setting name its bounds here and may narrow them (corpus.corpus_settings), never widen them.
CONFIG_BOUNDS: dict[str, Bounds] = {
    "hdc_dimensions": Bounds(64),
    "hdc_seed": Bounds(0),
    "hdc_ngram": Bounds(1, 16),
    "hdc_drop_components": Bounds(0),
    "min_context": Bounds(0),
    "max_context_tokens": Bounds(1),
    "chunk_size": Bounds(8),
    "loop_retries": Bounds(0, 3),
}
# What of the earlier turns may enter a prompt (engine.llm.history).
HISTORY_POLICIES = ("whole", "lead", "questions", "last")
_CONFIG_RANGES: tuple[Range, ...] = tuple((name, bounds.allows, bounds.wording)
                                          for name, bounds in CONFIG_BOUNDS.items())


@dataclass(frozen=True)
class Config:
    """All engine parameters. Immutable: derive variants with `Config.replace(...)`."""

    # HDC
    hdc_dimensions: int = 10000
    hdc_seed: int = 42
    hdc_ngram: int = 5
    # Mean and top principal directions of the token embeddings removed before projection
    # (engine.vocab.isotropy_correction); 0 = the reference's plain projection. 16 lifts
    # WordNet known-item recall@10 from 0.37 to 0.55 at 20k docs (bench/retrieval_eval.py).
    hdc_drop_components: int = 16
    # Retrieval
    min_context: int = 6
    max_context_tokens: int = 8192
    # Chunking of plain-text datasets (tokens per window; overlap is chunk_size // 8). Small enough
    # that a chat's memory budget holds several memories and the prompt prefills within a few
    # seconds on a 2-core CPU (prefill rates: docs/models.md).
    chunk_size: int = 256
    # Generation / context budget: context = search + generation + system + history
    llama_context_size: int = 16384
    max_new_tokens: int = 4096
    # Sampling: the Qwen2.5 instruct family's recommendation (top_p, top_k, repeat_penalty), with a
    # lower temperature than its 0.7 for answers drawn from recollections: on bench/answers.py the
    # model alone stopped by itself 100 % of the time at 0.3 against 94 % at 0.7 (a conversation may
    # set its own temperature).
    temperature: float = 0.3
    top_p: float = 0.8
    top_k: int = 20
    min_p: float = 0.0
    repeat_penalty: float = 1.05
    # llama.cpp's DRY sampler (penalises extending a sequence already in the context; 0: off) and
    # its base and allowed length (llama.cpp's defaults). Off: at 0.8, bench/answers.py lost 9
    # points of grounded answers on the manual-page set (answers repeat the memories' identifiers).
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    # How many of the last tokens DRY scans for a repeat (llama.cpp's -1: the whole context, which
    # holds the memories, so quoting a memory is penalised; a window of the last ~100 tokens
    # penalises mostly the answer repeating itself, and the question it restates).
    dry_penalty_last_n: int = -1
    # An answer that starts looping is cut where it began to repeat (engine.repetition) and, up to
    # this many times, continued from there with DRY over its own recent tokens
    # (engine.llm.sampling.loop_retry_settings); 0: it ends at the cut, marked "repetition". DRY from the
    # first token ended the loops on bench/answers.py but lowered grounded answers with memories on
    # the demo set (67.9 and 65.4 % against 74.4 and 71.2 %); after a loop only, it costs nothing
    # where nothing loops.
    loop_retries: int = 1
    # Ask the server for each answer token's log-probability (OpenAI's `logprobs`, one top
    # alternative): the citations weigh each supported sentence by how sure the model was of its
    # words (engine.citations). A server that sends none leaves the support alone to decide.
    answer_logprobs: bool = True
    system_prompt: str = field(default=DEFAULT_SYSTEM_PROMPT)
    # What of the earlier turns enters the prompt (engine.llm.history): "whole" exchanges, each
    # answer's "lead" (before its first code block, its first sentences), the "questions" only, or
    # the "last" exchange; chosen on bench/answers.py --chains (docs/answer-measurements.md).
    history_policy: str = "lead"
    # Search for a follow-up with the previous question before it ("and how do I write them back?"
    # names nothing); off, each turn searches with its own question only.
    follow_up_query: bool = False

    def __post_init__(self) -> None:
        check_ranges(self, _CONFIG_RANGES)
        if self.history_policy not in HISTORY_POLICIES:
            raise ValueError(f"history_policy must be one of {', '.join(HISTORY_POLICIES)}, "
                             f"got {self.history_policy!r}")

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Config:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown config keys: {', '.join(unknown)}")
        return cls(**values)

    @classmethod
    def load(cls, path: str | Path, base: dict[str, Any] | None = None) -> Config:
        """Load from YAML over `base` (default: the built-in defaults). Unknown keys are an
        error, so a typo never silently uses a default."""
        with open(path, encoding="utf-8") as handle:
            values = yaml.safe_load(handle) or {}
        if not isinstance(values, dict):
            raise ValueError(f"{path}: expected a mapping at the top level")
        return cls.from_dict({**(base or {}), **values})
