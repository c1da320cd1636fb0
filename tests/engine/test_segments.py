"""Append segments (engine.segments) on the real Gemma model and tokenizer, at small dims: frozen
statistics, rows numbered across the state, a state searched as one index, BM25 over segments."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.build import BuildCancelled, build_index
from engine.config import Config
from engine.encoder import HDCEncoder, flatten
from engine.index import BitmapIndex
from engine.lexical import WordIndex
from engine.loaded_build import CorpusError, MemoryRecord, load_corpus
from engine.retrieval import Retriever, SearchTarget
from engine.segments import SegmentedWordIndex, append_segment, load_state, state_word_index
from engine.vocab import VocabIndex

CONFIG = Config(hdc_dimensions=512, hdc_ngram=3, min_context=1)
BASE = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "A binary search halves the remaining interval at every comparison step.",
    "The French revolution began in 1789 with the storming of the Bastille.",
    "Mitochondria are the membrane-bound organelles that produce most of the cell's ATP.",
    "Tides follow the moon because of its gravitational pull on the oceans.",
]
FIRST_APPEND = [
    "Quokkas are small marsupials found on Rottnest Island off Western Australia.",
    "The binary search tree keeps its keys in order for fast lookups.",
]
SECOND_APPEND = [
    "Zymurgy is the branch of chemistry that studies fermentation in brewing.",
    "The storming of the Bastille is remembered every year on the fourteenth of July.",
]


def write_jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return path


class Records:
    """A sink and a MemoryStore at once: what the portal's memory rows are, in a dict."""

    def __init__(self) -> None:
        self.rows: dict[int, dict] = {}

    def __call__(self, records: list[dict]) -> None:
        for record in records:
            self.rows[record["hdv_idx"]] = record

    def get_memories(self, rows: list[int]) -> dict[int, MemoryRecord]:
        return {r: MemoryRecord.from_build(self.rows[r]) for r in rows if r in self.rows}


@pytest.fixture(scope="module")
def state(tmp_path_factory, gemma_gguf, tokenizer, embedding_cache):
    root = tmp_path_factory.mktemp("segments")
    records = Records()
    build_index(
        datasets=[(1, "base", write_jsonl(root / "base.jsonl", BASE))],
        out_dir=root / "base",
        gguf_path=gemma_gguf,
        tokenizer=tokenizer,
        config=CONFIG,
        cache_dir=embedding_cache,
        sink=records,
    )
    first = append_segment(
        previous_dir=root / "base",
        datasets=[(2, "first", write_jsonl(root / "a.jsonl", FIRST_APPEND))],
        out_dir=root / "first",
        gguf_path=gemma_gguf,
        tokenizer=tokenizer,
        sink=records,
    )
    second = append_segment(previous_dir=root / "first",
                            datasets=[(3, "second", write_jsonl(root / "b.jsonl", SECOND_APPEND))],
                            out_dir=root / "second", gguf_path=gemma_gguf, tokenizer=tokenizer, sink=records)
    return {"root": root, "records": records, "first": first, "second": second,
            "dirs": [root / "base", root / "first", root / "second"]}


def test_append_keeps_the_base_statistics_frozen(state, tokenizer):
    base = VocabIndex.open(state["root"] / "base" / "vocab.idx")
    newest = VocabIndex.open(state["root"] / "second" / "vocab.idx")
    assert newest.size > base.size  # "Quokkas", "Zymurgy": tokens the base never saw
    assert state["first"].manifest["segment"]["new_tokens"] > 0
    assert 0 < state["first"].manifest["segment"]["oov_share"] < 1
    at = np.searchsorted(np.asarray(newest.token_ids), np.asarray(base.token_ids))
    assert np.array_equal(np.asarray(newest.token_ids)[at], base.token_ids)
    assert np.array_equal(np.asarray(newest.idf)[at], base.idf)
    for key in ("tau", "density", "m_cap", "c_min", "ngram", "seed", "dims"):
        assert newest.header[key] == base.header[key], key
    # Any text of base tokens encodes bit for bit as before: here every base document.
    tokens = [tokenizer.tokenize(text) for text in BASE]
    old = HDCEncoder(base).encode_flat(*flatten(tokens))
    new = HDCEncoder(newest).encode_flat(*flatten(tokens))
    assert np.array_equal(old[0], new[0]) and np.array_equal(old[1], new[1])
    stored = BitmapIndex.open(state["root"] / "base" / "corpus.idx").get_bitmaps(np.arange(len(BASE)))
    assert np.array_equal(stored[0], new[0]) and np.array_equal(stored[1], new[1])


