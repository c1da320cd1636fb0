"""The gate: the rule each of a corpus's channels (`engine.channels`) fuses under, from its own data.

`channel_evidence` asks seeded self-queries of the corpus's own memories (`fusion.self_queries`, of
the channel's `Gate.kinds`), ranks each over the pool a search would fuse (`engine.stages`: HDC's
top `FUSION_DEPTH` and the channel's own best `Gate.candidates` rows; for a second-stage channel,
in the order the first stage gives), and lets `fusion.choose_fusion` pick, among the channel's
`Gate.rules`, the rule that beats the order before the channel significantly. Where none does,
the channel's `Gate.fallback` is kept unless the order before it is significantly better: late
interaction is then left out ("hdc"), the exact-word channel fused at equal weight ("z:1"), the
meaning channel by equal-weight RRF ("rrf:1"), each for the reasons its module gives. A channel
whose fallback stays (`Gate.stays`: meaning's) keeps it unless a rule beats the fallback itself
significantly. Builds run it once per channel and record the rule (`BuildParameters`).
"""

from __future__ import annotations

import numpy as np

from engine import bits
from engine.channels import FIRST, Channel, ChannelUnavailable, SearchTarget, best_rows, ranks_in, rows_of
from engine.fusion import FusionChoice, SelfQuery, choose_fusion, fuse_scores, self_queries
from engine.retrieval import Retriever
from engine.stages import FUSION_DEPTH


def channel_evidence(*, retriever: Retriever, target: SearchTarget, channel: str, samples: int | None = None,
                     seed: int = 0, depth: int = FUSION_DEPTH) -> FusionChoice:
    """The `FusionChoice` of `target`'s channel `channel` from its own data (module docstring):
    `samples` (default `Gate.samples`) seeded memories give self-queries, for a held-out one of
    which the memory is scored as the rest of its text. A second-stage channel needs the target's
    first-stage channel (its rule as the target names it). Costs one scoring of the pool (a
    channel with candidates of its own: of every row) per query, and for meaning one encoding."""
    chosen = target.channels.get(channel)
    if chosen is None:
        raise ValueError(f"evidence for the {channel} channel needs a target that has it")
    samples = chosen.gate.samples if samples is None else samples
    try:
        if chosen.gate.stage == FIRST:
            return _first_stage_evidence(retriever, target, chosen, samples, seed, depth)
        return _second_stage_evidence(retriever, target, chosen, samples, seed, depth)
    except ChannelUnavailable as error:
        raise ValueError(f"the {channel} channel cannot answer now; no evidence gathered: {error}") from error


def _first_stage_evidence(retriever: Retriever, target: SearchTarget, channel: Channel, samples: int,
                          seed: int, depth: int) -> FusionChoice:
    """Each self-query ranked over HDC's top `depth` and the channel's own best rows, and re-scored
    by the channel, as a search's first stage ranks it."""
    rows, queries = _self_queries(target, samples, seed, channel.gate.kinds)
    width = depth + channel.gate.candidates
    hdc = np.full((len(queries), width), -np.inf)
    late = np.full_like(hdc, np.nan)
    targets = np.full(len(queries), -1, dtype=np.int64)
    for number, made in enumerate(queries):
        own = rows[made.index]
        q_pos, q_neg = retriever.query_vector(target.corpus, made.query)
        if not (q_pos.any() or q_neg.any()):
            continue
        pool = _evidence_pool(retriever, target, channel, made, own, q_pos, q_neg, depth)
        if pool is None:
            continue  # not a candidate: every rule misses it
        found, scores, late_scores = pool
        hdc[number, :found.size], late[number, :found.size] = scores, late_scores
        hits = np.flatnonzero(found == own)
        targets[number] = int(hits[0]) if hits.size else -1
    return choose_fusion(hdc, late, targets, kinds=[made.kind for made in queries], rules=channel.gate.rules,
                         fallback=channel.gate.fallback, stays=channel.gate.stays)


def _self_queries(target: SearchTarget, samples: int, seed: int, kinds: tuple[str, ...]
                  ) -> tuple[list[int], list[SelfQuery]]:
    """`samples` seeded rows of the target that its store holds, and their self-queries of `kinds`."""
    count = target.corpus.count
    rng = np.random.default_rng(seed)
    rows = sorted(rng.choice(count, size=min(samples, count), replace=False).tolist()) if count else []
    memories = target.store.get_memories(rows)
    rows = [row for row in rows if row in memories]
    return rows, self_queries([memories[row].text for row in rows], kinds=kinds, seed=seed)


