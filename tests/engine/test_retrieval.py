"""Retriever: blend, BlendState isolation, threshold, dedup, HDC-MMR, budget, filters, several corpora."""

from __future__ import annotations

import dataclasses
import json
import zlib

import numpy as np
import pytest

from engine.bits import adaptive_threshold, pack_ternary, unpack_ternary
from engine.channels import LATE_INTERACTION, WORDS, ChannelUnavailable
from engine.config import Config
from engine.fusion import FusionChoice, SelfQuery
from engine.gate import _evidence_pool, channel_evidence
from engine.index import BitmapIndex
from engine.lexical import WORD_CANDIDATES, WORD_FALLBACK, WordIndex, WordQuery
from engine.loaded_build import LoadedIndex, MemoryRecord
from engine.query import BlendState, blend_vectors, query_terms
from engine.ranking import Candidate, hdc_mmr, mmr_scores
from engine.retrieval import CONTEXT_DELIMITER, Retriever, SearchResult, SearchTarget
from engine.stages import FUSION_DEPTH
from engine.text_store import LateInteractionChannel, LateInteractionQuery
from tests.engine.test_encoder import make_encoder

DIMS = 512


class WordTokenizer:
    """Tiny deterministic tokenizer: each whitespace word -> 3 + crc32(word) % 340; ids 0-2 special."""

    vocab_size = 400
    special_ids = {0, 1, 2}

    def tokenize(self, text: str) -> list[int]:
        return [1] + [3 + zlib.crc32(w.encode()) % 340 for w in text.lower().split()]

    def bulk_tokenize(self, texts: list[str]) -> list[list[int]]:
        return [self.tokenize(t) for t in texts]

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))

    def detokenize(self, tokens: list[int]) -> str:
        raise NotImplementedError("not needed by the retriever")


class DictStore:
    def __init__(self, texts: list[str], token_counts: list[int] | None = None):
        self.texts = texts
        self.token_counts = token_counts or [len(t.split()) for t in texts]
        self.calls: list[list[int]] = []

    def get_memories(self, rows: list[int]) -> dict[int, MemoryRecord]:
        self.calls.append(list(rows))
        return {r: MemoryRecord(hdv_idx=r, content_hash=f"m{r}", text=self.texts[r], metadata={"source": "s"},
                                token_count=self.token_counts[r]) for r in rows}


def ternary(rng: np.random.Generator, n: int, density: float = 0.3) -> np.ndarray:
    return (rng.choice([-1, 1], size=(n, DIMS)) * (rng.random((n, DIMS)) < density)).astype(np.int8)


def make_corpus(tmp_path, name: str, vectors: np.ndarray, source_ids=None) -> LoadedIndex:
    index = BitmapIndex.create(tmp_path / f"{name}.idx", DIMS)
    pos, neg = pack_ternary(vectors)
    index.append(pos, neg, token_counts=np.full(len(vectors), 10),
                 source_ids=np.zeros(len(vectors), np.int32) if source_ids is None else source_ids)
    index.finalize()
    encoder = make_encoder(tmp_path, dims=DIMS, ngram=3, name=f"{name}.vocab")
    return LoadedIndex(
        encoder=encoder, index=BitmapIndex.open(tmp_path / f"{name}.idx"), build_dir=tmp_path / name
    )