def test_rows_are_numbered_across_the_state(state):
    rows = state["records"].rows
    assert sorted(rows) == list(range(len(BASE) + len(FIRST_APPEND) + len(SECOND_APPEND)))
    assert [rows[r]["text"] for r in range(len(BASE), len(BASE) + 2)] == FIRST_APPEND
    assert state["second"].manifest["segment"]["row_offset"] == len(BASE) + len(FIRST_APPEND)
    loaded = load_state(state["dirs"])
    assert loaded.count == len(rows) and len(loaded.segments) == 3
    assert loaded.source_counts() == {"base": 6, "first": 2, "second": 2}


def test_a_state_searches_as_one_index_of_the_same_rows(state, tmp_path):
    loaded = load_state(state["dirs"])
    whole = BitmapIndex.create(tmp_path / "whole.idx", loaded.dims)
    for segment in loaded.segments:
        pos, neg = segment.index.get_bitmaps(np.arange(segment.count))
        whole.append(pos, neg, token_counts=segment.index.token_counts, source_ids=segment.index.source_ids)
    whole.finalize()
    rng = np.random.default_rng(7)
    for _ in range(20):
        row = int(rng.integers(loaded.count))
        q_pos, q_neg = loaded.index.get_bitmaps([row])
        for k in (1, 3, 10):
            for sources in (None, {1, 3}, {2}):
                expected = whole.search_exact(q_pos[0], q_neg[0], k, allowed_sources=sources)
                for method in ("search", "search_exact", "search_auto"):
                    found = getattr(loaded.index, method)(q_pos[0], q_neg[0], k, allowed_sources=sources)
                    assert np.array_equal(found[0], expected[0]) and np.array_equal(found[1], expected[1]), (
                        method
                    )
    rows = rng.permutation(loaded.count)
    assert all(np.array_equal(a, b) for a, b in zip(loaded.index.get_bitmaps(rows), whole.get_bitmaps(rows),
                                                     strict=True))
    assert np.array_equal(loaded.index.source_ids, whole.source_ids)
    q_pos, q_neg = loaded.index.get_bitmaps([0])
    assert np.array_equal(
        loaded.index.score_rows(rows, q_pos[0], q_neg[0]), whole.score_rows(rows, q_pos[0], q_neg[0])
    )


def test_an_appended_document_is_found_by_a_sentence_of_it(state, tokenizer):
    loaded = load_state(state["dirs"])
    retriever = Retriever(tokenizer, CONFIG)
    target = SearchTarget(corpus=loaded, store=state["records"], name="c")
    for text in FIRST_APPEND + SECOND_APPEND:
        results = retriever.search(text, [target], top_document=True)
        assert results[0].memory.text == text


def test_bm25_over_segments_scores_as_one_word_index(state):
    texts = BASE + FIRST_APPEND + SECOND_APPEND
    whole = WordIndex.build(texts)
    loaded = load_state(state["dirs"])
    together = state_word_index(loaded, lambda segment: WordIndex.for_build(segment.build_dir))
    # The base build wrote no words.npz (the portal writes it): build the base's here.
    assert together is None
    parts = [WordIndex.build(BASE), WordIndex.for_build(state["root"] / "first"),
             WordIndex.for_build(state["root"] / "second")]
    together = SegmentedWordIndex(parts, loaded.index.offsets)
    rows = np.arange(len(texts))
    for query in (
        "binary search",
        "storming of the Bastille",
        "quokkas zymurgy",
        "energy glucose",
        "nothing",
    ):
        np.testing.assert_allclose(
            together.score_rows(query, rows), whole.score_rows(query, rows), rtol=1e-12
        )
        every, alone = together.score_all(query), whole.score_all(query)
        assert (every is None) == (alone is None)
        if alone is not None:
            np.testing.assert_allclose(every, alone, rtol=1e-12)
        np.testing.assert_allclose(together.score_texts(query, ["a binary tree", "the moon"]),
                                   whole.score_texts(query, ["a binary tree", "the moon"]), rtol=1e-12)


