"""Reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009).

    score(key) = sum over rankings r containing key of weight_r / (k + rank_r(key))

with 1-based ranks. Only ranks matter, so rankings on incomparable scales (HDC popcount
scores, MaxSim sums) fuse without calibration. A key repeated inside one ranking counts at
its first (best) position only.

A search fuses the HDC scores of its candidates with their late-interaction scores under one
rule (`fuse_scores`: HDC alone, RRF at a weight, z-normalised score sums at a weight, or the late
ranker alone), chosen per corpus from evidence (`choose_fusion`): on a held-out glossary set,
fusing late interaction at equal RRF weight *lowered* HDC's recall@10 from 0.81 to 0.57, so a
build ranks self-queries made from its own texts (`self_queries`) every way and keeps HDC alone
unless a rule beats it significantly, and robustly across kinds of self-query (a caller with a
better prior names another `fallback`: the exact-word channel's is equal weight, `engine.gate`).
"""

from __future__ import annotations

import random
import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

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


# Fusion rules over one candidate pool (HDC's top candidates, re-scored by the late ranker):
# "hdc" alone (the late ranker is not called), "rrf:w" reciprocal rank fusion with the late ranking
# at weight w beside HDC's 1, "z:w" score-level fusion of z-normalised scores (z_hdc + w * z_late:
# a ranker sure of one candidate, far above the rest of the pool, counts for more than one that
# is not), "late" the late ranker alone.
# `choose_fusion` picks among CHOSEN_RULES, in order of preference on a tie. It tries the
# score-level family only: on the self-queries of every set in bench/fusion_eval.py it ranks as
# well as or better than RRF at the same weight, and one family keeps the multiple comparisons few.
FUSION_RULES: tuple[str, ...] = (
    "hdc",
    "rrf:0.25",
    "rrf:0.5",
    "rrf:1",
    "rrf:2",
    "z:0.25",
    "z:0.5",
    "z:1",
    "z:2",
    "late",
)
CHOSEN_RULES: tuple[str, ...] = ("hdc", "z:0.25", "z:0.5", "z:1", "z:2", "late")
# One-sided z of the paired tests below (95 %).
SIGNIFICANCE_Z = 1.645
# The z of a difference every query shows alike (no spread): finite, as evidence is stored as JSON.
CERTAIN_Z = 99.0


def _rule(rule: str) -> tuple[str, float]:
    kind, _, weight = rule.partition(":")
    if (kind in ("hdc", "late") and not weight) or (kind in ("rrf", "z") and weight):
        try:
            value = float(weight) if weight else 0.0
        except ValueError:
            value = -1.0
        if value >= 0:
            return kind, value
    raise ValueError(f"unknown fusion rule {rule!r}; rules are 'hdc', 'late', 'rrf:<w>', 'z:<w>'")


def _ranks(scores: np.ndarray) -> np.ndarray:
    """1-based ranks along the last axis, best (highest) first, ties to the earlier position."""
    order = np.argsort(-scores, axis=-1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(1, scores.shape[-1] + 1), axis=-1)
    return ranks


def _zscores(scores: np.ndarray, valid: np.ndarray) -> np.ndarray:
    count = np.maximum(valid.sum(axis=-1, keepdims=True), 1)
    filled = np.where(valid, scores, 0.0)
    mean = filled.sum(axis=-1, keepdims=True) / count
    spread = np.sqrt((np.where(valid, scores - mean, 0.0) ** 2).sum(axis=-1, keepdims=True) / count)
    z = (filled - mean) / np.where(spread > 0, spread, 1.0)
    lowest = np.where(valid, z, np.inf).min(axis=-1, keepdims=True)
    return np.where(valid, z, np.where(np.isfinite(lowest), lowest, 0.0))


