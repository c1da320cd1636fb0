"""The sampling parameters sent with each chat request, and those for continuing an answer cut
for looping."""

from __future__ import annotations

from dataclasses import dataclass, replace

from engine.config import Config, Range, check_ranges

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