def test_a_state_whose_segments_do_not_chain_is_refused(state):
    with pytest.raises(CorpusError, match="starts at row"):
        load_state([state["dirs"][0], state["dirs"][2]])
    assert load_state(state["dirs"][:1]).segments == ()


def test_a_cancelled_append_leaves_no_manifest(state, tmp_path, gemma_gguf, tokenizer):
    out = tmp_path / "cancelled"
    with pytest.raises(BuildCancelled):
        append_segment(previous_dir=state["root"] / "second",
                       datasets=[(4, "more", write_jsonl(tmp_path / "m.jsonl", FIRST_APPEND))], out_dir=out,
                       gguf_path=gemma_gguf, tokenizer=tokenizer, should_cancel=lambda: True)
    assert not (out / "manifest.json").exists()
    with pytest.raises(CorpusError):
        load_corpus(out)


def test_a_sampled_search_over_segments_picks_one_shortlist_as_one_index_would(tmp_path):
    from engine.bits import pack_ternary
    from engine.segments import SegmentedIndex

    rng = np.random.default_rng(3)
    dims, n = 1024, 3000
    ternary = rng.choice(np.array([-1, 0, 1], dtype=np.int8), size=(n, dims), p=[0.25, 0.5, 0.25])
    pos, neg = pack_ternary(ternary)
    whole = BitmapIndex.create(tmp_path / "whole.idx", dims)
    whole.append(pos, neg, token_counts=np.ones(n, np.int32), source_ids=(np.arange(n) % 3).astype(np.int32))
    whole.finalize()
    parts = []
    for number, (lo, hi) in enumerate(((0, 1000), (1000, 2200), (2200, 3000))):
        part = BitmapIndex.create(tmp_path / f"part{number}.idx", dims)
        part.append(pos[lo:hi], neg[lo:hi], token_counts=np.ones(hi - lo, np.int32),
                    source_ids=(np.arange(lo, hi) % 3).astype(np.int32))
        part.finalize()
        parts.append(BitmapIndex.open(part.path))
    state = SegmentedIndex(parts)
    whole = BitmapIndex.open(whole.path)
    for row in rng.choice(n, size=12, replace=False):
        noisy = ternary[row].copy()
        flip = rng.choice(dims, size=60, replace=False)
        noisy[flip] = -noisy[flip]
        q_pos, q_neg = pack_ternary(noisy[None])
        for sources in (None, {0, 2}):
            one = whole.search_sampled(
                q_pos[0], q_neg[0], 10, sample_chunks=2, shortlist=300, allowed_sources=sources
            )
            many = state.search_sampled(q_pos[0], q_neg[0], 10, sample_chunks=2, shortlist=300,
                                        allowed_sources=sources)
            assert np.array_equal(one[0], many[0]) and np.array_equal(one[1], many[1])
            if sources is None:
                assert many[0][0] == row  # the noisy copy's own row comes first
    # Sparse queries: few partial values, many rows tied at the shortlist's cut, which both must
    # break the same way (lower row first) for a short shortlist to hold the same rows.
    for _ in range(12):
        sparse = np.zeros(dims, dtype=np.int8)
        support = rng.choice(dims, size=24, replace=False)
        sparse[support] = rng.choice(np.array([-1, 1], dtype=np.int8), size=24)
        q_pos, q_neg = pack_ternary(sparse[None])
        one = whole.search_sampled(q_pos[0], q_neg[0], 10, sample_chunks=2, shortlist=12)
        many = state.search_sampled(q_pos[0], q_neg[0], 10, sample_chunks=2, shortlist=12)
        assert np.array_equal(one[0], many[0]) and np.array_equal(one[1], many[1])