def fuse_scores(hdc: np.ndarray, late: np.ndarray, *, rule: str, k: float = DEFAULT_K,
                late_ranks: np.ndarray | None = None) -> np.ndarray:
    """Fused scores of one candidate pool under `rule`, higher is better.

    Shapes: hdc, late (..., m) float: the HDC and late scores of the same m candidates, -inf (or
    nan) in `hdc` where a slot is not a candidate, in `late` where the late ranker did not score
    it (no content token): such a candidate ranks below every scored one on the late side.
    `late_ranks` (..., m), when given: each candidate's 1-based rank in the late ranker's own
    ranking of every row, inf past the depth it was read to; RRF then takes these (a candidate past
    that depth gets nothing from the late side) instead of the ranks among the pool, as reciprocal
    rank fusion of two whole rankings does. The pool ranks flatter a candidate the late ranker puts
    far down: only the pool's few can be ahead of it.
    Returns (..., m) float64, -inf exactly where `hdc` is not a candidate.
    """
    kind, weight = _rule(rule)
    hdc = np.asarray(hdc, dtype=np.float64)
    late = np.asarray(late, dtype=np.float64)
    if hdc.shape != late.shape:
        raise ValueError(f"hdc and late scores must have one shape, got {hdc.shape} and {late.shape}")
    pool = np.isfinite(hdc)
    scored = pool & np.isfinite(late)
    if kind == "hdc":
        fused = hdc.copy()
    elif kind == "late":
        low = np.where(scored, late, np.inf).min(axis=-1, keepdims=True)
        # Unscored candidates follow the scored ones, in HDC order (a tiny HDC tie-break term).
        fused = np.where(scored, late, np.where(np.isfinite(low), low, 0.0) - 1.0) + 1e-9 * _zscores(
            hdc, pool
        )
    elif kind == "rrf":
        rank_hdc = _ranks(np.where(pool, hdc, -np.inf))
        if late_ranks is None:
            rank_late = _ranks(np.where(scored, late, -np.inf))
        else:
            rank_late = np.asarray(late_ranks, dtype=np.float64)
            if rank_late.shape != hdc.shape:
                raise ValueError(f"late_ranks must have the scores' shape {hdc.shape}, got {rank_late.shape}")
            scored = scored & np.isfinite(rank_late)
            rank_late = np.where(scored, rank_late, 1.0)
        fused = 1.0 / (k + rank_hdc) + np.where(scored, weight / (k + rank_late), 0.0)
    else:
        fused = _zscores(hdc, pool) + weight * _zscores(late, scored)
    return np.where(pool, fused, -np.inf)


@dataclass(frozen=True)
class FusionChoice:
    """A corpus's fusion rule (`FUSION_RULES`) and the self-query evidence that chose it:
    {"queries": n, "mrr": {rule: MRR@10}, "gain": MRR gain over HDC, "z": its paired z}.
    Rule "hdc" means the late ranker is not worth calling for this corpus."""

    rule: str = "hdc"
    evidence: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _rule(self.rule)

    @property
    def uses_late(self) -> bool:
        return self.rule != "hdc"

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "evidence": self.evidence}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> FusionChoice:
        """From `to_dict`, or from the RRF weights {"hdc", "late"} builds stored before rules."""
        if "rule" in values:
            return cls(rule=str(values["rule"]), evidence=dict(values.get("evidence", {})))
        hdc, late = float(values["hdc"]), float(values["late"])
        rule = "hdc" if late == 0 else "late" if hdc == 0 else f"rrf:{late / hdc:g}"
        return cls(rule=rule, evidence=dict(values.get("evidence", {})))


def reciprocal_ranks(scores: np.ndarray, targets: np.ndarray, depth: int = 10) -> np.ndarray:
    """1 / rank of each query's target within the top `depth` (0 beyond, or for a target of -1).

    Shapes: scores (q, m) float, targets (q,) int positions along m. Ties count against the target.
    """
    scores = np.asarray(scores, dtype=np.float64)
    targets = np.asarray(targets, dtype=np.int64)
    rows = np.arange(len(targets))
    own = scores[rows, np.maximum(targets, 0)]
    rank = 1 + (scores >= own[:, None]).sum(axis=1) - 1
    found = (targets >= 0) & np.isfinite(own) & (rank <= depth)
    return np.where(found, 1.0 / np.maximum(rank, 1), 0.0)


def _paired_z(gain: np.ndarray) -> float:
    """Mean / standard error of paired per-query differences (0 for fewer than 2); with no spread,
    every query differs alike: 0 for no difference, else `CERTAIN_Z` of its sign."""
    if gain.size < 2:
        return 0.0
    spread = float(gain.std(ddof=1)) / np.sqrt(gain.size)
    mean = float(gain.mean())
    return mean / spread if spread > 0 else float(np.sign(mean)) * CERTAIN_Z


