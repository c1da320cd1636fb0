"""text_store: a real build on the real Gemma model filled into a real embedded Chroma store,
scored by late interaction from the kept token vectors; replacement by a later build, deletion, cancel and bad
input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.build import BuildCancelled, build_index
from engine.config import Config
from engine.loaded_build import LoadedIndex, load_corpus
from engine.multivector import ChromaClient
from engine.multivector.late_interaction import maxsim_many
from engine.multivector.token_vectors import TokenVectorEncoder
from engine.text_store import (
    LATE_FILE,
    PHASE,
    LateInteractionChannel,
    TextStoreError,
    text_doc_id,
    text_encoder_for,
    text_store_delete_build,
    text_store_delete_source,
    text_store_fill,
    text_store_prune,
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
    build_index(
        datasets=datasets,
        out_dir=work / "out",
        gguf_path=gemma_gguf,
        tokenizer=tokenizer,
        config=CONFIG,
        cache_dir=embedding_cache,
    )
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
    return {memory.text: row for row, memory in memories.items()}


def test_fill_writes_one_record_per_row_with_its_row_key(store, corpus, encoder, tokenizer):
    calls = []
    result = text_store_fill(store=store, corpus=corpus, encoder=encoder, tokenizer=tokenizer, build_id=7,
                             progress=lambda *call: calls.append(call), batch_rows=3)
    rows = rows_of(corpus)
    special_row = rows["<start_of_turn>"]
    assert (
        corpus.count == 8 and result.records == 8
    )  # a literal "<start_of_turn>" is text, not a control token
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


@pytest.fixture(scope="module")
def scorer(filled, corpus, encoder, tokenizer) -> LateInteractionChannel:
    return LateInteractionChannel.for_build(corpus, encoder=encoder, tokenizer=tokenizer)


@pytest.mark.parametrize("query, expected", [
    ("fox dog river", FIRST[0]),
    ("light energy glucose", FIRST[1]),
    ("binary search interval", FIRST[2]),
    ("Bastille revolution", FIRST[3]),
    ("Mitochondria ATP", FIRST[4]),
    ("moon tides oceans", SECOND[0]),
    ("magma volcanoes", SECOND[1]),
])
def test_a_query_scores_the_row_with_its_words_highest(scorer, corpus, query, expected):
    scores = scorer.score_rows(query, np.arange(corpus.count))
    assert scores.shape == (corpus.count,) and np.isfinite(scores).all()
    assert int(np.argmax(scores)) == rows_of(corpus)[expected]


def test_scores_are_the_store_sequences_maxsim(scorer, filled, corpus, encoder, tokenizer):
    """The kept token vectors give what MaxSim over the stored sequences gives (float16 rounding)."""
    query = "revolution energy of the cell"
    query_rows = encoder.encode(tokenizer.tokenize(query))
    texts = corpus.store.get_memories(list(range(corpus.count)))
    expected = maxsim_many(query_rows, [encoder.encode(tokenizer.tokenize(texts[row].text))
                                        for row in range(corpus.count)])
    rows = np.array([7, 0, 3, 3, -1, 99])
    scores = scorer.score_rows(query, rows)
    np.testing.assert_allclose(scores[:4], expected[[7, 0, 3, 3]], rtol=2e-3)
    assert np.isnan(scores[4:]).all()  # not rows of this build
    assert np.isnan(scorer.score_rows("", rows)).all()  # no content token in the query
    hits = filled.search_text_multivector(query_rows, n_candidates=corpus.count, n_results=corpus.count,
                                          filters={"index_build": "b1"})
    by_row = {int(hit["metadata"]["row"]): hit["late_interaction_score"] for hit in hits}
    assert by_row[0] == pytest.approx(float(scores[1]), rel=2e-3)
    texts_scores = scorer.score_texts(query, [texts[3].text, ""])
    assert texts_scores[0] == pytest.approx(float(expected[3]), rel=1e-5) and np.isnan(texts_scores[1])


def test_a_build_without_kept_vectors_has_no_scorer(tmp_path, corpus, encoder, tokenizer):
    bare = LoadedIndex(
        encoder=corpus.encoder, index=corpus.index, manifest=corpus.manifest, build_dir=tmp_path
    )
    assert LateInteractionChannel.for_build(bare, encoder=encoder, tokenizer=tokenizer) is None
    other = TokenVectorEncoder(encoder.embeddings, dim=64)
    with pytest.raises(TextStoreError, match="written by encoder"):
        LateInteractionChannel(Path(corpus.build_dir) / LATE_FILE, encoder=other, tokenizer=tokenizer)


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
        text_store_fill(
            store=store, corpus=corpus, encoder=encoder, tokenizer=tokenizer, build_id="1-chunk0001"
        )
    narrow = ChromaClient(
        path=tmp_path / "narrow", visual_collection="c3_visual", text_collection="c3_text", dim=64
    )
    with pytest.raises(TextStoreError, match="encoder dim 768 differs from the store's 64"):
        text_store_fill(store=narrow, corpus=corpus, encoder=encoder, tokenizer=tokenizer, build_id=1)
    assert store.get_collection_stats()["text_count"] == 0