def packed(vector: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return pack_ternary(vector[None, :].astype(np.int8))[0][0], pack_ternary(vector[None, :].astype(np.int8))[
        1
    ][0]


def test_blend_weights_and_decay_on_constructed_vectors():
    dims = 64
    query = np.zeros(dims, np.int8)
    newest = np.zeros(dims, np.int8)
    older = np.zeros(dims, np.int8)
    query[:4] = 1
    newest[0], older[0] = -1, -1   # 0.2 - 0.533 - 0.267 < 0
    older[1] = -1                  # 0.2 - 0.267 < 0: two query tokens lean on history
    newest[2] = -1                 # 0.2 - 0.533 < 0
    newest[5], older[5] = 1, -1    # 0.533 - 0.267 > 0: the newest response outweighs the older
    older[6] = 1                   # history only
    blended = blend_vectors(packed(query), 2, [packed(newest), packed(older)], ngram=5, dims=dims)
    dense = unpack_ternary(*blended, dims)
    expected = np.zeros(dims, np.int8)
    expected[[0, 1, 2]] = -1
    expected[[3, 5, 6]] = 1
    np.testing.assert_array_equal(dense, expected)
    # A substantive query (>= 2 * ngram content tokens) weighs 0.5: it beats any proper part of
    # the history and ties (abstains) against all of it.
    dense = unpack_ternary(*blend_vectors(packed(query), 10, [packed(newest), packed(older)], 5, dims), dims)
    assert dense[1] == 1 and dense[2] == 1 and dense[0] == 0
    # No history: the query itself.
    same = blend_vectors(packed(query), 1, [], 5, dims)
    np.testing.assert_array_equal(unpack_ternary(*same, dims), query)


def test_blend_states_are_independent_and_round_trip(tmp_path):
    corpus = make_corpus(tmp_path, "c", ternary(np.random.default_rng(0), 4))
    retriever = Retriever(WordTokenizer(), Config())
    first, second = BlendState(), BlendState()
    first.add_turn("zeta eta theta iota kappa lambda mu nu xi omicron")
    alone = retriever.query_vector(corpus, "what about it", None)
    np.testing.assert_array_equal(retriever.query_vector(corpus, "what about it", second)[0], alone[0])
    assert not np.array_equal(retriever.query_vector(corpus, "what about it", first)[0], alone[0])
    assert len(second) == 0
    restored = BlendState.from_dict(json.loads(json.dumps(first.to_dict())))
    assert restored.responses == first.responses
    for a, b in zip(retriever.query_vector(corpus, "what about it", restored),
                    retriever.query_vector(corpus, "what about it", first), strict=True):
        np.testing.assert_array_equal(a, b)
    for i in range(12):
        first.add_turn(f"response {i}")
    assert len(first) == 8 and first.responses[-1] == "response 11"
    first.add_turn("   ")
    assert len(first) == 8
    first.clear()
    assert first.to_dict()["responses"] == []
    with pytest.raises(ValueError, match="blend state"):
        BlendState.from_dict({"version": 99, "responses": []})


def constructed_case(tmp_path, min_context=2):
    """Query = two disjoint halves Q1 | Q2 (h dims each). Rows: 0 = Q1 + 10 dims of Q2 (best),
    1 = exact duplicate text of 0, 2 = text contained in 0, 3 = row 0 less 15 dims (a near copy with
    its own text), 4 = h - 10 dims of Q2 (another aspect, scoring below 3), then 300 sparse noise rows."""
    rng = np.random.default_rng(42)
    query = ternary(rng, 1, 0.4)[0]
    support = np.flatnonzero(query)
    h = len(support) // 2
    half1, half2 = support[:h], support[h:]
    rows = np.concatenate([np.zeros((5, DIMS), np.int8), ternary(rng, 300, 0.05)])
    rows[0, half1] = query[half1]
    rows[0, half2[:10]] = query[half2[:10]]
    rows[1] = rows[2] = rows[3] = rows[0]
    rows[3, half2[:10]] = 0
    rows[3, half1[:5]] = 0
    rows[4, half2[: h - 10]] = query[half2[: h - 10]]
    texts = ["alpha beta gamma delta", "Alpha, beta gamma delta!", "beta gamma", "epsilon zeta eta",
             "theta iota kappa"] + [f"noise {i} w{i}" for i in range(300)]
    corpus = make_corpus(tmp_path, "case", rows)
    store = DictStore(texts)
    retriever = Retriever(WordTokenizer(), Config(min_context=min_context), candidates=100)
    return retriever, [SearchTarget(corpus, store, "case")], packed(query), rows, query


def test_threshold_dedup_and_mmr_on_constructed_case(tmp_path):
    retriever, targets, q, rows, query = constructed_case(tmp_path)
    scores = rows @ query.astype(np.int64)
    assert scores[0] > scores[3] > scores[4] > scores[5:].max()
    results = retriever.search_vectors([q], targets)
    picked = [r.memory.hdv_idx for r in results]
    assert 1 not in picked and 2 not in picked        # exact duplicate and contained text removed
    assert picked[:2] == [0, 4]                       # the other aspect before the near copy,
    # The near copy adds no coverage after row 0: it only comes back once later choices have
    # collided with row 0's dims (collision zeroing), behind far lower-scoring novel rows.
    assert 3 not in picked or picked.index(3) > 5
    top = np.sort(scores)[::-1][:100]
    cut = adaptive_threshold(top.astype(np.float64))
    assert all(r.hdc_score >= cut for r in results)
    assert sum(1 for s in top if s >= cut) < 100      # the threshold did cut candidates
    assert results[0].hdc_score == float(scores[0]) and results[0].target == "case"
    memory = results[0].memory
    assert (
        (memory.content_hash, memory.text) == (f"m{memory.hdv_idx}", targets[0].store.texts[memory.hdv_idx])
        and memory.metadata == {"source": "s"}
        and memory.memory_id is None
    )


def test_results_are_search_results_that_name_their_target_not_a_corpus(tmp_path):
    retriever, targets, q, rows, query = constructed_case(tmp_path)
    results = retriever.search_vectors([q], targets)
    assert results and all(type(r) is SearchResult for r in results)
    best = results[0]
    assert best.target == targets[0].name and best.hdc_score == float((rows @ query.astype(np.int64))[0])
    assert (best.late_score, best.fused_score, best.merge_score) == (
        None,
        None,
        None,
    )  # one target, HDC alone
    with pytest.raises(dataclasses.FrozenInstanceError):
        best.target = "another"  # type: ignore[misc]


def test_threshold_tops_up_to_min_context():
    retriever = Retriever(WordTokenizer(), Config(min_context=6))
    ranked = [Candidate(0, row, score) for row, score in enumerate([100, 99, 5, 4, 3, 2, 1, 0, -1, -2])]
    assert len([c for c in ranked if c.score >= adaptive_threshold([c.score for c in ranked])]) < 6
    assert [c.row for c in retriever._threshold(ranked)] == [0, 1, 2, 3, 4, 5]
    retriever = Retriever(WordTokenizer(), Config(min_context=9))
    assert [c.row for c in retriever._threshold(ranked)] == [0, 1, 2, 3, 4, 5, 6]  # never a score <= 0


def test_top_document_and_context(tmp_path):
    retriever, targets, q, _, _ = constructed_case(tmp_path)
    top = retriever.search_vectors([q], targets, top_document=True)
    assert [r.memory.hdv_idx for r in top] == [0]
    retriever.query_vector = lambda corpus, query, blend=None: q  # the query text is irrelevant here
    context = retriever.get_context("anything", targets)
    parts = context.split(CONTEXT_DELIMITER)
    assert parts[0] == "alpha beta gamma delta" and "theta iota kappa" in parts
    compressed = retriever.get_context("anything", targets, compress=True)
    assert compressed.count(CONTEXT_DELIMITER) == context.count(CONTEXT_DELIMITER)


def test_token_budget_is_never_exceeded(tmp_path):
    retriever, targets, q, _, _ = constructed_case(tmp_path, min_context=6)
    assert len(retriever.search_vectors([q], targets)) >= 6
    small = retriever.search_vectors([q], targets, token_budget=9)
    assert sum(r.memory.token_count for r in small) <= 9
    assert [r.memory.hdv_idx for r in small] == [0, 4]  # 4 + 3 tokens, then nothing fits
    assert retriever.search_vectors([q], targets, token_budget=1) == []


def test_hdc_mmr_prefers_novel_items_and_respects_budget():
    rng = np.random.default_rng(3)
    base = ternary(rng, 1, 0.3)[0]
    other = ternary(rng, 1, 0.3)[0]
    other[base != 0] = 0  # no collisions, so the copy of `base` stays fully covered
    vectors = np.stack([base, base, other])
    pos, neg = pack_ternary(vectors)
    chosen = hdc_mmr(pos, neg, np.array([100.0, 99.0, 90.0]), np.array([1, 1, 1]), DIMS, 10, 0)
    assert chosen[:2] == [0, 2]
    assert chosen == [0, 2]  # the exact copy has zero novelty: marginal 0, stops there
    assert hdc_mmr(pos, neg, np.array([100.0, 99.0, 90.0]), np.array([1, 1, 1]), DIMS, 10, 3) == [0, 2, 1]
    assert hdc_mmr(pos, neg, np.array([100.0, 99.0, 90.0]), np.array([5, 1, 5]), DIMS, 6, 3) == [0, 1]


def test_mmr_weighs_the_fused_order_on_the_pools_own_scale():
    def candidate(score: int, rank: int, merge: float | None = None) -> Candidate:
        return Candidate(0, rank, score, fused=1 / (60 + rank), merge=merge)

    kept = [candidate(300, 2), candidate(1000, 1), candidate(950, 30)]
    assert mmr_scores(kept, fused=False).tolist() == [300, 1000, 950]
    assert mmr_scores(kept, fused=True).tolist() == [950, 1000, 300]  # best score to the best rank
    merged = [candidate(5, 1, merge=2.0), candidate(9, 2, merge=4.0)]
    assert mmr_scores(merged, fused=True).tolist() == [4.0, 2.0]  # merged: the merge keys' scale
    assert mmr_scores([], fused=True).size == 0


def test_under_fusion_the_second_pick_is_the_next_ranked_memory_not_a_barely_related_one():
    """Two memories fit. Fused ranks 1 and 2 share 60 % of their dimensions (two chunks of one page);
    rank 30 is unrelated. On 1 / (60 + rank) the third won (its novelty outweighed a nearly flat score); on
    the pool's own scale the second does, as it would in an HDC-only search."""
    rng = np.random.default_rng(5)
    first = ternary(rng, 1, 0.3)[0]
    second = first.copy()
    moved = int(np.count_nonzero(first) * 0.4)  # 60 % of its dimensions are the first's
    second[np.flatnonzero(first)[:moved]] = 0
    second[np.flatnonzero(first == 0)[:moved]] = 1
    third = ternary(rng, 1, 0.3)[0]
    pos, neg = pack_ternary(np.stack([first, second, third]))
    kept = [Candidate(0, row, score, fused=1 / (60 + rank)) for row, score, rank in
            ((0, 1000, 1), (1, 950, 2), (2, 300, 30))]
    tokens = np.array([256, 256, 256])
    flat = np.array([c.fused for c in kept])
    assert hdc_mmr(pos, neg, flat, tokens, DIMS, 512, 0) == [0, 2]  # what the search did before
    assert hdc_mmr(pos, neg, mmr_scores(kept, fused=True), tokens, DIMS, 512, 0) == [0, 1]


def test_filter_applies_before_pruning(tmp_path):
    rng = np.random.default_rng(9)
    query = ternary(rng, 1, 0.4)[0]
    rows = ternary(rng, 40, 0.3)
    rows[:30] = query          # 30 perfect matches in source 1
    rows[30:33, : DIMS // 2] = query[: DIMS // 2]  # weaker matches in source 2
    sources = np.array([1] * 30 + [2] * 10)
    corpus = make_corpus(tmp_path, "f", rows, sources)
    store = DictStore([f"text {i} {i}x" for i in range(40)])
    retriever = Retriever(WordTokenizer(), Config(min_context=0), candidates=20)
    target = SearchTarget(corpus, store, "f", enabled_sources=frozenset({2}))
    picked = {r.memory.hdv_idx for r in retriever.search_vectors([packed(query)], [target])}
    assert picked and picked <= set(range(30, 40)) and {30, 31, 32} <= picked


def two_corpora(tmp_path, seed: int, a_dims: int, b_dims: int, a_texts: list[str] | None = None):  # noqa: ANN201
    """A query and two corpora of 50 random rows: a's row 7 agrees with the query on `a_dims` of its
    nonzero dimensions, b's row 3 on `b_dims` others."""
    rng = np.random.default_rng(seed)
    query = ternary(rng, 1, 0.4)[0]
    a_rows, b_rows = ternary(rng, 50, 0.3), ternary(rng, 50, 0.3)
    support = np.flatnonzero(query)
    a_rows[7] = b_rows[3] = 0
    a_rows[7, support[:a_dims]] = query[support[:a_dims]]
    b_rows[3, support[100:100 + b_dims]] = query[support[100:100 + b_dims]]
    a = make_corpus(tmp_path, "a", a_rows)
    b = make_corpus(tmp_path, "b", b_rows)
    return query, [SearchTarget(a, DictStore(a_texts or [f"a{i} text" for i in range(50)]), "a"),
                   SearchTarget(b, DictStore([f"b{i} words" for i in range(50)]), "b")]


def test_several_corpora_merge_and_require_equal_dims(tmp_path):
    query, targets = two_corpora(tmp_path, 5, 100, 90)
    a = targets[0].corpus
    results = Retriever(WordTokenizer(), Config(min_context=0)).search_vectors([packed(query)] * 2, targets)
    assert [(r.target, r.memory.hdv_idx) for r in results[:2]] == [("a", 7), ("b", 3)]
    odd = LoadedIndex(encoder=make_encoder(tmp_path, dims=256, name="odd.vocab"), index=a.index)
    with pytest.raises(ValueError, match="dimensions"):
        Retriever(WordTokenizer(), Config()).search("q", [targets[0], SearchTarget(odd, targets[0].store)])


class FixedScorer:
    """A late-interaction channel with set scores per row (nan elsewhere), recording what it was asked."""

    name, file, gate = LATE_INTERACTION, LateInteractionChannel.file, LateInteractionChannel.gate

    def __init__(self, scores: dict[int, float], text_score: float = np.nan, unavailable: bool = False):
        self.scores, self.text_score, self.unavailable = scores, text_score, unavailable
        self.asked: list[tuple[str, list[int]]] = []

    def score_rows(self, query: str, rows: np.ndarray) -> np.ndarray:
        if self.unavailable:
            raise ChannelUnavailable("down")
        self.asked.append((query, [int(r) for r in rows]))
        return np.array([self.scores.get(int(r), np.nan) for r in rows])

    def score_texts(self, query: str, texts: list[str]) -> np.ndarray:
        return np.full(len(texts), self.text_score)

    def query(self, query: str) -> LateInteractionQuery:
        return LateInteractionQuery(self, query)


def late_channel(scorer: object, rule: str | None = None) -> dict:
    """SearchTarget keyword arguments for a late-interaction channel under `rule` (None: unmeasured)."""
    return {"channels": {LATE_INTERACTION: scorer},
            "rules": {LATE_INTERACTION: FusionChoice(rule)} if rule is not None else {}}


def word_channel(index: object, rule: str | None = None) -> dict:
    """SearchTarget keyword arguments for a word channel under `rule` (None: unmeasured)."""
    return {"channels": {WORDS: index}, "rules": {WORDS: FusionChoice(rule)} if rule is not None else {}}


def test_fusion_reorders_hdc_candidates_and_keeps_hdc_only_searches_unchanged(tmp_path):
    retriever, targets, q, rows, query = constructed_case(tmp_path, min_context=3)
    scores = rows @ query.astype(np.int64)
    plain = retriever.search_vectors([q], targets)
    assert all(r.late_score is None and r.fused_score is None for r in plain)
    # Late scores: row 4 best, then rows 0-2, the noise rows 0; row 3 not scored. Rule "late".
    scorer = FixedScorer({4: 9.0, 0: 1.0, 1: 1.0, 2: 1.0} | {r: 0.0 for r in range(5, 305)})
    off = SearchTarget(targets[0].corpus, targets[0].store, "case", **late_channel(scorer, "hdc"))
    assert retriever.search_vectors([q], [off], query="q") == plain and scorer.asked == []
    targets = [SearchTarget(targets[0].corpus, targets[0].store, "case", **late_channel(scorer, "late"))]
    fused = retriever.search_vectors([q], targets, query="q")
    # Only HDC's top FUSION_DEPTH candidates are re-scored: the late scorer adds no rows.
    hdc_order = [int(r) for r in np.lexsort((np.arange(len(scores)), -scores))]
    assert scorer.asked[0] == ("q", hdc_order[:min(FUSION_DEPTH, retriever.candidates)])
    by_row = {r.memory.hdv_idx: r for r in fused}
    assert [r.memory.hdv_idx for r in fused][:2] == [4, 0]  # late order; 1 and 2 deduplicated
    assert by_row[4].late_score == 9.0 and by_row[0].late_score == 1.0
    # The fused score is the rank in the target's fused order: 1 / (60 + rank).
    assert by_row[4].fused_score == pytest.approx(1 / 61) and by_row[0].fused_score == pytest.approx(1 / 62)
    assert 3 not in [r.memory.hdv_idx for r in fused[:2]]  # unscored: after every scored candidate
    # The dataset filter holds before any scoring.
    filtered = SearchTarget(targets[0].corpus, targets[0].store, "case", enabled_sources=frozenset({1}),
                            **late_channel(scorer, "late"))
    assert retriever.search_vectors([q], [filtered], query="q") == []
    # Through `search`, the target's own scorer is asked with the query text.
    retriever.query_vector = lambda corpus, query, blend=None: q
    target = SearchTarget(targets[0].corpus, targets[0].store, "case", **late_channel(scorer, "late"))
    assert [r.memory.hdv_idx for r in retriever.search("the question", [target])] == \
        [r.memory.hdv_idx for r in fused]
    assert scorer.asked[-1][0] == "the question"


def test_the_word_channel_adds_its_best_rows_to_the_fusion_within_the_dataset_filter(tmp_path):
    retriever, targets, q, rows, query = constructed_case(tmp_path, min_context=3)
    retriever.query_vector = lambda corpus, query, blend=None: q
    scores = rows @ query.astype(np.int64)
    hdc_order = np.lexsort((np.arange(len(scores)), -scores))
    outside = int(hdc_order[-1])  # HDC's last row: far from its 100 candidates
    word = targets[0].store.texts[outside].split()[-1]  # "w<i>": that row's own word
    index = WordIndex.build(targets[0].store.texts)
    hdc_alone = SearchTarget(targets[0].corpus, targets[0].store, "case", **word_channel(index, "hdc"))
    assert outside not in {r.memory.hdv_idx for r in retriever.search(word, [hdc_alone])}
    assert outside not in retriever.rank_rows(word, hdc_alone)
    fused = SearchTarget(targets[0].corpus, targets[0].store, "case", **word_channel(index, "late"))
    found = retriever.search(word, [fused])
    assert found[0].memory.hdv_idx == outside
    assert found[0].hdc_score == float(scores[outside]) and found[0].late_score > 0  # its exact HDC score
    assert retriever.rank_rows(word, fused)[0] == outside
    assert len(set(retriever.rank_rows(word, fused).tolist())) == retriever.candidates + 1  # no row twice
    # A row of a dataset the search leaves out is not added by the word channel either.
    sources = np.zeros(len(rows), np.int32)
    sources[outside] = 1
    corpus = make_corpus(tmp_path, "filtered", rows, source_ids=sources)
    filtered = SearchTarget(corpus, targets[0].store, "case", enabled_sources=frozenset({0}),
                            **word_channel(index, "late"))
    assert outside not in {r.memory.hdv_idx for r in retriever.search(word, [filtered])}
    assert outside not in retriever.rank_rows(word, filtered)


def test_the_gate_gathers_its_evidence_over_the_pool_a_search_fuses(tmp_path):
    retriever, targets, q, rows, query = constructed_case(tmp_path, min_context=3)
    retriever.query_vector = lambda corpus, query, blend=None: q
    scores = rows @ query.astype(np.int64)
    outside = int(np.lexsort((np.arange(len(scores)), -scores))[-1])
    retriever.encode_text = lambda corpus, text: (*packed(rows[outside]), 1)  # the rest: the row's own vector
    word = targets[0].store.texts[outside].split()[-1]
    index = WordIndex.build(targets[0].store.texts)
    target = SearchTarget(targets[0].corpus, targets[0].store, "case", **word_channel(index))
    held_out = SelfQuery(index=0, kind="heldout", query=word, rest=f"noise {word}")
    found, hdc, scored = _evidence_pool(retriever, target, index, held_out, outside, *q, depth=20)
    assert outside not in found[:20] and outside in found  # not HDC's: the word channel's own row
    at = int(np.flatnonzero(found == outside)[0])
    # A held-out memory competes as the rest of its text, on both sides.
    assert hdc[at] == float(scores[outside]) and scored[at] == index.score_texts(word, [f"noise {word}"])[0]
    assert len(set(found.tolist())) == found.size <= 20 + WORD_CANDIDATES


def test_the_fusion_rule_decides_whether_and_how_the_late_scorer_counts(tmp_path):
    retriever, targets, q, rows, query = constructed_case(tmp_path, min_context=3)
    retriever.query_vector = lambda corpus, query, blend=None: q
    plain = retriever.search("the question", targets)
    scorer = FixedScorer({300: 9.0, 4: 8.0})
    off = SearchTarget(targets[0].corpus, targets[0].store, "case", **late_channel(scorer, "hdc"))
    assert retriever.search("the question", [off]) == plain and scorer.asked == []  # HDC alone, not asked
    alone = SearchTarget(targets[0].corpus, targets[0].store, "case", **late_channel(scorer, "late"))
    ranked = [r.memory.hdv_idx for r in retriever.search("the question", [alone])]
    assert ranked[0] == 4 and len(scorer.asked) == 1  # row 300 is no HDC candidate: never added
    assert 300 not in scorer.asked[0][1]
    down = SearchTarget(targets[0].corpus, targets[0].store, "case",
                        **late_channel(FixedScorer({}, unavailable=True), "late"))
    assert [r.memory.hdv_idx for r in retriever.search("the question", [down])] == \
        [r.memory.hdv_idx for r in plain]  # an unavailable scorer: HDC order


def _random_word_corpus(tmp_path, topics: bool = False) -> tuple[LoadedIndex, Retriever, list[str]]:
    """60 texts of 30 random words each, indexed: (corpus, retriever, texts). `topics`: each text's
    words drawn from five of its own, so any part of it shares its words with the rest."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    encoder = make_encoder(tmp_path, dims=512)
    rng = np.random.default_rng(0)
    texts = [
        " ".join(
            f"w{int(t)}" for t in (rng.integers(0, 5, 30) + 5 * i if topics else rng.integers(3, 300, 30))
        )
        for i in range(60)
    ]
    tokenizer = WordTokenizer()
    pos, neg = encoder.encode([tokenizer.tokenize(text) for text in texts])
    index = BitmapIndex.create(tmp_path / "e.idx", encoder.dims)
    index.append(pos, neg, token_counts=[30] * 60, source_ids=[1] * 60)
    index.finalize()
    corpus = LoadedIndex(encoder=encoder, index=BitmapIndex.open(tmp_path / "e.idx"))
    retriever = Retriever(tokenizer, Config())
    return corpus, retriever, texts


def test_fusion_evidence_moves_off_hdc_only_for_a_scorer_that_finds_held_out_texts(tmp_path):
    corpus, retriever, texts = _random_word_corpus(tmp_path)
    useless = SearchTarget(corpus, DictStore(texts), "e",
                           **late_channel(FixedScorer({r: 1.0 for r in range(60)}, 0.0)))
    choice = channel_evidence(retriever=retriever, target=useless, channel=LATE_INTERACTION, samples=20)
    assert (
        choice.rule == "hdc" and choice.evidence["queries"] == 60
    )  # a lead, a span, a held-out sentence each
    assert set(choice.evidence["mrr_by_kind"]) == {"lead", "span", "heldout"}
    assert choice.evidence["mrr"]["late"] < choice.evidence["mrr"]["hdc"]
    # A scorer that rates each held-out text above every row finds every target: significant.
    oracle = SearchTarget(corpus, DictStore(texts), "e",
                          **late_channel(FixedScorer({r: 0.0 for r in range(60)}, 1.0)))
    choice = channel_evidence(retriever=retriever, target=oracle, channel=LATE_INTERACTION, samples=20)
    assert choice.rule != "hdc" and choice.evidence["mrr_by_kind"]["heldout"]["late"] == 1.0
    with pytest.raises(ValueError, match="late_interaction channel needs a target that has it"):
        channel_evidence(retriever=retriever, target=SearchTarget(corpus, DictStore(texts), "e"),
                         channel=LATE_INTERACTION)
    down = SearchTarget(corpus, DictStore(texts), "e", **late_channel(FixedScorer({}, unavailable=True)))
    with pytest.raises(ValueError, match="cannot answer now"):
        channel_evidence(retriever=retriever, target=down, channel=LATE_INTERACTION, samples=20)


class FixedWordChannel(FixedScorer):
    """`FixedScorer` shaped as the exact-word channel: it scores every row at once."""

    name, file, gate = WORDS, WordIndex.file, WordIndex.gate

    def score_all(self, query: str) -> np.ndarray:
        return np.array([self.scores.get(row, 0.0) for row in range(max(self.scores) + 1)])

    def query(self, query: str) -> WordQuery:
        return WordQuery(self, query)


def test_a_word_channel_without_significant_evidence_is_fused_at_equal_weight(tmp_path):
    corpus, retriever, texts = _random_word_corpus(tmp_path)
    # Every row and held-out text scored alike: no evidence either way. A late-interaction scorer
    # is then left out; a word channel keeps the gate's fallback, equal weight.
    flat = {r: 1.0 for r in range(60)}
    late = SearchTarget(corpus, DictStore(texts), "e", **late_channel(FixedScorer(flat, 1.0)))
    by_late = channel_evidence(retriever=retriever, target=late, channel=LATE_INTERACTION, samples=20)
    words = SearchTarget(corpus, DictStore(texts), "e", **word_channel(FixedWordChannel(flat, 1.0)))
    by_words = channel_evidence(retriever=retriever, target=words, channel=WORDS, samples=20)
    assert by_late.rule == "hdc" and by_words.rule == WORD_FALLBACK == "z:1"
    assert by_words.evidence["mrr"]["z:1"] == by_words.evidence["mrr"]["hdc"]  # flat scores change no ranking


@pytest.mark.parametrize(("query", "terms"), [
    ("What is a blitter?", "blitter"),
    ("Tell me about the French Revolution", "French Revolution"),
    ("how does yield resume a generator", "yield resume generator"),
    ("What is it?", "it"),
    ("What is?", "What is?"),  # nothing but the template: the query as it is
])
def test_query_terms_drop_the_question_template(query, terms):
    assert query_terms(query) == terms


def test_query_vector_encodes_the_query_without_its_template(tmp_path):
    encoder = make_encoder(tmp_path, dims=512)
    corpus = LoadedIndex(encoder=encoder, index=None)
    retriever = Retriever(WordTokenizer(), Config())
    q_pos, q_neg = retriever.query_vector(corpus, "What is alpha beta?")
    pos, neg, _ = retriever.encode_text(corpus, "alpha beta")
    np.testing.assert_array_equal(q_pos, pos)
    np.testing.assert_array_equal(q_neg, neg)
    assert not np.array_equal(q_pos, retriever.encode_text(corpus, "What is alpha beta?")[0])


def test_targets_are_merged_by_score_per_unit_of_query_length():
    from engine.ranking import Candidate, merge_targets, query_length

    # Target 1's query is four times as long in its corpus: its raw scores are higher for the same
    # match, and per unit of length the best of target 0 comes first.
    short = [Candidate(0, row, score) for row, score in enumerate([400, 200, 100])]
    long = [Candidate(1, row, score) for row, score in enumerate([1000, 900, 800])]
    merged = merge_targets({0: short, 1: long}, {0: 10.0, 1: 40.0})
    assert [(c.target, c.row) for c in merged] == [(0, 0), (1, 0), (1, 1), (0, 1), (1, 2), (0, 2)]
    assert [c.merge for c in merged] == [40.0, 25.0, 22.5, 20.0, 20.0, 10.0]
    assert [c.fused for c in merged] == sorted((c.fused for c in merged), reverse=True)
    q_pos = np.array([0b1011], dtype=np.uint64)
    assert query_length(q_pos, np.array([0b0100], dtype=np.uint64)) == 2.0
    assert query_length(np.zeros(1, np.uint64), np.zeros(1, np.uint64)) == 1.0


def test_a_target_that_holds_the_query_words_outranks_one_that_only_resembles_it():
    from engine.ranking import Candidate, merge_targets, word_coverage

    # Per unit of length target 1 leads (25 against 20); target 0's first candidates hold every word
    # of the query and target 1's one word in four: 20 * 2 = 40 against 25 * 1.25 = 31.25.
    assert word_coverage("cure period of the licence", ["the cure of the licence", "a licence"]) == 2 / 3
    assert word_coverage("the of", ["anything"]) == 0.0  # stop words only: nothing to cover
    mine = [Candidate(0, row, score) for row, score in enumerate([200, 100])]
    other = [Candidate(1, row, score) for row, score in enumerate([1000, 900])]
    merged = merge_targets({0: mine, 1: other}, {0: 10.0, 1: 40.0}, {0: 1.0, 1: 0.25})
    assert [(c.target, c.row) for c in merged] == [(0, 0), (1, 0), (1, 1), (0, 1)]
    assert [c.merge for c in merged] == [40.0, 31.25, 28.125, 20.0]
    # Without coverage, the order is by score per length alone.
    plain = merge_targets({0: mine, 1: other}, {0: 10.0, 1: 40.0})
    assert [(c.target, c.row) for c in plain] == [(1, 0), (1, 1), (0, 0), (0, 1)]


def test_a_search_of_several_corpora_weighs_each_by_the_query_words_its_memories_hold(tmp_path):
    a_texts = [f"a{i} text" for i in range(50)]
    a_texts[7] = "the quokka lives on rottnest island"
    # a's best matches the query less well in HDC than b's, but holds the query's words.
    query, targets = two_corpora(tmp_path, 6, 100, 115, a_texts)
    retriever = Retriever(WordTokenizer(), Config(min_context=0))
    plain = retriever.search_vectors([packed(query)] * 2, targets)
    assert [(r.target, r.memory.hdv_idx) for r in plain[:2]] == [("b", 3), ("a", 7)]
    for target in targets:
        target.store.calls.clear()
    weighed = retriever.search_vectors([packed(query)] * 2, targets, query="Where does the quokka live?")
    assert [(r.target, r.memory.hdv_idx) for r in weighed[:2]] == [("a", 7), ("b", 3)]
    # The memories the coverage read are not read from the store again.
    for target in targets:
        asked = [row for call in target.store.calls for row in call]
        assert asked and len(asked) == len(set(asked)), target.store.calls


def test_a_fused_target_keeps_its_fused_order_when_merged():
    from engine.ranking import Candidate, merge_targets

    fused_order = [Candidate(0, row, score) for row, score in ((3, 500), (0, 700), (1, 650), (2, 600))]
    other = [Candidate(1, row, score) for row, score in enumerate([400, 390, 380])]
    merged = merge_targets({0: fused_order, 1: other}, {0: 1.0, 1: 1.0})
    assert [c.row for c in merged if c.target == 0] == [3, 0, 1, 2]
    # Its first place takes the key of its best HDC score, whichever candidate holds it.
    assert fused_order[0].merge == 700.0