def _second_stage_evidence(retriever: Retriever, target: SearchTarget, channel: Channel, samples: int,
                           seed: int, depth: int) -> FusionChoice:
    """Each self-query ranked as a search ranks it so far (HDC and the first-stage channel under its
    rule, over the same pool), then that order and the channel's own best rows fused by rank with
    the channel's scores (the memory scored as the rest of its text on both sides); "hdc" in the
    channel's rules is the first stage alone."""
    first = target.channel(FIRST)
    if first is None:
        raise ValueError(f"evidence for the {channel.name} channel needs a first-stage channel "
                         "(words or late interaction) in the target")
    rows, queries = _self_queries(target, samples, seed, channel.gate.kinds)
    gate = channel.gate
    width = depth + first.gate.candidates + gate.candidates
    ranked = np.full((len(queries), width), -np.inf)
    second = np.full_like(ranked, np.nan)
    own_ranks = np.full_like(ranked, np.inf)  # each candidate's rank in the channel's own ranking
    targets = np.full(len(queries), -1, dtype=np.int64)
    for number, made in enumerate(queries):
        own = rows[made.index]
        q_pos, q_neg = retriever.query_vector(target.corpus, made.query)
        if not (q_pos.any() or q_neg.any()):
            continue
        found, scores, late_scores = _evidence_pool(retriever, target, first, made, own, q_pos, q_neg, depth,
                                                    need_own=False)
        if target.fused(FIRST) is None:  # the channel's own rows join a search's pool only where it is fused
            found, scores, late_scores = found[:depth], scores[:depth], late_scores[:depth]
        fused = fuse_scores(scores, late_scores, rule=target.rule(first.name))
        found = found[np.argsort(-fused, kind="stable")]
        bound = channel.query(made.query)
        rest = bound.text_scores([made.rest]) if made.rest is not None else None  # first: one encoding
        scored = bound.scores(np.arange(target.corpus.count))
        if rest is not None:
            scored[own] = rest[0]
        ranking = best_rows(scored, max(gate.candidates, gate.ranks))
        extra = ranking[:gate.candidates]
        pool = np.concatenate([found, extra[~np.isin(extra, found)]])
        ranked[number, :pool.size], second[number, :pool.size] = -np.arange(pool.size), scored[pool]
        own_ranks[number, :pool.size] = ranks_in(pool, ranking)
        hits = np.flatnonzero(pool == own)
        targets[number] = int(hits[0]) if hits.size else -1
    return choose_fusion(ranked, second, targets, kinds=[made.kind for made in queries], rules=gate.rules,
                         fallback=gate.fallback, stays=gate.stays,
                         late_ranks=own_ranks if gate.ranks else None)


def _evidence_pool(retriever: Retriever, target: SearchTarget, channel: Channel, made: SelfQuery, own: int,
                   q_pos: np.ndarray, q_neg: np.ndarray, depth: int, need_own: bool = True
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """One self-query's candidate pool as a search's first stage builds it: rows (m,), their HDC
    scores (m,) and the first-stage `channel`'s scores (m,); a held-out query's own memory competes
    as the rest of its text (`made.rest`). None when the memory is in no pool (every rule misses it)
    and `need_own`."""
    corpus, bound = target.corpus, channel.query(made.query)
    found, scores = corpus.index.search_exact(q_pos, q_neg, min(depth, corpus.count))
    scores = scores.astype(np.float64)
    rest_hdc = rest_late = None
    if made.rest is not None:
        d_pos, d_neg, _ = retriever.encode_text(corpus, made.rest)
        rest_hdc = float(bits.score64(d_pos[None], d_neg[None], q_pos, q_neg)[0])
        rest_late = float(bound.text_scores([made.rest])[0])
        keep = found != own
        found, scores = found[keep], scores[keep]
        if found.size < depth or rest_hdc >= scores[-1]:
            at = int(np.searchsorted(-scores, -rest_hdc, side="right"))
            found, scores = np.insert(found, at, own)[:depth], np.insert(scores, at, rest_hdc)[:depth]
    every = None
    if channel.gate.candidates:  # the channel's own best rows join the pool, as in a search
        # Every row's scores, once: its best rows and the pool's.
        every = bound.scores(np.arange(corpus.count))
        ranked = every
        if rest_late is not None:
            ranked = every.copy()
            ranked[own] = rest_late if np.isfinite(rest_late) else 0.0
        extra = best_rows(ranked, channel.gate.candidates)
        extra = extra[~np.isin(extra, found)]
        extra_hdc = corpus.index.score_rows(extra, q_pos, q_neg).astype(np.float64)
        if rest_hdc is not None:
            extra_hdc[extra == own] = rest_hdc
        found, scores = np.concatenate([found, extra]), np.concatenate([scores, extra_hdc])
    if need_own and made.rest is not None and own not in found:
        return None
    late_scores = rows_of(every, found) if every is not None else bound.scores(found)
    if rest_late is not None:
        late_scores[found == own] = rest_late
    return found, scores, late_scores
