"""The gate: a corpus's fusion rule (`engine.fusion.FusionChoice`) from its own data.

`fusion_evidence` asks seeded self-queries of the corpus's own memories (`fusion.self_queries`),
ranks each over the pool a search would fuse (HDC's top `FUSION_DEPTH`, and a word channel's own
best `WORD_CANDIDATES` rows: `engine.retrieval`), and lets `fusion.choose_fusion` pick the rule
that beats HDC alone significantly. Where none does, a late-interaction scorer is left out (HDC
alone), but the exact-word channel is fused at equal weight (`WORD_FALLBACK`) unless HDC alone
is significantly better: on all nine known-item sets of docs/retrieval-measurements.md, "z:1"
ranked at or above HDC alone (MRR@10), and the self-queries of WordNet's one-line glosses cannot
show its gain there (0.481 to 0.594 MRR@10 on the real queries). Builds run it once and record
the rule (`BuildParameters`). A corpus with a meaning channel (`engine.meaning`) has its rule
chosen the same way (`meaning_evidence`), over the order the first two channels give.
"""

from __future__ import annotations

import numpy as np

from engine import bits
from engine.fusion import SELF_QUERY_KINDS, FusionChoice, SelfQuery, choose_fusion, fuse_scores, self_queries
from engine.lexical import best_rows, rows_of
from engine.meaning import MEANING_CANDIDATES, MEANING_FALLBACK, MEANING_RULES
from engine.retrieval import FUSION_DEPTH, WORD_CANDIDATES, LateUnavailable, Retriever, SearchTarget

# The rule of a word channel whose self-queries show no significant gain either way (module docstring).
WORD_FALLBACK = "z:1"
# The meaning channel's evidence: held-out sentences only. A lead or span is the text's own words,
# which the first stage finds whatever the channel adds (jargon-paraphrase, 2,000 entries: MRR@10
# 0.98 on spans by HDC and words, 0.78 fused with meaning), yet fused by rank with the channel the
# default path gained recall@10 on all nine known-item sets, names and paraphrases alike
# (docs/retrieval-measurements.md): words copied from the text say nothing of a question in others.
MEANING_EVIDENCE = ("heldout",)


def _is_word_channel(scorer: object) -> bool:
    """A word channel (`engine.lexical.WordIndex`) scores every row at once; late interaction does not."""
    return hasattr(scorer, "score_all")


def fusion_evidence(*, retriever: Retriever, target: SearchTarget, samples: int = 64, seed: int = 0,
                    depth: int = FUSION_DEPTH) -> FusionChoice:
    """The `FusionChoice` of `target` from its own data: `samples` seeded memories give self-queries
    of every kind (`fusion.self_queries`: a lead, a span, and a held-out sentence, for which the
    memory is scored as the rest of its text), each ranked over HDC's top `depth` (and, for a word
    channel, its own best `WORD_CANDIDATES` rows) and re-scored by `target.late`, as a search would;
    `choose_fusion` keeps HDC alone unless a rule beats it significantly, and robustly across the
    kinds; where no rule does, a word channel keeps `WORD_FALLBACK` unless HDC alone beats it
    significantly. Costs one late scoring of `depth` rows (a word channel: of every row) per query.
    """
    if target.late is None:
        raise ValueError("fusion evidence needs a target with a late scorer")
    corpus = target.corpus
    rows, queries = _self_queries(target, samples, seed)
    word_channel = _is_word_channel(target.late)
    width = depth + (WORD_CANDIDATES if word_channel else 0)
    hdc = np.full((len(queries), width), -np.inf)
    late = np.full_like(hdc, np.nan)
    targets = np.full(len(queries), -1, dtype=np.int64)
    for number, made in enumerate(queries):
        own = rows[made.index]
        q_pos, q_neg = retriever.query_vector(corpus, made.query)
        if not (q_pos.any() or q_neg.any()):
            continue
        try:
            pool = _evidence_pool(retriever, target, made, own, q_pos, q_neg, depth)
        except LateUnavailable as error:
            raise ValueError(f"the late scorer cannot answer now; no evidence gathered: {error}") from error
        if pool is None:
            continue  # not a candidate: every rule misses it
        found, scores, late_scores = pool
        hdc[number, :found.size], late[number, :found.size] = scores, late_scores
        hits = np.flatnonzero(found == own)
        targets[number] = int(hits[0]) if hits.size else -1
    return choose_fusion(hdc, late, targets, kinds=[made.kind for made in queries],
                         fallback=WORD_FALLBACK if word_channel else "hdc")


def _self_queries(target: SearchTarget, samples: int, seed: int, kinds: tuple[str, ...] = SELF_QUERY_KINDS
                  ) -> tuple[list[int], list[SelfQuery]]:
    """`samples` seeded rows of the target that its store holds, and their self-queries of `kinds`."""
    count = target.corpus.count
    rng = np.random.default_rng(seed)
    rows = sorted(rng.choice(count, size=min(samples, count), replace=False).tolist()) if count else []
    memories = target.store.get_memories(rows)
    rows = [row for row in rows if row in memories]
    return rows, self_queries([memories[row].text for row in rows], kinds=kinds, seed=seed)


