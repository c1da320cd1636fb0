"""Retriever: encode -> blend -> prune -> threshold -> dedup -> HDC-MMR -> token budget.

Multi-user by construction: the conversation's blend history is a `BlendState` the caller owns
(one per conversation, JSON-serialisable), never state of the Retriever or of this module. The
Retriever holds only configuration, the tokenizer and a bounded cache of text encodings (a pure
function of (build, text), so sharing it between conversations leaks nothing).

Choices the spec leaves open:

* Query text and blend: `engine.query` (the question template removed, `query_terms`; the
  conversation's responses voted in, `blend_vectors`).
* Candidates: the index's top-`candidates` (default 500) by ternary score, after the dataset
  filter (applied inside the index, before any scoring): exact below
  `index_search.SAMPLED_SEARCH_MIN_ROWS` rows, from a sampled first pass with an exact re-rank above
  (`BitmapIndex.search_auto`; recall against the exact scan measured by bench/search.py). Several corpora of
  the same dims are searched one by one and their candidates merged before everything below.
* Threshold: `bits.adaptive_threshold` over the merged candidate scores; kept: score >= it and
  score > 0, topped up from the ranking (score > 0) to `min_context` documents.
* Dedup and HDC-MMR: `engine.ranking` (`dedup`, `hdc_mmr`: coverage-aware greedy selection within
  the token budget).
* Budget: `token_budget` (default `config.max_context_tokens`) is never exceeded, not even to
  reach `min_context`. `top_document=True` returns only the best-scoring candidate.
* Channels (`engine.channels`: exact words, late interaction, meaning; a target holds them by
  name, each with the rule its corpus's gate chose from the build's own self-queries,
  `engine.gate.channel_evidence`): the first stage re-scores each target's first `FUSION_DEPTH`
  HDC candidates, with the channel's own best rows (hybrid candidates: a memory that holds the
  question's rare words is fused even where HDC's sampled search did not shortlist it), and fuses
  the scores under the target's rule; the second fuses that order by rank with its channel's
  (`engine.stages`; rule "hdc": the channel is not asked). Candidates past `FUSION_DEPTH` follow in
  HDC order; a candidate's fused score is 1 / (60 + its rank in its target's fused order). The
  adaptive threshold still decides *how many* candidates are kept (at least `min_context`), the
  fused ranking decides *which*; dedup is unchanged and HDC-MMR weighs novelty against the fused
  order (`ranking.mmr_scores`). With no channel at all, nothing above changes.
* Several targets (corpora searched together): their HDC scores are not comparable (each corpus has
  its own vocabulary, weights and query density), so each target's ranking (HDC, or fused) is kept
  and the targets are interleaved by `merge_targets` (`engine.ranking`): the rank-r candidate of a
  target is keyed by that target's r-th best HDC score per unit of its query's length (sqrt of its
  nonzero dims), times 1 + the target's word coverage (the largest share of the query's words that
  one of its first `COVERAGE_DEPTH` candidates holds: a measure every corpus takes on one scale).
  The threshold is the adaptive threshold over those keys, the merged order is the ranking MMR
  weighs (1 / (60 + rank)), and each result carries its key as `merge_score`
  (bench/cross_corpus_eval.py).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from cachetools import LRUCache

from engine import bits
from engine.channels import FIRST, SECOND, SearchTarget
from engine.config import Config
from engine.fusion import DEFAULT_K
from engine.lexical import words
from engine.loaded_build import LoadedIndex, MemoryRecord
from engine.query import BlendState, blend_vectors, query_terms
from engine.query_names import definer, quoted
from engine.ranking import (
    Candidate,
    dedup,
    group_by_target,
    hdc_mmr,
    merge_targets,
    mmr_scores,
    query_length,
    word_coverage,
)
from engine.stages import Vectors, bind, first_stage, second_stage
from engine.tokenizer import Tokenizer

CONTEXT_DELIMITER = "\n\n---\n\n"
# Several targets: how many of each one's first candidates its word coverage is taken over
# (`word_coverage`; 10 and 50 measured the same, bench/cross_corpus_eval.py).
COVERAGE_DEPTH = 10
# First candidates a definer or a quotation checks (texts fetched); 200 ranked the same everywhere.
DEFINER_DEPTH = 50
_WORDS = re.compile(r"\w+")


@dataclass(frozen=True)
class SearchResult:
    """One memory a search found (`Retriever.search` returns them best first).

    `memory` is its store's record (`engine.loaded_build.MemoryRecord`; `hdv_idx` its bitmap row,
    `content_hash` the hash of its text, `memory_id` the store's row where it has rows). `target` is
    the `SearchTarget.name` it came from: the caller's label, not necessarily a corpus's name (the
    portal labels each target with its corpus's primary key).
    `hdc_score`: its ternary HDC score; `late_score`, `meaning_score`: its target's first-stage
    channel's (words or late interaction) and second-stage channel's (meaning, a cosine), where they
    scored it; `fused_score`: 1 / (60 + rank) in the fused or
    merged ranking, where the search fused or merged; `merge_score`: the key several targets were
    merged by (`merge_targets`), else None."""

    memory: MemoryRecord
    hdc_score: float
    target: str
    late_score: float | None
    fused_score: float | None
    merge_score: float | None
    meaning_score: float | None


class Retriever:
    """Search over one or several loaded corpora. Stateless apart from a bounded encoding cache."""

    def __init__(
        self, tokenizer: Tokenizer, config: Config, *, candidates: int = 500, cache_size: int = 512
    ) -> None:
        if candidates < 1 or cache_size < 1:
            # cachetools refuses every insert into a cache of size 0 (ValueError: value too large).
            raise ValueError(f"candidates and cache_size must be >= 1, got {candidates} and {cache_size}")
        self.tokenizer = tokenizer
        self.config = config
        self.candidates = candidates
        self._cache: LRUCache[tuple[str, str], tuple[np.ndarray, np.ndarray, int]] = LRUCache(
            maxsize=cache_size
        )
        self._lock = threading.Lock()

    def encode_text(self, corpus: LoadedIndex, text: str) -> tuple[np.ndarray, np.ndarray, int]:
        """(pos, neg, content_count) of `text` under `corpus`'s encoder; cached per (build, text)."""
        key = (corpus.key, text)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        tokens = self.tokenizer.tokenize(text)
        pos, neg = corpus.encoder.encode([tokens])
        value = (pos[0], neg[0], corpus.encoder.content_count(tokens))
        with self._lock:
            self._cache[key] = value
        return value

    def query_vector(self, corpus: LoadedIndex, query: str, blend: BlendState | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
        """The blended query bitmaps (pos, neg) (words,) uint64 for one corpus (the query's question
        template removed, `query_terms`)."""
        q_pos, q_neg, content = self.encode_text(corpus, query_terms(query))
        history = [self.encode_text(corpus, text)[:2] for text in reversed(blend.responses)] if blend else []
        return blend_vectors((q_pos, q_neg), content, history, corpus.encoder.ngram, corpus.dims)

    def search(self, query: str, targets: Sequence[SearchTarget], *, blend: BlendState | None = None,
               token_budget: int | None = None, top_document: bool = False, trace: dict | None = None
               ) -> list[SearchResult]:
        """Ranked memories, best first.

        `trace`, when given, receives how many candidates each stage kept: {"candidates",
        "threshold", "dedup", "selected"} and the threshold's score cut "cut" (None when fused)."""
        vectors = [self.query_vector(target.corpus, query, blend) for target in targets]
        return self.search_vectors(vectors, targets, token_budget=token_budget, top_document=top_document,
                                   trace=trace, query=query)

    def search_raw(self, query: str, targets: Sequence[SearchTarget], *, blend: BlendState | None = None,
                   limit: int = 10) -> list[SearchResult]:
        """The indexes' own top `limit` rows, by HDC score (no threshold, fusion, dedup or MMR: what
        the index alone finds); several targets are merged as `search` merges them
        (`merge_targets`, with the targets' word coverage)."""
        orders: dict[int, list[Candidate]] = {}
        lengths: dict[int, float] = {}
        for number, target in enumerate(targets):
            if target.corpus.count == 0:
                continue
            q_pos, q_neg = self.query_vector(target.corpus, query, blend)
            if not (q_pos.any() or q_neg.any()):
                continue
            rows, scores = target.corpus.index.search(q_pos, q_neg, min(limit, target.corpus.count),
                                                      allowed_sources=target.enabled_sources)
            orders[number] = [Candidate(number, int(r), int(s)) for r, s in zip(rows, scores, strict=True)]
            lengths[number] = query_length(q_pos, q_neg)
        if len(orders) > 1:
            ranked = merge_targets(orders, lengths, self._coverage(targets, orders, query))[:limit]
        else:
            ranked = sorted((c for own in orders.values() for c in own), key=lambda c: (-c.score, c.row))
        return self._results(targets, self._with_memories(targets, ranked))

    def rank_rows(self, query: str, target: SearchTarget) -> np.ndarray:
        """One target's candidate rows (m,) int64 in the order a search ranks them (HDC's top
        `candidates`, fused with the target's channels where it has them), before the threshold,
        dedup and MMR choose how many to keep: what a known-item benchmark scores."""
        q_pos, q_neg = self.query_vector(target.corpus, query)
        if target.corpus.count == 0:
            return np.zeros(0, dtype=np.int64)
        candidates: list[Candidate] = []
        if q_pos.any() or q_neg.any():  # else HDC finds nothing, yet the meaning channel may, as in a search
            depth, sources = min(self.candidates, target.corpus.count), target.enabled_sources
            rows, scores = target.corpus.index.search_auto(q_pos, q_neg, depth, allowed_sources=sources)
            candidates = [Candidate(0, int(r), int(s)) for r, s in zip(rows, scores, strict=True)]
        candidates.sort(key=lambda c: (-c.score, c.row))
        orders = self._order([target], candidates, query, [(q_pos, q_neg)])
        ranked = orders.get(0, candidates) if orders is not None else candidates
        return np.array([c.row for c in ranked], dtype=np.int64)

    def search_vectors(self, vectors: Sequence[tuple[np.ndarray, np.ndarray]],
                       targets: Sequence[SearchTarget], *, token_budget: int | None = None,
                       top_document: bool = False, trace: dict | None = None,
                       query: str = "") -> list[SearchResult]:
        """`search` from already blended query bitmaps, one (pos, neg) (words,) uint64 per target.
        `query`, the text, is what the targets' channels score, and weighs several targets by their
        word coverage (`merge_targets`); without it they are merged by score per length alone."""
        if len(vectors) != len(targets):
            raise ValueError(f"one query vector per target expected, got {len(vectors)} for {len(targets)}")
        if not targets:
            return []
        dims = {t.corpus.dims for t in targets}
        if len(dims) != 1:
            raise ValueError(f"corpora searched together must share hdc dimensions, got {sorted(dims)}")
        budget = self.config.max_context_tokens if token_budget is None else int(token_budget)
        candidates: list[Candidate] = []
        for number, (target, (q_pos, q_neg)) in enumerate(zip(targets, vectors, strict=True)):
            if target.corpus.count == 0 or not (q_pos.any() or q_neg.any()):
                continue
            rows, scores = target.corpus.index.search_auto(q_pos, q_neg,
                                                           min(self.candidates, target.corpus.count),
                                                           allowed_sources=target.enabled_sources)
            candidates.extend(Candidate(number, int(r), int(s)) for r, s in zip(rows, scores, strict=True))
        candidates.sort(key=lambda c: (-c.score, c.target, c.row))
        trace = {} if trace is None else trace
        trace.update(candidates=len(candidates), threshold=0, dedup=0, selected=0, cut=None)
        orders = self._order(targets, candidates, query, vectors)
        fused = orders is not None
        if len(set(orders) if fused else {c.target for c in candidates}) > 1:
            # Several corpora: their HDC scores are on scales of their own (each encodes the query
            # with its own vocabulary), so they are merged by score per unit of query length
            # (`merge_targets`), and that merged order is the ranking from here on.
            lengths = {number: query_length(*vector) for number, vector in enumerate(vectors)}
            orders = orders if fused else group_by_target(candidates)
            candidates = merge_targets(orders, lengths, self._coverage(targets, orders, query))
            fused = True
            cut = bits.adaptive_threshold(np.array([c.merge for c in candidates]))
            kept = [c for c in candidates if c.merge >= cut and c.score > 0]
            if len(kept) < self.config.min_context:
                kept = [c for c in candidates if c.score > 0][: max(self.config.min_context, len(kept))]
        elif fused:
            count = len(self._threshold(candidates))
            candidates = [c for own in orders.values() for c in own]
            kept = candidates[:max(count, min(self.config.min_context, len(candidates)))]
        else:
            kept = self._threshold(candidates)
            trace["cut"] = min((c.score for c in kept), default=None)
        trace["threshold"] = len(kept)
        if top_document:
            trace["dedup"] = trace["selected"] = min(1, len(candidates))
            return self._results(targets, self._with_memories(targets, candidates[:1]), fused)
        kept = dedup(self._with_memories(targets, kept))
        trace["dedup"] = len(kept)
        if not kept:
            return []
        chosen = self._mmr(targets, kept, budget, dims.pop(), fused)
        trace["selected"] = len(chosen)
        return self._results(targets, [kept[i] for i in chosen], fused)

    def _order(self, targets: Sequence[SearchTarget], candidates: list[Candidate], query: str,
               vectors: Vectors) -> dict[int, list[Candidate]] | None:
        """Each target's candidates in the order the search ranks them (its channels' two stages,
        `engine.stages`; then the memories that define what the query asks about first, and the
        memories it quotes ahead of those, `_chosen_first`), with `fused` = 1 / (60 + rank) in it;
        None when none changed HDC's order (the first stage's own candidates then dropped: they are
        candidates of the fusion only)."""
        orders = first_stage(targets, bind(targets, query, FIRST), candidates, vectors)
        before = orders if orders is not None else group_by_target(candidates)  # the first stage's order
        second = bind(targets, query, SECOND)
        if vectors and any(query is not None for query in second):
            by_meaning = second_stage(targets, second, before, vectors)
            orders = by_meaning if by_meaning is not None else orders
        # A quotation's memories are moved last, so that they end up ahead of the definers.
        for chosen in (definer(query), quoted(query)):
            if chosen is not None and candidates:
                current = orders if orders is not None else before  # None: neither stage moved any
                promoted = self._chosen_first(targets, current, chosen, before)
                orders = promoted if promoted is not None else orders
        return orders

    def _chosen_first(self, targets: Sequence[SearchTarget], orders: dict[int, list[Candidate]],
                      chosen: Callable[[str], bool], before: dict[int, list[Candidate]]
                      ) -> dict[int, list[Candidate]] | None:
        """`orders` with the memories whose text is `chosen` (`engine.query_names.definer`, `quoted`)
        among each target's first `DEFINER_DEPTH`, there or in the first stage's order `before`,
        moved ahead of the rest, each group in its order; None: none moved (none is, or they lead
        already). The first stage's are looked at too because the meaning stage ranks by what a
        memory says as a whole: a memory that holds a quoted sentence among text on other things can
        be its last, and fall from the first rows of the fused order that HDC and the words led."""
        moved = False
        out = {}
        for number, own in orders.items():
            head = own[:DEFINER_DEPTH]
            looked = {id(c) for c in head}
            looked.update(id(c) for c in before.get(number, [])[:DEFINER_DEPTH])
            present = {id(c) for c in self._with_memories(targets, [c for c in own if id(c) in looked])}
            first = [c for c in own if id(c) in present and chosen(c.memory.text)]
            if any(a is not b for a, b in zip(first, own[:len(first)], strict=True)):  # not leading already
                moved = True
                picked = {id(c) for c in first}
                own = first + [c for c in own if id(c) not in picked]
            out[number] = own
            for rank, c in enumerate(own, start=1):
                c.fused = 1.0 / (DEFAULT_K + rank)
        return out if moved else None

    def get_context(
        self,
        query: str,
        targets: Sequence[SearchTarget],
        *,
        blend: BlendState | None = None,
        token_budget: int | None = None,
        top_document: bool = False,
        compress: bool = False,
    ) -> str:
        """The retrieved texts joined by "\\n\\n---\\n\\n" (each compressed when `compress`)."""
        results = self.search(
            query, targets, blend=blend, token_budget=token_budget, top_document=top_document
        )
        texts = [r.memory.text for r in results]
        return CONTEXT_DELIMITER.join(bits.compress_context(t) if compress else t for t in texts)

    def _threshold(self, ranked: list[Candidate]) -> list[Candidate]:
        if not ranked:
            return []
        cut = bits.adaptive_threshold(np.array([c.score for c in ranked], dtype=np.float64))
        kept = [c for c in ranked if c.score >= cut and c.score > 0]
        if len(kept) < self.config.min_context:
            kept = [c for c in ranked if c.score > 0][: max(self.config.min_context, len(kept))]
        return kept

    def _coverage(self, targets: Sequence[SearchTarget], orders: dict[int, list[Candidate]], query: str
                  ) -> dict[int, float]:
        """Each target's `word_coverage` of `query` over its first `COVERAGE_DEPTH` candidates (in its
        own order), whose memories it fetches (`_with_memories`: not fetched again later); empty for
        a query without a counted word."""
        if not words(query):
            return {}
        out = {}
        for number, own in orders.items():
            first = self._with_memories(targets, own[:COVERAGE_DEPTH])
            out[number] = word_coverage(query, [c.memory.text for c in first])
        return out

    def _with_memories(self, targets: Sequence[SearchTarget], candidates: list[Candidate]) -> list[Candidate]:
        """`candidates` with their memories (fetched from their stores where not yet), less the rows
        a store no longer holds (e.g. deleted: they cannot be shown)."""
        by_target: dict[int, list[int]] = {}
        for c in candidates:
            if c.memory is None:
                by_target.setdefault(c.target, []).append(c.row)
        found = {number: targets[number].store.get_memories(rows) for number, rows in by_target.items()}
        out = []
        for c in candidates:
            if c.memory is None:
                memory = found[c.target].get(c.row)
                if memory is None:
                    continue
                c.memory = memory if memory.hdv_idx == c.row else replace(memory, hdv_idx=c.row)
                c.words = frozenset(_WORDS.findall(memory.text.lower()))
            out.append(c)
        return out

    def _mmr(self, targets: Sequence[SearchTarget], kept: list[Candidate], budget: int, dims: int,
             fused: bool = False) -> list[int]:
        words = bits.words(dims)
        pos = np.empty((len(kept), words), dtype=np.uint64)
        neg = np.empty_like(pos)
        by_target: dict[int, list[int]] = {}
        for i, c in enumerate(kept):
            by_target.setdefault(c.target, []).append(i)
        for number, positions in by_target.items():
            p, n = targets[number].corpus.index.get_bitmaps(np.array([kept[i].row for i in positions]))
            pos[positions], neg[positions] = p, n
        scores = mmr_scores(kept, fused)
        tokens = np.array([c.memory.token_count for c in kept], dtype=np.int64)
        return hdc_mmr(pos, neg, scores, tokens, dims, budget, self.config.min_context)

    @staticmethod
    def _results(
        targets: Sequence[SearchTarget], chosen: list[Candidate], fused: bool = False
    ) -> list[SearchResult]:
        return [
            SearchResult(
                c.memory,
                float(c.score),
                targets[c.target].name,
                c.late,
                c.fused if fused else None,
                c.merge,
                c.meaning,
            )
            for c in chosen
        ]
