"""Retrieval channels: the rankers a search fuses with HDC, one protocol for all of them.

A channel ranks a build's rows by another method than HDC: exact words (BM25, `engine.lexical`),
late interaction (exact MaxSim over the model's token vectors, `engine.text_store`) and meaning
(a sentence encoder's vectors, `engine.meaning`). Each is a `Channel`:

* `name`: its key in `SearchTarget.channels` (`WORDS`, `LATE_INTERACTION`, `MEANING`);
* `file`: what a build writes for it into the build's directory (each channel's module has its
  writer: `WordIndex.build(...).save`, `text_store_fill`, `write_meaning`), and reads back;
* `query(text)`: the channel bound to one query (`ChannelQuery`), which scores rows, texts that are
  not rows, and names the channel's own best rows;
* `gate`: how it joins a search and how the gate (`engine.gate.channel_evidence`) chooses its
  fusion rule from the build's own self-queries (`Gate`).

A search fuses in two stages (`engine.stages`): the `FIRST` stage re-scores HDC's candidates and
fuses the scores under the target's rule (words or late interaction, one per corpus); the `SECOND`
fuses that order by rank with the channel's own ranking (meaning). A target holds its channels by
name, and the rule each was measured to fuse under (`SearchTarget`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from engine.fusion import CHOSEN_RULES, SELF_QUERY_KINDS, FusionChoice
from engine.loaded_build import LoadedIndex, MemoryStore

WORDS = "words"
LATE_INTERACTION = "late_interaction"
MEANING = "meaning"
FIRST, SECOND = 1, 2  # the stages of a search a channel joins (module docstring)
# The rule of a channel whose target names none (no rule measured): equal-weight RRF.
UNMEASURED_RULE = "rrf:1"

# rows (m,) int64 -> bool (m,): which rows a target's dataset filter lets through.
RowFilter = Callable[[np.ndarray], np.ndarray]


class ChannelUnavailable(RuntimeError):
    """A channel that cannot answer now (e.g. an encoder that cannot load): the search goes on
    without it, in the order the stages before it gave."""


@dataclass(frozen=True)
class Gate:
    """How a channel joins a search and how its rule is chosen from a build's self-queries.

    `stage`: `FIRST` (its scores fused with HDC's) or `SECOND` (its ranking fused by rank with the
    first stage's order); `candidates`: how many of its own best rows join the pool (0: it only
    re-scores); `fallback`: the rule kept where no rule wins significantly; `rules`: those the
    gate chooses among; `kinds`: the self-queries it asks (`engine.fusion.SELF_QUERY_KINDS`);
    `samples`: how many memories they are made from; `ranks`: how deep its own ranking of every
    row is read for RRF, a candidate ranked as it ranks among all rows (none past that depth), as
    reciprocal rank fusion ranks (0: ranked among the pool's candidates only); `stays`: the
    fallback stands unless another rule beats it significantly (else: unless the order before
    the channel beats it), `engine.fusion.choose_fusion`."""

    stage: int
    candidates: int
    fallback: str
    rules: tuple[str, ...] = CHOSEN_RULES
    kinds: tuple[str, ...] = SELF_QUERY_KINDS
    samples: int = 64
    ranks: int = 0
    stays: bool = False


class ChannelQuery(Protocol):
    """A channel bound to one query, scored at first use and once. Each method may raise
    `ChannelUnavailable`."""

    def scores(self, rows: np.ndarray) -> np.ndarray:
        """Scores (m,) float64 of the build's `rows` (m,) int64, higher is better; nan: not scored."""
        ...

    def best(self, k: int, keep: RowFilter | None = None) -> np.ndarray:
        """Its own best rows (<= k,) int64 above 0, best first, among those `keep` keeps; none for
        a channel that only re-scores (`Gate.candidates` 0)."""
        ...

    def text_scores(self, texts: Sequence[str]) -> np.ndarray:
        """Scores (n,) float64 of texts that are not rows (the gate's held-out rest of a memory)."""
        ...


class Channel(Protocol):
    """A ranker of a build's rows beside HDC (module docstring)."""

    name: str
    file: str
    gate: Gate

    def query(self, query: str) -> ChannelQuery: ...


def rows_of(scores: np.ndarray | None, rows: np.ndarray | Iterable[int]) -> np.ndarray:
    """The scores (m,) float64 of `rows` among every row's `scores` (count,): nan for a row outside
    them, and everywhere where `scores` is None (nothing scored, e.g. a query without an indexed word)."""
    rows = np.asarray(list(rows) if not isinstance(rows, np.ndarray) else rows, dtype=np.int64)
    out = np.full(rows.shape[0], np.nan)
    if scores is None:
        return out
    inside = (rows >= 0) & (rows < scores.shape[0])
    out[inside] = scores[rows[inside]]
    return out


def best_rows(scores: np.ndarray | None, k: int, keep: RowFilter | None = None) -> np.ndarray:
    """The rows (<= k,) int64 of the `k` highest of `scores` (count,) above 0, best first (lower row
    first among equal scores; which of several rows tied at the k-th score are taken is the
    selection's), among those `keep` keeps (None: all); none for None scores."""
    if scores is None or k <= 0:
        return np.zeros(0, dtype=np.int64)
    hits = np.flatnonzero(scores > 0)
    if keep is not None:
        # The filter asked of the best few first (most rows pass it), of every hit only if too few did.
        first = _best(hits, scores, 4 * k)
        kept = first[keep(first)]
        hits = kept if kept.size >= k or first.size == hits.size else hits[keep(hits)]
    return _best(hits, scores, k)


def ranks_in(rows: np.ndarray, ranking: np.ndarray) -> np.ndarray:
    """Each of `rows` (m,) at its 1-based rank in `ranking` (a channel's best rows, best first):
    (m,) float64, inf for a row past it."""
    at = {int(row): rank for rank, row in enumerate(ranking.tolist(), start=1)}
    return np.array([at.get(int(row), np.inf) for row in rows], dtype=np.float64)


def _best(rows: np.ndarray, scores: np.ndarray, k: int) -> np.ndarray:
    """`rows` (m,) less all but `k` of the highest `scores`, best first (lower row first on ties)."""
    if rows.size > k:
        top = np.argpartition(-scores[rows], k - 1)[:k]
        rows = rows[top]
    return rows[np.lexsort((rows, -scores[rows]))].astype(np.int64)


@dataclass(frozen=True)
class SearchTarget:
    """One corpus to search: its loaded build, where its texts live, its dataset filter, and its
    channels by name with the rule each fuses under (`rules`, by the same names; a channel without
    one: `UNMEASURED_RULE`; rule "hdc": the channel is not asked). At most one channel per stage."""

    corpus: LoadedIndex
    store: MemoryStore
    name: str = ""
    enabled_sources: frozenset[int] | None = None
    channels: Mapping[str, Channel] = field(default_factory=dict)
    rules: Mapping[str, FusionChoice] = field(default_factory=dict)

    def __post_init__(self) -> None:
        misnamed = [key for key, channel in self.channels.items() if key != channel.name]
        if misnamed:
            raise ValueError(f"channels must be held by their own names, not {misnamed}")
        stages = [channel.gate.stage for channel in self.channels.values()]
        if len(stages) != len(set(stages)):
            raise ValueError(f"one channel per stage, got {sorted(self.channels)}")
        if not set(self.rules) <= set(self.channels):
            raise ValueError(f"rules {sorted(self.rules)} for channels {sorted(self.channels)}")

    def rule(self, name: str) -> str:
        """The rule channel `name` fuses under."""
        choice = self.rules.get(name)
        return choice.rule if choice is not None else UNMEASURED_RULE

    def channel(self, stage: int) -> Channel | None:
        """The channel of `stage`, whatever its rule; None: the target has none."""
        return next((c for c in self.channels.values() if c.gate.stage == stage), None)

    def fused(self, stage: int) -> Channel | None:
        """The channel of `stage` where its rule asks it (not "hdc"), else None."""
        channel = self.channel(stage)
        return channel if channel is not None and self.rule(channel.name) != "hdc" else None

    def source_filter(self) -> RowFilter | None:
        """Which rows the dataset filter lets through; None: all."""
        if self.enabled_sources is None:
            return None
        enabled = np.fromiter(self.enabled_sources, dtype=np.int64)
        sources = self.corpus.index.source_ids
        return lambda rows: np.isin(sources[rows], enabled)
