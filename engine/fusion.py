"""Reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009).

    score(key) = sum over rankings r containing key of weight_r / (k + rank_r(key))

with 1-based ranks. Only ranks matter, so rankings on incomparable scales (HDC popcount
scores, MaxSim sums) fuse without calibration. A key repeated inside one ranking counts at
its first (best) position only.

Weights come from evidence, per corpus (`choose_fusion_weights`): on a held-out glossary set,
fusing late interaction at equal weight *lowered* HDC's recall@10 from 0.81 to 0.57, so a fused
search uses the weights that rank the corpus's own self-queries best, which include either
ranker alone.
"""

from __future__ import annotations

import random
import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

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


# Fusion weights tried by `choose_fusion_weights`, (HDC, late), in order of preference on a tie:
# HDC alone first (the default ranker, and the cheapest: the late ranker is not even called).
# The late ranker may reorder HDC's ranking but never outweigh it: self-queries are cut from the
# texts they find, and that word-for-word overlap favours late interaction far more than real
# questions do (Jargon File, bench/retrieval_eval.py: on self-queries late interaction alone has
# MRR@10 0.97 against HDC's 0.82, on "What is X?" questions 0.28 against 0.39). Within HDC-led
# weights the same evidence chose well there (HDC 1, late 0.5: recall@10 0.66, HDC alone 0.64).
WEIGHT_GRID: tuple[tuple[float, float], ...] = ((1.0, 0.0), (1.0, 0.25), (1.0, 0.5))


@dataclass(frozen=True)
class FusionWeights:
    """RRF weights of a corpus's two rankers, and the evidence that chose them.

    `evidence` holds the self-query figures: {"queries": n, "mrr": {"hdc,late": MRR@10, ...}}.
    A late weight of 0 means the late ranker is not worth calling for this corpus.
    """

    hdc: float = 1.0
    late: float = 1.0
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"hdc": self.hdc, "late": self.late, "evidence": self.evidence}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> FusionWeights:
        return cls(hdc=float(values["hdc"]), late=float(values["late"]), evidence=dict(values.get("evidence", {})))


def mrr_at(rankings: Sequence[Sequence[Key]], relevant: Sequence[Key], depth: int = 10) -> float:
    """Mean reciprocal rank of each query's one relevant key within its ranking's top `depth`."""
    if not rankings:
        return 0.0
    total = 0.0
    for ranking, target in zip(rankings, relevant, strict=True):
        top = list(ranking[:depth])
        total += 1.0 / (top.index(target) + 1) if target in top else 0.0
    return total / len(rankings)


def choose_fusion_weights(hdc: Sequence[Sequence[Key]], late: Sequence[Sequence[Key]], relevant: Sequence[Key], *,
                          k: float = DEFAULT_K, depth: int = 10,
                          grid: Sequence[tuple[float, float]] = WEIGHT_GRID) -> FusionWeights:
    """The grid's weights whose fusion ranks known items best (MRR@depth), from per-query rankings
    of both rankers and each query's relevant key (the corpus's own self-queries, see `self_queries`).

    The grid holds HDC alone, so on this evidence the fused ranking is never worse than HDC's;
    an exact tie goes to the earlier grid cell (less late weight).
    """
    if not (len(hdc) == len(late) == len(relevant)):
        raise ValueError(f"one ranking per query expected, got {len(hdc)}, {len(late)} for {len(relevant)} queries")
    table = {}
    best = None
    members = [(set(h), set(x)) for h, x in zip(hdc, late, strict=True)]
    for w_hdc, w_late in grid:
        # A ranking at weight 0 contributes nothing: its keys alone must not fill the top.
        fused = [[key for key, _ in reciprocal_rank_fusion([list(h), list(x)], k=k, weights=[w_hdc, w_late])
                  if (w_hdc and key in in_h) or (w_late and key in in_x)]
                 for h, x, (in_h, in_x) in zip(hdc, late, members, strict=True)]
        score = mrr_at(fused, relevant, depth)
        table[f"{w_hdc:g},{w_late:g}"] = round(score, 4)
        if best is None or score > best[0] + 1e-12:
            best = (score, w_hdc, w_late)
    return FusionWeights(hdc=best[1], late=best[2], evidence={"queries": len(relevant), "mrr": table, "k": k})


_WORD = re.compile(r"\S+")


def self_queries(texts: Sequence[str], *, lead_words: int = 8, span_words: int = 12, min_words: int = 6,
                 seed: int = 0) -> list[tuple[int, str]]:
    """Known-item queries made from a corpus's own texts: [(index into texts, query)].

    Two per text of at least `min_words` words: its first words (a title, a term being defined;
    `lead_words`, at most half the text) and a seeded random span of the rest (a phrase a reader
    remembers; `span_words`, at most what is left).
    """
    rng = random.Random(seed)
    queries = []
    for number, text in enumerate(texts):
        words = _WORD.findall(text)
        if len(words) < min_words:
            continue
        lead = min(lead_words, len(words) // 2)
        queries.append((number, " ".join(words[:lead])))
        span = min(span_words, len(words) - lead)
        start = rng.randrange(lead, len(words) - span + 1)
        queries.append((number, " ".join(words[start:start + span])))
    return queries
