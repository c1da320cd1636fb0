"""Retriever: encode -> blend -> prune -> threshold -> dedup -> HDC-MMR -> token budget.

Multi-user by construction: the conversation's blend history is a `BlendState` the caller owns
(one per conversation, JSON-serialisable), never state of the Retriever or of this module. The
Retriever holds only configuration, the tokenizer and a bounded cache of text encodings (a pure
function of (build, text), so sharing it between conversations leaks nothing).

Choices the spec leaves open:

* Blend. Responses are kept as text (newest last, at most `BlendState.max_turns`) and encoded
  with the searched corpus's encoder on use, so a state stays valid across rebuilds and corpora.
  Vote: s = w_q * q + sum_i w_i * r_i over ternary vectors, w_q = min(0.5, content/(2*ngram))
  (content = query tokens the encoder uses), response i (0 = newest) weighs 0.5^i, the response
  weights normalised to sum to 1 - w_q. The blended vector is sign(s); an exact tie (|s| < 1e-9) is 0. With no
  history the query is used as is.
* Query text: its question template (`QUESTION_WORDS`: "what", "is", "tell me about", ...) is
  removed before encoding (`query_terms`); it made entries containing "What" or "?" hubs.
* Candidates: the index's top-`candidates` (default 500) by ternary score, after the dataset
  filter (applied inside the index, before any scoring): exact below
  `index.SAMPLED_SEARCH_MIN_ROWS` rows, from a sampled first pass with an exact re-rank above
  (`BitmapIndex.search_auto`; recall against the exact scan measured by bench/search.py). Several corpora of the same dims
  are searched one by one and their candidates merged before everything below.
* Threshold: `bits.adaptive_threshold` over the merged candidate scores; kept: score >= it and
  score > 0, topped up from the ranking (score > 0) to `min_context` documents.
* Dedup: a candidate whose lower-cased word set (regex \\w+) is a subset of a better-ranked kept
  candidate's is dropped; a kept candidate whose word set is a strict subset of a new one is
  replaced by it (the fuller text wins, in the better rank). Empty texts are dropped.
* HDC-MMR: coverage C is a ternary vector, starting at 0. novelty(x) = share of x's nonzero dims
  where C = 0; null_novelty = 1 - density(C) (a random vector's expected novelty);
  marginal = score * novelty / null_novelty. Greedy: take the best marginal that fits the
  remaining token budget; stop when nothing fits, or when the best marginal is <= 0 and
  `min_context` documents are already chosen. C absorbs a choice: C = x where C = 0, C stays
  where x agrees or is 0, and C = 0 where they collide (opposite signs).
* Budget: `token_budget` (default `config.max_context_tokens`) is never exceeded, not even to
  reach `min_context`. `top_document=True` returns only the best-scoring candidate.
* Fusion (a target with a `late` ranker, e.g. late interaction over the corpus's multi-vector
  store): each such target's HDC candidates and its late ranking (top `FUSION_DEPTH` of each) are
  fused by reciprocal rank fusion, weighted by the target's `fusion` (`FusionWeights`, chosen per
  corpus from its own self-queries by `fusion_evidence`; a late weight of 0 skips the late ranker); rows only the late ranker found join the candidates with their
  exact HDC score. The adaptive threshold still decides *how many* candidates are kept (at least
  `min_context`), the fused ranking decides *which*; dedup is unchanged and HDC-MMR weighs
  novelty against the fused score. Targets without a late ranking take part with the RRF score
  of their HDC ranking alone. With no late rankings at all, nothing above changes.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine import bits
from engine.config import Config
from engine.fusion import FusionWeights, choose_fusion_weights, reciprocal_rank_fusion, self_queries
from engine.loaded_build import LoadedCorpus, MemoryStore
from engine.tokenizer import Tokenizer

CONTEXT_DELIMITER = "\n\n---\n\n"
# Depth of the HDC and late rankings that reciprocal rank fusion sees.
FUSION_DEPTH = 100
_WORDS = re.compile(r"\w+")
# The question template of a query ("What is X?", "Tell me about X"): English question and stop
# words. In a corpus where they are rare (a glossary), their IDF is high, so they dominate a short
# query and every entry that happens to contain "What" or "?" becomes a hub: on the Jargon File one
# entry sat in the top 10 of 98 % of "What is X?" questions, and removing the template lifted
# recall@10 from 0.600 to 0.665 (bench/retrieval_eval.py, "hdc-stop").
QUESTION_WORDS = frozenset([
    "what", "who", "whom", "whose", "which", "when", "where", "why", "how", "is", "are", "was", "were", "be",
    "been", "do", "does", "did", "the", "a", "an", "of", "to", "in", "on", "for", "and", "or", "about", "tell",
    "me", "explain", "define", "describe", "mean", "means", "meaning"])
_QUERY_WORDS = re.compile(r"[\w'-]+")


def query_terms(query: str) -> str:
    """`query` without its question template (`QUESTION_WORDS`, punctuation); the query itself
    when nothing else is left ("What is it?")."""
    kept = [word for word in _QUERY_WORDS.findall(query) if word.lower() not in QUESTION_WORDS]
    return " ".join(kept) if kept else query


class BlendState:
    """One conversation's model responses, newest last. JSON round trip with to_dict/from_dict.

    Responses beyond `max_turns` are dropped: their weight would be below 0.5^8 = 0.4 %.
    """

    VERSION = 1

    def __init__(self, responses: Iterable[str] = (), max_turns: int = 8) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.max_turns = max_turns
        self._responses: list[str] = []
        for text in responses:
            self.add_turn(text)

    @property
    def responses(self) -> tuple[str, ...]:
        return tuple(self._responses)

    def add_turn(self, text: str) -> None:
        """Record a model response (only responses are tracked, never user queries)."""
        if not isinstance(text, str):
            raise ValueError(f"response text must be str, got {type(text).__name__}")
        if text.strip():
            self._responses.append(text)
            del self._responses[:-self.max_turns]

    def clear(self) -> None:
        self._responses.clear()

    def __len__(self) -> int:
        return len(self._responses)

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.VERSION, "max_turns": self.max_turns, "responses": list(self._responses)}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> BlendState:
        if not data:
            return cls()
        if data.get("version") != cls.VERSION or not isinstance(data.get("responses"), list):
            raise ValueError(f"blend state: expected version {cls.VERSION} with a 'responses' list, got {data!r:.200}")
        return cls(data["responses"], max_turns=int(data.get("max_turns", 8)))


def blend_vectors(query: tuple[np.ndarray, np.ndarray], content_count: int,
                  history: Sequence[tuple[np.ndarray, np.ndarray]], ngram: int, dims: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Weighted majority vote of the query and the responses (history: newest FIRST).

    Shapes: every (pos, neg) is (words,) uint64 -> blended (pos, neg) (words,) uint64.
    """
    if not history:
        return query
    query_weight = min(0.5, content_count / (ngram * 2))
    decay = 0.5 ** np.arange(len(history))
    weights = decay / decay.sum() * (1.0 - query_weight)
    total = query_weight * bits.unpack_ternary(*query, dims).astype(np.float64)
    for weight, vector in zip(weights, history, strict=True):
        total += weight * bits.unpack_ternary(*vector, dims)
    # Ties (e.g. a 0.5 query against the whole history) abstain; rounding must not break them.
    total[np.abs(total) < 1e-9] = 0.0
    return bits.pack_ternary(np.sign(total).astype(np.int8))


