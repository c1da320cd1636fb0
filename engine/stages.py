"""The two stages in which a search fuses its targets' channels (`engine.channels`) with HDC.

* `FIRST` (words or late interaction): a target's first `FUSION_DEPTH` HDC candidates, and the
  channel's own best `Gate.candidates` rows within the dataset filter (with their exact HDC scores:
  hybrid candidates), are re-scored by the channel and fused with their HDC scores under the
  target's rule (`engine.fusion.fuse_scores`); the rest follow in HDC order.
* `SECOND` (meaning): the order so far, its first `FUSION_DEPTH` and the channel's own best rows,
  fused by rank with the channel's ranking under the target's rule (each row at its rank among all
  rows, to the channel's `Gate.ranks`); a row the channel has no score for (a segment not read by
  meaning yet) keeps its place in the order so far. A query HDC finds nothing for gets the
  channel's own best rows.

Each stage leaves `fused` = 1 / (60 + rank) on every candidate of a target it reordered. A channel
that is unavailable (`ChannelUnavailable`) is left out: the order so far stands.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from engine.channels import FIRST, SECOND, ChannelQuery, ChannelUnavailable, SearchTarget, ranks_in
from engine.fusion import DEFAULT_K, fuse_scores
from engine.ranking import Candidate, group_by_target

logger = logging.getLogger(__name__)

# HDC candidates the first stage re-scores and reorders, and the depth of the order so far the second
# stage fuses (bench/fusion_eval.py: on WordNet, 100 cost late interaction 0.015 of recall@10 that
# 200 keeps).
FUSION_DEPTH = 200

Vectors = Sequence[tuple[np.ndarray, np.ndarray]]  # each target's query bitmaps (pos, neg) (words,) uint64


def bind(targets: Sequence[SearchTarget], query: str, stage: int) -> list[ChannelQuery | None]:
    """Each target's channel of `stage` bound to `query`, where its rule asks it; else None."""
    bound: list[ChannelQuery | None] = []
    for target in targets:
        channel = target.fused(stage)
        bound.append(channel.query(query) if channel is not None else None)
    return bound


def _ranking(target: SearchTarget, query: ChannelQuery, k: int) -> np.ndarray:
    """The channel's own best `k` rows within the dataset filter, best first."""
    return query.best(k, target.source_filter()) if k > 0 else np.zeros(0, dtype=np.int64)


def _own_rows(target: SearchTarget, number: int, rows: np.ndarray, head: list[Candidate],
              vector: tuple[np.ndarray, np.ndarray]) -> list[Candidate]:
    """The channel's own best `rows`, less those in `head`, as candidates of target `number` with
    their exact HDC scores."""
    rows = rows[~np.isin(rows, [c.row for c in head])]
    if not rows.size:
        return []
    scores = target.corpus.index.score_rows(rows, *vector)
    return [Candidate(number, int(r), int(s)) for r, s in zip(rows, scores, strict=True)]


def _ranked(order: list[Candidate]) -> None:
    for rank, c in enumerate(order, start=1):
        c.fused = 1.0 / (DEFAULT_K + rank)


def first_stage(targets: Sequence[SearchTarget], bound: Sequence[ChannelQuery | None],
                candidates: list[Candidate], vectors: Vectors) -> dict[int, list[Candidate]] | None:
    """Each target's candidates (HDC order in) in the first stage's order (module docstring); None
    when no target's channel answered (none bound, or all unavailable): the search is not fused."""
    by_target = group_by_target(candidates)
    heads: dict[int, list[Candidate]] = {}
    scored: dict[int, np.ndarray] = {}
    for number, own in by_target.items():
        heads[number], query, target = own[:FUSION_DEPTH], bound[number], targets[number]
        if query is None:
            continue
        try:
            own_best = _ranking(target, query, target.channel(FIRST).gate.candidates)
            extra = _own_rows(target, number, own_best, heads[number], vectors[number])
            scores = query.scores(np.array([c.row for c in heads[number] + extra], dtype=np.int64))
        except ChannelUnavailable as error:
            logger.warning("%s: first-stage channel unavailable, HDC order kept: %s", target.name, error)
            continue
        added = {c.row for c in extra}
        heads[number] = heads[number] + extra
        by_target[number] = heads[number] + [c for c in own[FUSION_DEPTH:] if c.row not in added]
        scored[number] = scores
    if not scored:
        return None
    for number, own in by_target.items():
        head, tail = heads[number], own[len(heads[number]):]
        scores = scored.get(number)
        if scores is not None:
            for c, score in zip(head, scores.tolist(), strict=True):
                c.late = None if np.isnan(score) else float(score)
            rule = targets[number].rule(targets[number].channel(FIRST).name)
            hdc = np.array([float(c.score) for c in head])
            fused = fuse_scores(hdc, np.asarray(scores, dtype=np.float64), rule=rule)
            head = [head[i] for i in np.argsort(-fused, kind="stable")]
        by_target[number] = head + tail
        _ranked(by_target[number])
    return by_target


def _unscored_in_place(head: list[Candidate], scores: np.ndarray, fused: np.ndarray) -> list[Candidate]:
    """`head` in the `fused` order, except that each candidate the channel did not score (nan: a row
    of a segment not read by meaning yet) keeps its place in the order so far: the channel reorders
    the rows it has among themselves, and the rest stay where HDC and the words put them."""
    order = np.argsort(-fused, kind="stable")
    unscored = np.isnan(scores)
    if not unscored.any():
        return [head[i] for i in order]
    scored = iter(int(i) for i in order if not unscored[i])
    return [head[i] if unscored[i] else head[next(scored)] for i in range(len(head))]


def second_stage(targets: Sequence[SearchTarget], bound: Sequence[ChannelQuery | None],
                 orders: dict[int, list[Candidate]], vectors: Vectors) -> dict[int, list[Candidate]] | None:
    """`orders` (each target's candidates so far, best first; a target HDC found nothing in may have
    none) in the second stage's order (module docstring); None when no target's channel answered."""
    out, moved = dict(orders), False
    for number, target in enumerate(targets):
        query = bound[number]
        if query is None or target.corpus.count == 0:
            continue
        own = orders.get(number, [])  # none: HDC found nothing (no word of the query in its vocabulary)
        channel = target.channel(SECOND)
        gate = channel.gate
        head, tail = own[:FUSION_DEPTH], own[FUSION_DEPTH:]
        try:
            ranking = _ranking(target, query, max(gate.candidates, gate.ranks))
            extra = _own_rows(target, number, ranking[:gate.candidates], head, vectors[number])
            head = head + extra
            rows = np.array([c.row for c in head], dtype=np.int64)
            scores = query.scores(rows)
        except ChannelUnavailable as error:
            logger.warning("%s: %s channel unavailable, the order so far kept: %s", target.name, channel.name,
                           error)
            continue
        added = {c.row for c in extra}
        for c, score in zip(head, scores.tolist(), strict=True):
            c.meaning = None if np.isnan(score) else float(score)  # nan: a row not read by meaning yet
        fused = fuse_scores(-np.arange(len(head), dtype=np.float64), scores, rule=target.rule(channel.name),
                            late_ranks=ranks_in(rows, ranking) if gate.ranks else None)
        out[number] = _unscored_in_place(head, np.asarray(scores, dtype=np.float64), fused)
        out[number] += [c for c in tail if c.row not in added]
        _ranked(out[number])
        moved = True
    return out if moved else None