def choose_fusion(hdc: np.ndarray, late: np.ndarray, targets: np.ndarray, *,
                  kinds: Sequence[str] | None = None, rules: Sequence[str] = CHOSEN_RULES,
                  k: float = DEFAULT_K, depth: int = 10, z: float = SIGNIFICANCE_Z,
                  fallback: str = "hdc", stays: bool = False,
                  late_ranks: np.ndarray | None = None) -> FusionChoice:
    """The fusion rule the self-queries' evidence supports; `fallback` where it supports none.

    Every rule's fused ranking is scored by reciprocal rank (MRR@depth) on every self-query. A
    rule that mixes HDC in is eligible when its paired gain over HDC alone exceeds `z` standard
    errors on all queries together and is not `z` standard errors below HDC on any one `kinds`
    group (self-queries cut from their texts flatter the late ranker, held-out ones do not); the
    eligible one of highest MRR wins, ties to the earlier rule. With none eligible, `fallback`
    (one of `rules`; "hdc" by default) is kept unless HDC alone beats it by `z` standard errors on
    all queries together. "late" alone (HDC dropped) wins only when it beats that choice
    significantly on every kind: strong AND robust evidence.

    `stays`: the fallback is the rule to beat, not HDC alone. Unless HDC alone beats it by `z`
    standard errors, it is kept, and another rule is eligible only with a significant gain over
    it: the highest of several noisy MRRs is the one most likely overestimated, and a prior the
    known-item sets measured (equal-weight RRF for meaning) is not left on the self-queries' word
    for a gain they do not show beyond their noise. `late_ranks`: as `fuse_scores`.

    Shapes: hdc, late (q, m) candidate scores as `fuse_scores`; targets (q,) positions (-1: the
    target is not among the candidates); kinds (q,) labels, default one group.
    """
    hdc = np.asarray(hdc, dtype=np.float64)
    late = np.asarray(late, dtype=np.float64)
    targets = np.asarray(targets, dtype=np.int64)
    if not (hdc.shape == late.shape and hdc.ndim == 2 and targets.shape == (hdc.shape[0],)):
        raise ValueError(
            f"hdc and late must be (q, m) with one target per query, got {hdc.shape}, {late.shape}, "
            f"{targets.shape}"
        )
    labels = np.asarray(kinds if kinds is not None else [""] * len(targets))
    if labels.shape != targets.shape:
        raise ValueError(f"one kind per query expected, got {labels.shape} for {targets.shape}")
    groups = [labels == kind for kind in dict.fromkeys(labels.tolist())]
    ranks = {rule: reciprocal_ranks(fuse_scores(hdc, late, rule=rule, k=k, late_ranks=late_ranks), targets,
                                    depth) for rule in rules}
    base = reciprocal_ranks(hdc, targets, depth)
    table = {rule: round(float(r.mean()), 4) if r.size else 0.0 for rule, r in ranks.items()}
    if fallback not in ranks:
        raise ValueError(f"the fallback {fallback!r} must be one of the rules {list(rules)}")
    chosen = _chosen_rule(ranks, base, groups, fallback=fallback, stays=stays, z=z)
    chosen_z = _paired_z(ranks[chosen] - base) if chosen in ranks else 0.0
    gain = float((ranks.get(chosen, base) - base).mean()) if targets.size else 0.0
    by_kind = {
        str(kind): {rule: round(float(r[g].mean()), 4) for rule, r in ranks.items()}
        for kind, g in zip(dict.fromkeys(labels.tolist()), groups, strict=True)
    } if kinds is not None else {}
    evidence = {"queries": int(targets.size), "mrr": table, "gain": round(gain, 4), "z": round(chosen_z, 2)}
    if by_kind:
        evidence["mrr_by_kind"] = by_kind
    return FusionChoice(rule=chosen, evidence=evidence)


