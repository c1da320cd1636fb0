"""The candidates of a search after the index has scored them, and how they are ranked and chosen:
dedup, HDC-MMR under the token budget, and merging several targets' rankings into one.

* Dedup: a candidate whose lower-cased word set (regex \\w+) is a subset of a better-ranked kept
  candidate's is dropped; a kept candidate whose word set is a strict subset of a new one is
  replaced by it (the fuller text wins, in the better rank). Empty texts are dropped.
* HDC-MMR: coverage C is a ternary vector, starting at 0. novelty(x) = share of x's nonzero dims
  where C = 0; null_novelty = 1 - density(C) (a random vector's expected novelty);
  marginal = score * novelty / null_novelty. Greedy: take the best marginal that fits the
  remaining token budget; stop when nothing fits, or when the best marginal is <= 0 and
  `min_context` documents are already chosen. C absorbs a choice: C = x where C = 0, C stays
  where x agrees or is 0, and C = 0 where they collide (opposite signs).
* The score MMR weighs (`mmr_scores`): a candidate's HDC score; where the search fused or merged,
  the pool's own scores (HDC, or the merge keys), best first, handed out in the fused order. The
  fused score itself, 1 / (60 + rank), is nearly flat (rank 1 and rank 30 differ by a third), so
  novelty outweighed it: with a 512-token budget (two memories) the second pick was often a
  barely related memory, not the next of the page the first came from (`bench.answers
  --retrieval-only`: the fact was primed for 2 more questions of 45 on manual pages, the Jargon
  File and kernel docs each, 1 more of 52 on the demo corpus, none fewer, at 512 tokens; 0-4 more
  at 1,024 and 2,048).
* Several targets: `merge_targets` (see there; the retriever's module docstring says how the
  search uses the merged order).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from engine.fusion import DEFAULT_K
from engine.lexical import words
from engine.loaded_build import MemoryRecord


@dataclass
class Candidate:
    """A row the index found for the search's `target`-th target, with its HDC `score`, and what
    later stages learn of it (its memory and word set, its late and fused scores, its merge key)."""

    target: int
    row: int
    score: int
    memory: MemoryRecord | None = None
    words: frozenset[str] = frozenset()
    late: float | None = None  # the first-stage channel's score (`engine.stages`), when it scored this row
    meaning: float | None = None  # the meaning channel's cosine (`engine.meaning`), when it scored this row
    fused: float = 0.0  # 1 / (60 + rank in its target's fused order), when the search fuses
    merge: float | None = None  # several targets: the key they are merged by (`merge_targets`)


def dedup(candidates: list[Candidate]) -> list[Candidate]:
    """`candidates` (best first, with their memories) less those another one's words cover (see the
    module docstring)."""
    kept: list[Candidate] = []
    for candidate in candidates:
        if not candidate.words or any(candidate.words <= other.words for other in kept):
            continue
        subsumed = [i for i, other in enumerate(kept) if other.words < candidate.words]
        if not subsumed:
            kept.append(candidate)
            continue
        kept[subsumed[0]] = candidate
        kept = [other for i, other in enumerate(kept) if i not in subsumed[1:]]
    return kept


def hdc_mmr(pos: np.ndarray, neg: np.ndarray, scores: np.ndarray, token_counts: np.ndarray, dims: int,
            token_budget: int, min_context: int) -> list[int]:
    """Coverage-aware greedy selection (see module docstring); returns chosen indices in order.

    Shapes: pos, neg (m, words) uint64; scores (m,) float; token_counts (m,) int.
    """
    m = scores.shape[0]
    nonzero = np.bitwise_count(pos | neg).sum(axis=1, dtype=np.int64)
    cover_pos = np.zeros(pos.shape[1], dtype=np.uint64)
    cover_neg = np.zeros_like(cover_pos)
    remaining = np.ones(m, dtype=bool)
    chosen: list[int] = []
    budget = int(token_budget)
    while True:
        fits = remaining & (token_counts <= budget)
        if not fits.any():
            return chosen
        covered = cover_pos | cover_neg
        density = int(np.bitwise_count(covered).sum()) / dims
        null_novelty = max(1.0 - density, 1.0 / dims)
        fresh = np.bitwise_count((pos | neg) & ~covered).sum(axis=1, dtype=np.int64)
        novelty = np.divide(fresh, nonzero, out=np.zeros(m), where=nonzero > 0)
        marginal = np.where(fits, scores * novelty / null_novelty, -np.inf)
        best = int(np.argmax(marginal))
        if marginal[best] <= 0 and len(chosen) >= min_context:
            return chosen
        chosen.append(best)
        remaining[best] = False
        budget -= int(token_counts[best])
        x_pos, x_neg = pos[best], neg[best]
        empty = ~covered
        cover_pos, cover_neg = (cover_pos & ~x_neg) | (x_pos & empty), (cover_neg & ~x_pos) | (x_neg & empty)


def mmr_scores(kept: list[Candidate], fused: bool) -> np.ndarray:
    """(m,) float: the relevance HDC-MMR weighs for each of `kept` (see the module docstring):
    its HDC score; where `fused`, the pool's scores (merge keys where merged), sorted best first,
    given to the candidates by their fused rank (ties keep `kept`'s order)."""
    if not fused or not kept:
        return np.array([c.score for c in kept], dtype=np.float64)
    own = np.array([c.score if c.merge is None else c.merge for c in kept], dtype=np.float64)
    out = np.empty_like(own)
    out[np.argsort([-c.fused for c in kept], kind="stable")] = np.sort(own)[::-1]
    return out


def group_by_target(candidates: list[Candidate]) -> dict[int, list[Candidate]]:
    """The candidates of each target, in the order given (first seen target first)."""
    by_target: dict[int, list[Candidate]] = {}
    for c in candidates:
        by_target.setdefault(c.target, []).append(c)
    return by_target


def query_length(q_pos: np.ndarray, q_neg: np.ndarray) -> float:
    """sqrt of a query vector's nonzero dimensions: what its HDC scores grow with."""
    return max(float(np.sqrt(np.bitwise_count(q_pos | q_neg).sum())), 1.0)


def word_coverage(query: str, texts: Iterable[str]) -> float:
    """The largest share of the query's distinct words (`engine.lexical.words`) that one of `texts`
    holds: 0 to 1 whatever the corpus, since it counts words, not a corpus's weights."""
    asked = set(words(query))
    if not asked:
        return 0.0
    return max((len(asked & set(words(text))) / len(asked) for text in texts), default=0.0)


def merge_targets(orders: dict[int, list[Candidate]], lengths: dict[int, float],
                  coverage: dict[int, float] | None = None) -> list[Candidate]:
    """Several targets' candidates, each list in its target's own ranking (HDC, or fused), merged
    into one ranking by scores comparable across targets.

    A target's HDC scores grow with its query vector's length (each corpus encodes the query with
    its own vocabulary and weights, so the query has more or fewer nonzero dimensions in one than in
    another): the rank-r candidate of a target is keyed by that target's r-th best HDC score divided
    by `lengths[target]` (`query_length`), times 1 + `coverage[target]` (`word_coverage` of its
    first candidates: a corpus that holds the query's words outranks one whose best candidates only
    resemble it), so each target keeps its own order and the targets interleave by that key. Ties go
    to the lower target, then row. `fused` becomes 1 / (60 + rank in the merged ranking), what MMR
    weighs. Measured against z-scores, raw scores and gates that drop a corpus by
    bench/cross_corpus_eval.py (docs/engine-v2-measurements.md §6).
    """
    coverage = coverage or {}
    for number, own in orders.items():
        keys = (np.sort(np.array([float(c.score) for c in own]))[::-1] / lengths.get(number, 1.0)
                * (1.0 + coverage.get(number, 0.0)))
        for c, key in zip(own, keys.tolist(), strict=True):
            c.merge = key
    merged = sorted((c for own in orders.values() for c in own), key=lambda c: (-c.merge, c.target, c.row))
    for rank, c in enumerate(merged, start=1):
        c.fused = 1.0 / (DEFAULT_K + rank)
    return merged
