"""text_store: a real build on the real Gemma model filled into a real embedded Chroma store,
searched by late interaction; replacement by a later build, deletion, cancel and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.build import BuildCancelled, build_index
from engine.config import Config
from engine.fusion import reciprocal_rank_fusion
from engine.loaded_build import load_corpus
from engine.multivector import ChromaClient
from engine.text_store import (
    PHASE,
    TextStoreError,
    text_doc_id,
    text_encoder_for,
    text_store_delete_build,
    text_store_delete_source,
    text_store_fill,
    text_store_prune,
    text_store_rank,
)

CONFIG = Config(hdc_dimensions=256, hdc_ngram=3)
FIRST = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "A binary search halves the remaining interval at every comparison step.",
    "The French revolution began in 1789 with the storming of the Bastille.",
    "Mitochondria are the membrane-bound organelles that produce most of the cell's ATP.",
]
SECOND = [
    "Tides follow the moon because of its gravitational pull on the oceans.",
    "Volcanoes erupt when magma rises through cracks in the earth's crust.",
    "<start_of_turn>",
]


def write_jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, gemma_gguf, tokenizer, embedding_cache):
    work = tmp_path_factory.mktemp("text-store-build")
    datasets = [(4, "first", write_jsonl(work / "first.jsonl", FIRST)),
                (9, "second", write_jsonl(work / "second.jsonl", SECOND))]
    build_index(datasets=datasets, out_dir=work / "out", gguf_path=gemma_gguf, tokenizer=tokenizer, config=CONFIG,
                cache_dir=embedding_cache)
    return load_corpus(work / "out")


@pytest.fixture(scope="module")
def encoder(corpus, gemma_gguf, tokenizer, embedding_cache):
    return text_encoder_for(corpus, gguf_path=gemma_gguf, tokenizer=tokenizer, cache_dir=embedding_cache)


@pytest.fixture
def store(tmp_path) -> ChromaClient:
    return ChromaClient(path=tmp_path / "chroma", visual_collection="c1_visual", text_collection="c1_text")


@pytest.fixture(scope="module")
def filled(tmp_path_factory, corpus, encoder, tokenizer) -> ChromaClient:
    store = ChromaClient(path=tmp_path_factory.mktemp("filled") / "chroma", visual_collection="c2_visual",
                         text_collection="c2_text")
    text_store_fill(store=store, corpus=corpus, encoder=encoder, tokenizer=tokenizer, build_id="b1")
    return store


def rows_of(corpus) -> dict[str, int]:
    memories = corpus.store.get_memories(list(range(corpus.count)))
    return {memory["text"]: row for row, memory in memories.items()}


def test_fill_writes_one_record_per_row_with_its_row_key(store, corpus, encoder, tokenizer):
    calls = []
    result = text_store_fill(store=store, corpus=corpus, encoder=encoder, tokenizer=tokenizer, build_id=7,
                             progress=lambda *call: calls.append(call), batch_rows=3)
    rows = rows_of(corpus)
    special_row = rows["<start_of_turn>"]
    assert corpus.count == 8 and result.records == 8  # a literal "<start_of_turn>" is text, not a control token
    assert result.skipped_rows == [] and special_row == 7
    assert result.doc_ids == [text_doc_id(7, 4), text_doc_id(7, 9)] == ["build7-source4", "build7-source9"]
    assert calls[0] == (PHASE, 0, 8) and calls[-1] == (PHASE, 8, 8) and len(calls) == 4
    records = store.get_document_records("build7-source4", "text")
    assert [r["id"] for r in records] == [f"build7-source4-chunk{n:04d}" for n in range(5)]
    for record, text in zip(records, FIRST, strict=True):
        metadata = record["metadata"]
        assert metadata["row"] == rows[text] and metadata["text_preview"] == text[:200]
        assert (metadata["index_build"], metadata["source_id"], metadata["filename"]) == ("7", 4, "first")
        assert metadata["vector_encoder"] == encoder.signature
        stored = store.get_full_embeddings(record["id"], "text")
        np.testing.assert_allclose(stored, encoder.encode(tokenizer.tokenize(text)), rtol=1e-6)
    assert store.get_collection_stats()["text_count"] == 8


@pytest.mark.parametrize("query, expected", [
    ("fox dog river", FIRST[0]),
    ("light energy glucose", FIRST[1]),
    ("binary search interval", FIRST[2]),
    ("Bastille revolution", FIRST[3]),
    ("Mitochondria ATP", FIRST[4]),
    ("moon tides oceans", SECOND[0]),
    ("magma volcanoes", SECOND[1]),
])
def test_a_query_finds_the_chunk_with_its_words_first(filled, corpus, encoder, tokenizer, query, expected):
    ranking = text_store_rank(store=filled, encoder=encoder, tokenizer=tokenizer, query=query, build_id="b1")
    assert len(ranking) == corpus.count
    assert ranking[0][0] == rows_of(corpus)[expected]
    scores = [score for _, score in ranking]
    assert scores == sorted(scores, reverse=True)


def test_rank_respects_build_and_allowed_sources(store, corpus, encoder, tokenizer):
    text_store_fill(store=store, corpus=corpus, encoder=encoder, tokenizer=tokenizer, build_id=1)
    rows = rows_of(corpus)

    def rank(**options):
        return text_store_rank(store=store, encoder=encoder, tokenizer=tokenizer, query="moon tides", **options)

    assert rank(build_id=1)[0][0] == rows[SECOND[0]]
    only_first = rank(build_id=1, allowed_sources=[4])
    assert len(only_first) == 5 and {row for row, _ in only_first} == {rows[t] for t in FIRST}
    assert rank(build_id=1, allowed_sources=[]) == []
    assert rank(build_id=2) == []  # another build's records are invisible
    assert text_store_rank(store=store, encoder=encoder, tokenizer=tokenizer, query="", build_id=1) == []


def test_rankings_fuse_with_hdc_rows(store, corpus, encoder, tokenizer):
    text_store_fill(store=store, corpus=corpus, encoder=encoder, tokenizer=tokenizer, build_id=1)
    late = text_store_rank(store=store, encoder=encoder, tokenizer=tokenizer, query="French revolution 1789",
                           build_id=1)
    hdc_rows = [rows_of(corpus)[FIRST[3]], 0, 1]
    fused = reciprocal_rank_fusion([hdc_rows, [row for row, _ in late]])
    assert fused[0][0] == rows_of(corpus)[FIRST[3]]


def test_a_later_build_replaces_the_previous_one(store, corpus, encoder, tokenizer):
    text_store_fill(store=store, corpus=corpus, encoder=encoder, tokenizer=tokenizer, build_id=1)
    store.add_text_embedding("upload", 0, encoder.encode(tokenizer.tokenize("kept apart")),
                             {"filename": "api.txt", "source_path": "", "text": "kept apart"})
    text_store_fill(store=store, corpus=corpus, encoder=encoder, tokenizer=tokenizer, build_id=2)
    assert store.get_collection_stats()["text_count"] == 17  # old build still serving while the new one fills
    assert text_store_prune(store=store, keep_build_ids=[2]) == 8
    assert store.get_document_records("build1-source4", "text") == []
    assert len(store.get_document_records("build2-source4", "text")) == 5
    assert len(store.get_document_records("upload", "text")) == 1  # not ours: never pruned
    assert text_store_delete_source(store=store, source_id=9) == 3
    assert text_store_delete_build(store=store, build_id=2) == 5
    assert store.get_collection_stats()["text_count"] == 1


def test_refilling_the_same_build_is_idempotent(store, corpus, encoder, tokenizer):
    for _ in range(2):
        text_store_fill(store=store, corpus=corpus, encoder=encoder, tokenizer=tokenizer, build_id=3)
    assert store.get_collection_stats()["text_count"] == 8


def test_cancel_removes_the_partial_records_and_keeps_the_serving_build(store, corpus, encoder, tokenizer):
    text_store_fill(store=store, corpus=corpus, encoder=encoder, tokenizer=tokenizer, build_id=1)
    polls = []

    def should_cancel():
        polls.append(1)
        return len(polls) > 1  # after the first batch is written

    with pytest.raises(BuildCancelled):
        text_store_fill(store=store, corpus=corpus, encoder=encoder, tokenizer=tokenizer, build_id=2,
                        should_cancel=should_cancel, batch_rows=3)
    assert store.get_document_records("build2-source4", "text") == []
    assert store.get_collection_stats()["text_count"] == 8


class _MissingRows:
    """A memory store that lost rows: cannot be produced through the build itself."""

    def __init__(self, inner, lost):
        self.inner, self.lost = inner, set(lost)

    def get_memories(self, rows):
        return {row: memory for row, memory in self.inner.get_memories(rows).items() if row not in self.lost}


def test_missing_memory_rows_fail_clearly_and_leave_nothing(store, corpus, encoder, tokenizer):
    with pytest.raises(TextStoreError, match=r"lacks rows \[5\]"):
        text_store_fill(store=store, corpus=corpus, encoder=encoder, tokenizer=tokenizer, build_id=4,
                        memories=_MissingRows(corpus.store, [5]), batch_rows=3)
    assert store.get_collection_stats()["text_count"] == 0


def test_bad_arguments_are_refused(tmp_path, store, corpus, encoder, tokenizer):
    with pytest.raises(TextStoreError, match="build_id must be"):
        text_store_fill(store=store, corpus=corpus, encoder=encoder, tokenizer=tokenizer, build_id="1-chunk0001")
    narrow = ChromaClient(path=tmp_path / "narrow", visual_collection="c3_visual", text_collection="c3_text", dim=64)
    with pytest.raises(TextStoreError, match="encoder dim 768 differs from the store's 64"):
        text_store_fill(store=narrow, corpus=corpus, encoder=encoder, tokenizer=tokenizer, build_id=1)
    assert store.get_collection_stats()["text_count"] == 0