def _chosen_rule(ranks: dict[str, np.ndarray], base: np.ndarray, groups: list[np.ndarray], *, fallback: str,
                 stays: bool, z: float) -> str:
    """`choose_fusion`'s rule from each rule's reciprocal ranks `ranks` and HDC's alone, `base`."""
    chosen, standing = "hdc", base
    if stays and _paired_z(base - ranks[fallback]) <= z:
        chosen, standing = fallback, ranks[fallback]
    for rule, rank in ranks.items():
        gain = rank - standing
        if (rule in ("hdc", "late", chosen) or _paired_z(gain) <= z
                or any(_paired_z(gain[g]) < -z for g in groups)):
            continue
        if rank.mean() > ranks.get(chosen, base).mean() + 1e-12:
            chosen = rule
    if chosen == "hdc" and _paired_z(base - ranks[fallback]) <= z:
        chosen = fallback
    if "late" in ranks:
        over = ranks["late"] - ranks.get(chosen, base)
        if all(_paired_z(over[g]) > z for g in groups):
            chosen = "late"
    return chosen


_WORD = re.compile(r"\S+")
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")

# Kinds of self-query. "lead" and "span" are cut from the text they find, word for word, and that
# overlap saturates them (WordNet: MRR@10 up to 1.0) and flatters late interaction (it alone wins
# them on 3 of 5 sets where it loses the real questions); "heldout" takes one sentence (or a span)
# out of the text and scores the target as the REST, so a ranker must find the text from what the
# rest shares with the query, as a question about the text must; it does not saturate, but it
# undervalues late interaction (and on one-sentence glosses almost nothing is found). Evidence
# uses all three and `choose_fusion` guards against each (bench/fusion_eval.py, every set).
SELF_QUERY_KINDS = ("lead", "span", "heldout")


@dataclass(frozen=True)
class SelfQuery:
    """A known-item query made from text `index` of a sample. `rest`: for a held-out query, the
    text without the query, which stands for the target when it is scored; None: the text itself."""

    index: int
    kind: str
    query: str
    rest: str | None = None


def _held_out(words: list[str], text: str, rng: random.Random, span_words: int) -> tuple[str, str] | None:
    """(query, rest): a random sentence of 4 to 2 * `span_words` words, or else a span."""
    sentences = [s.split() for s in _SENTENCE_END.split(text.strip()) if s.strip()]
    usable = [i for i, sentence in enumerate(sentences) if 4 <= len(sentence) <= 2 * span_words]
    if len(sentences) >= 2 and usable:
        pick = rng.choice(usable)
        rest = [word for i, sentence in enumerate(sentences) if i != pick for word in sentence]
        return " ".join(sentences[pick]), " ".join(rest)
    span = min(span_words, len(words) // 2)
    if span < 3:
        return None
    start = rng.randrange(0, len(words) - span + 1)
    return " ".join(words[start:start + span]), " ".join(words[:start] + words[start + span:])


def self_queries(texts: Sequence[str], *, kinds: Sequence[str] = SELF_QUERY_KINDS, lead_words: int = 8,
                 span_words: int = 12, min_words: int = 6, seed: int = 0) -> list[SelfQuery]:
    """Known-item queries made from a corpus's own texts, one of each kind per text of at least
    `min_words` words, in text order:

    * "lead": its first words (a title, a term being defined; `lead_words`, at most half the text);
    * "span": a seeded random span of the rest (`span_words`, at most what is left);
    * "heldout": one seeded sentence of 4 to 2 * `span_words` words (a text of one sentence: a
      span of at most half of it), with `rest` the text without it.
    """
    unknown = [kind for kind in kinds if kind not in SELF_QUERY_KINDS]
    if unknown:
        raise ValueError(f"unknown self-query kinds {unknown}; known: {SELF_QUERY_KINDS}")
    rng = random.Random(seed)
    queries = []
    for number, text in enumerate(texts):
        words = _WORD.findall(text)
        if len(words) < min_words:
            continue
        lead = min(lead_words, len(words) // 2)
        span = min(span_words, len(words) - lead)
        start = rng.randrange(lead, len(words) - span + 1)
        held = _held_out(words, text, rng, span_words)
        for kind in kinds:
            if kind == "lead":
                queries.append(SelfQuery(number, kind, " ".join(words[:lead])))
            elif kind == "span":
                queries.append(SelfQuery(number, kind, " ".join(words[start:start + span])))
            elif held is not None:
                queries.append(SelfQuery(number, kind, held[0], rest=held[1]))
    return queries
