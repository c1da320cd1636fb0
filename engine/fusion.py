"""Reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009).

    score(key) = sum over rankings r containing key of weight_r / (k + rank_r(key))

with 1-based ranks. Only ranks matter, so rankings on incomparable scales (HDC popcount
scores, MaxSim sums) fuse without calibration. A key repeated inside one ranking counts at
its first (best) position only.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

Key = TypeVar("Key", bound=Hashable)

DEFAULT_K = 60


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Key]], k: float = DEFAULT_K,
                           weights: Sequence[float] | None = None) -> list[tuple[Key, float]]:
    """Fuse rankings (each a sequence of keys, best first) → [(key, score)], best first.

    Ties in score are broken by the key's best rank in any ranking, then by where it first
    appears (earlier ranking, then earlier position), so the result does not depend on hash
    order. `weights` (one >= 0 per ranking, default all 1) scale each ranking's contribution.
    """
    if isinstance(k, bool) or not isinstance(k, (int, float)) or not k > 0:
        raise ValueError(f"k must be a number > 0, got {k!r}")
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"one weight per ranking expected, got {len(weights)} for {len(rankings)}")
    if any(not weight >= 0 for weight in weights):
        raise ValueError(f"weights must be >= 0, got {list(weights)}")
    scores: dict[Key, float] = {}
    best_rank: dict[Key, int] = {}
    first_seen: dict[Key, tuple[int, int]] = {}
    for number, (ranking, weight) in enumerate(zip(rankings, weights, strict=True)):
        seen: set[Key] = set()
        for position, key in enumerate(ranking):
            if key in seen:
                continue
            seen.add(key)
            rank = position + 1
            scores[key] = scores.get(key, 0.0) + float(weight) / (k + rank)
            best_rank[key] = min(best_rank.get(key, rank), rank)
            first_seen.setdefault(key, (number, position))
    order = sorted(scores, key=lambda key: (-scores[key], best_rank[key], first_seen[key]))
    return [(key, scores[key]) for key in order]