def meaning_evidence(*, retriever: Retriever, target: SearchTarget, samples: int = 128, seed: int = 0,
                     depth: int = FUSION_DEPTH) -> FusionChoice:
    """The rule of `target`'s meaning channel (`engine.meaning`, the second stage of a search) from
    held-out self-queries (`MEANING_EVIDENCE`): each ranked as a search ranks it so far (HDC and the
    word channel `target.late` under `target.fusion`'s rule, over the same pool), then that order
    and the channel's own best `MEANING_CANDIDATES` rows fused by rank with their cosines (the
    memory scored as the rest of its text on both sides); `choose_fusion` among `MEANING_RULES`
    ("hdc": the first stage alone), `MEANING_FALLBACK` where none wins significantly unless the
    first stage alone beats it significantly. Costs one encoding (the query with the rest of its
    memory) and one scan of the channel's rows per query."""
    channel = target.meaning
    if channel is None or target.late is None:
        raise ValueError("meaning evidence needs a target with a meaning channel and a word channel")
    rows, queries = _self_queries(target, samples, seed, kinds=MEANING_EVIDENCE)
    width = depth + WORD_CANDIDATES + MEANING_CANDIDATES
    first = np.full((len(queries), width), -np.inf)
    second = np.full_like(first, np.nan)
    targets = np.full(len(queries), -1, dtype=np.int64)
    for number, made in enumerate(queries):
        own = rows[made.index]
        q_pos, q_neg = retriever.query_vector(target.corpus, made.query)
        if not (q_pos.any() or q_neg.any()):
            continue
        found, scores, late_scores = _evidence_pool(retriever, target, made, own, q_pos, q_neg, depth, need_own=False)
        if not target.uses_late:  # the word channel's rows join a search's pool only where it is fused
            found, scores, late_scores = found[:depth], scores[:depth], late_scores[:depth]
        found = found[np.argsort(-fuse_scores(scores, late_scores, rule=target.rule), kind="stable")]
        cosines, rest = channel.scores(made.query, [made.rest] if made.rest is not None else [])
        if made.rest is not None:
            cosines[own] = rest[0]
        extra = best_rows(cosines, MEANING_CANDIDATES)
        pool = np.concatenate([found, extra[~np.isin(extra, found)]])
        first[number, :pool.size], second[number, :pool.size] = -np.arange(pool.size), cosines[pool]
        hits = np.flatnonzero(pool == own)
        targets[number] = int(hits[0]) if hits.size else -1
    return choose_fusion(first, second, targets, kinds=[made.kind for made in queries], rules=MEANING_RULES,
                         fallback=MEANING_FALLBACK)


def _evidence_pool(retriever: Retriever, target: SearchTarget, made: SelfQuery, own: int, q_pos: np.ndarray,
                   q_neg: np.ndarray, depth: int, need_own: bool = True
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """One self-query's candidate pool as a search builds it: rows (m,), their HDC scores (m,) and
    late scores (m,); a held-out query's own memory competes as the rest of its text (`made.rest`).
    None when the memory is in no pool (every rule misses it) and `need_own`."""
    corpus, scorer = target.corpus, target.late
    found, scores = corpus.index.search_exact(q_pos, q_neg, min(depth, corpus.count))
    scores = scores.astype(np.float64)
    rest_hdc = rest_late = None
    if made.rest is not None:
        d_pos, d_neg, _ = retriever.encode_text(corpus, made.rest)
        rest_hdc = float(bits.score64(d_pos[None], d_neg[None], q_pos, q_neg)[0])
        rest_late = float(scorer.score_texts(made.query, [made.rest])[0])
        keep = found != own
        found, scores = found[keep], scores[keep]
        if found.size < depth or rest_hdc >= scores[-1]:
            at = int(np.searchsorted(-scores, -rest_hdc, side="right"))
            found, scores = np.insert(found, at, own)[:depth], np.insert(scores, at, rest_hdc)[:depth]
    word_channel = _is_word_channel(scorer)
    every = None
    if word_channel:  # a word channel: its own best rows join the pool, as in a search
        every = scorer.score_all(made.query)  # every row's scores, once: its best rows and the pool's
        ranked = every
        if every is not None and rest_late is not None:
            ranked = every.copy()
            ranked[own] = rest_late if np.isfinite(rest_late) else 0.0
        extra = best_rows(ranked, WORD_CANDIDATES)
        extra = extra[~np.isin(extra, found)]
        extra_hdc = corpus.index.score_rows(extra, q_pos, q_neg).astype(np.float64)
        if rest_hdc is not None:
            extra_hdc[extra == own] = rest_hdc
        found, scores = np.concatenate([found, extra]), np.concatenate([scores, extra_hdc])
    if need_own and made.rest is not None and own not in found:
        return None
    late_scores = rows_of(every, found) if word_channel else scorer.score_rows(made.query, found)
    if rest_late is not None:
        late_scores[found == own] = rest_late
    return found, scores, late_scores