@dataclass(frozen=True)
class SearchTarget:
    """One corpus to search: its loaded build, where its texts live, and its dataset filter.

    `late`, when set, ranks the build's rows for a query text by another method: [(row, score)],
    best first, or None when it cannot answer now (the search then uses HDC alone). `fusion`
    weighs the two rankings (None: equal weights); with a late weight of 0, `late` is not called.
    """

    corpus: LoadedCorpus
    store: MemoryStore
    name: str = ""
    enabled_sources: frozenset[int] | None = None
    late: Callable[[str], Sequence[tuple[int, float]] | None] | None = None
    fusion: FusionWeights | None = None

    @property
    def uses_late(self) -> bool:
        return self.late is not None and (self.fusion is None or self.fusion.late > 0)


@dataclass
class _Candidate:
    target: int
    row: int
    score: int
    memory: dict | None = None
    words: frozenset[str] = frozenset()
    late: float | None = None  # the late ranker's score, when it ranked this row
    fused: float = 0.0  # RRF score, when the search fuses rankings


def _dedup(candidates: list[_Candidate]) -> list[_Candidate]:
    kept: list[_Candidate] = []
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


class Retriever:
    """Search over one or several loaded corpora. Stateless apart from a bounded encoding cache."""

    def __init__(self, tokenizer: Tokenizer, config: Config, *, candidates: int = 500, cache_size: int = 512) -> None:
        if candidates < 1:
            raise ValueError(f"candidates must be >= 1, got {candidates}")
        self.tokenizer = tokenizer
        self.config = config
        self.candidates = candidates
        self._cache: OrderedDict[tuple[str, str], tuple[np.ndarray, np.ndarray, int]] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def encode_text(self, corpus: LoadedCorpus, text: str) -> tuple[np.ndarray, np.ndarray, int]:
        """(pos, neg, content_count) of `text` under `corpus`'s encoder; cached per (build, text)."""
        key = (corpus.key, text)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        tokens = self.tokenizer.tokenize(text)
        pos, neg = corpus.encoder.encode([tokens])
        value = (pos[0], neg[0], corpus.encoder.content_count(tokens))
        with self._lock:
            self._cache[key] = value
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return value

    def query_vector(self, corpus: LoadedCorpus, query: str, blend: BlendState | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
        """The blended query bitmaps (pos, neg) (words,) uint64 for one corpus (the query's question
        template removed, `query_terms`)."""
        q_pos, q_neg, content = self.encode_text(corpus, query_terms(query))
        history = [self.encode_text(corpus, text)[:2] for text in reversed(blend.responses)] if blend else []
        return blend_vectors((q_pos, q_neg), content, history, corpus.encoder.ngram, corpus.dims)

    def search(self, query: str, targets: Sequence[SearchTarget], *, blend: BlendState | None = None,
               token_budget: int | None = None, top_document: bool = False, trace: dict | None = None) -> list[dict]:
        """Ranked memories: [{"memory": {id, text, hdv_idx, metadata, token_count}, "hdc_score", "corpus"}].

        `trace`, when given, receives how many candidates each stage kept: {"candidates",
        "threshold", "dedup", "selected"} and the threshold's score cut "cut" (None when fused)."""
        vectors = [self.query_vector(target.corpus, query, blend) for target in targets]
        late = [target.late(query) if target.uses_late else None for target in targets]
        return self.search_vectors(vectors, targets, token_budget=token_budget, top_document=top_document,
                                   late=late, trace=trace)

    def search_vectors(self, vectors: Sequence[tuple[np.ndarray, np.ndarray]], targets: Sequence[SearchTarget], *,
                       token_budget: int | None = None, top_document: bool = False,
                       late: Sequence[Sequence[tuple[int, float]] | None] | None = None,
                       trace: dict | None = None) -> list[dict]:
        """`search` from already blended query bitmaps, one (pos, neg) (words,) uint64 per target,
        and optionally one late ranking ([(row, score)], best first, or None) per target."""
        if len(vectors) != len(targets):
            raise ValueError(f"one query vector per target expected, got {len(vectors)} for {len(targets)}")
        if not targets:
            return []
        dims = {t.corpus.dims for t in targets}
        if len(dims) != 1:
            raise ValueError(f"corpora searched together must share hdc dimensions, got {sorted(dims)}")
        budget = self.config.max_context_tokens if token_budget is None else int(token_budget)
        candidates: list[_Candidate] = []
        for number, (target, (q_pos, q_neg)) in enumerate(zip(targets, vectors, strict=True)):
            if target.corpus.count == 0 or not (q_pos.any() or q_neg.any()):
                continue
            rows, scores = target.corpus.index.search_auto(
                q_pos, q_neg, min(self.candidates, target.corpus.count), allowed_sources=target.enabled_sources)
            candidates.extend(_Candidate(number, int(r), int(s)) for r, s in zip(rows, scores, strict=True))
        candidates.sort(key=lambda c: (-c.score, c.target, c.row))
        trace = {} if trace is None else trace
        trace.update(candidates=len(candidates), threshold=0, dedup=0, selected=0, cut=None)
        fused = late is not None and any(ranking for ranking in late)
        if fused:
            if len(late) != len(targets):
                raise ValueError(f"one late ranking per target expected, got {len(late)} for {len(targets)}")
            count = len(self._threshold(candidates))
            candidates = self._fuse(targets, vectors, late, candidates)
            kept = candidates[:max(count, min(self.config.min_context, len(candidates)))]
        else:
            kept = self._threshold(candidates)
            trace["cut"] = min((c.score for c in kept), default=None)
        trace["threshold"] = len(kept)
        if top_document:
            trace["dedup"] = trace["selected"] = min(1, len(candidates))
            return self._results(targets, self._with_memories(targets, candidates[:1]), fused)
        kept = _dedup(self._with_memories(targets, kept))
        trace["dedup"] = len(kept)
        if not kept:
            return []
        chosen = self._mmr(targets, kept, budget, dims.pop(), fused)
        trace["selected"] = len(chosen)
        return self._results(targets, [kept[i] for i in chosen], fused)

    def _fuse(self, targets: Sequence[SearchTarget], vectors: Sequence[tuple[np.ndarray, np.ndarray]],
              late: Sequence[Sequence[tuple[int, float]] | None], candidates: list[_Candidate]) -> list[_Candidate]:
        """The candidates (HDC order in, fused order out), with the late rankers' rows added."""
        by_target: dict[int, list[_Candidate]] = {}
        for c in candidates:
            by_target.setdefault(c.target, []).append(c)
        out: list[_Candidate] = []
        for number, target in enumerate(targets):
            own = by_target.get(number, [])
            hdc_rows = [c.row for c in own[:FUSION_DEPTH]]
            ranking = self._late_rows(target, late[number] or ())
            known = {c.row: c for c in own}
            extra = np.array([row for row in ranking if row not in known], dtype=np.int64)
            if extra.size:
                scores = target.corpus.index.score_rows(extra, *vectors[number])
                for row, score in zip(extra.tolist(), scores.tolist(), strict=True):
                    known[row] = _Candidate(number, row, int(score))
                    own.append(known[row])
            for row, score in ranking.items():
                known[row].late = score
            weights = (target.fusion.hdc, target.fusion.late) if target.fusion is not None else (1.0, 1.0)
            lists = [(rows, weight) for rows, weight in zip((hdc_rows, list(ranking)[:FUSION_DEPTH]), weights,
                                                            strict=True) if rows]
            for row, score in reciprocal_rank_fusion([rows for rows, _ in lists], weights=[w for _, w in lists]):
                known[row].fused = score
            out.extend(own)
        out.sort(key=lambda c: (-c.fused, -c.score, c.target, c.row))
        return out

    @staticmethod
    def _late_rows(target: SearchTarget, ranking: Iterable[tuple[int, float]]) -> dict[int, float]:
        """{row: score} of a late ranking, best first, keeping rows of this build that the dataset
        filter allows (a late ranker's store may lag behind or hold more than the index)."""
        index = target.corpus.index
        rows: dict[int, float] = {}
        for row, score in ranking:
            row = int(row)
            if not 0 <= row < index.count or row in rows:
                continue
            if target.enabled_sources is not None and int(index.source_ids[row]) not in target.enabled_sources:
                continue
            rows[row] = float(score)
        return rows

    def get_context(self, query: str, targets: Sequence[SearchTarget], *, blend: BlendState | None = None,
                    token_budget: int | None = None, top_document: bool = False, compress: bool = False) -> str:
        """The retrieved texts joined by "\\n\\n---\\n\\n" (each compressed when `compress`)."""
        results = self.search(query, targets, blend=blend, token_budget=token_budget, top_document=top_document)
        texts = [r["memory"]["text"] for r in results]
        return CONTEXT_DELIMITER.join(bits.compress_context(t) if compress else t for t in texts)

    def _threshold(self, ranked: list[_Candidate]) -> list[_Candidate]:
        if not ranked:
            return []
        cut = bits.adaptive_threshold(np.array([c.score for c in ranked], dtype=np.float64))
        kept = [c for c in ranked if c.score >= cut and c.score > 0]
        if len(kept) < self.config.min_context:
            kept = [c for c in ranked if c.score > 0][: max(self.config.min_context, len(kept))]
        return kept

    def _with_memories(self, targets: Sequence[SearchTarget], candidates: list[_Candidate]) -> list[_Candidate]:
        by_target: dict[int, list[int]] = {}
        for c in candidates:
            by_target.setdefault(c.target, []).append(c.row)
        found = {number: targets[number].store.get_memories(rows) for number, rows in by_target.items()}
        out = []
        for c in candidates:
            memory = found[c.target].get(c.row)
            if memory is None:
                continue  # a row the store no longer holds (e.g. deleted) cannot be shown
            c.memory = {**memory, "hdv_idx": c.row}
            c.words = frozenset(_WORDS.findall(memory["text"].lower()))
            out.append(c)
        return out

    def _mmr(self, targets: Sequence[SearchTarget], kept: list[_Candidate], budget: int, dims: int,
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
        scores = np.array([c.fused if fused else c.score for c in kept], dtype=np.float64)
        tokens = np.array([int(c.memory["token_count"]) for c in kept], dtype=np.int64)
        return hdc_mmr(pos, neg, scores, tokens, dims, budget, self.config.min_context)

    @staticmethod
    def _results(targets: Sequence[SearchTarget], chosen: list[_Candidate], fused: bool = False) -> list[dict]:
        return [{"memory": c.memory, "hdc_score": float(c.score), "corpus": targets[c.target].name,
                 "late_score": c.late, "fused_score": c.fused if fused else None} for c in chosen]


def hdc_ranking(retriever: Retriever, corpus: LoadedCorpus, query: str, depth: int = FUSION_DEPTH) -> list[int]:
    """The index's exact top-`depth` rows for `query` (no blend, threshold or MMR), best first."""
    q_pos, q_neg = retriever.query_vector(corpus, query)
    if corpus.count == 0 or not (q_pos.any() or q_neg.any()):
        return []
    rows, _ = corpus.index.search_exact(q_pos, q_neg, min(depth, corpus.count))
    return [int(row) for row in rows]


def fusion_evidence(*, retriever: Retriever, target: SearchTarget, samples: int = 48, seed: int = 0) -> FusionWeights:
    """`FusionWeights` for `target` from its own data: `samples` seeded memories become known-item
    self-queries (`fusion.self_queries`), ranked by HDC and by `target.late`, and
    `choose_fusion_weights` keeps the weights that rank them best. Costs 2 * `samples` late rankings.
    """
    if target.late is None:
        raise ValueError("fusion evidence needs a target with a late ranker")
    count = target.corpus.count
    rng = np.random.default_rng(seed)
    rows = sorted(rng.choice(count, size=min(samples, count), replace=False).tolist()) if count else []
    memories = target.store.get_memories(rows)
    rows = [row for row in rows if row in memories]
    queries = self_queries([memories[row]["text"] for row in rows], seed=seed)
    hdc, late, relevant = [], [], []
    for number, query in queries:
        ranking = target.late(query)
        if ranking is None:
            raise ValueError("the late ranker cannot answer now; no evidence gathered")
        hdc.append(hdc_ranking(retriever, target.corpus, query))
        late.append([int(row) for row, _ in ranking][:FUSION_DEPTH])
        relevant.append(rows[number])
    return choose_fusion_weights(hdc, late, relevant)
