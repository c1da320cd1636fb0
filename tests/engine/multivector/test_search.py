"""Stage-1 search, filters and the two-stage MaxSim re-rank, on both backends."""

from __future__ import annotations

import numpy as np
import pytest

from engine.multivector import EmbeddingValidationError, MetadataValidationError
from tests.engine.multivector.data import maxsim_reference, sequence, text_meta, visual_meta

DIM = 64


@pytest.fixture(params=["1.0", "1.1"])
def corpus(request, make_store):
    """24 pages over 3 files and 12 chunks, dim 64.

    Returns (store, {id: full embeddings}, {page id: the filterable fields it was given})."""
    store = make_store(storage_version=request.param, dim=DIM)
    rng = np.random.default_rng(11)
    stored, fields = {}, {}
    for number, filename in enumerate(("a.pdf", "b.pdf", "c.pdf")):
        pages = [sequence(rng, int(rng.integers(1, 40)), DIM) for _ in range(8)]
        ids = store.add_batch_visual(f"doc{number}", list(range(1, 9)), pages, visual_meta(filename))
        stored.update(zip(ids, pages, strict=True))
        for page, embedding_id in enumerate(ids, start=1):
            fields[embedding_id] = {
                "filename": filename,
                "page": page,
                "doc_id": f"doc{number}",
                "type": "visual",
            }
    chunks = [sequence(rng, 16, DIM) for _ in range(12)]
    ids = store.add_batch_text(
        "doc0", list(range(12)), chunks, [text_meta(text=f"chunk {i}") for i in range(12)]
    )
    stored.update(zip(ids, chunks, strict=True))
    return store, stored, fields


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_stage1_scores_are_cosine_sorted_and_querying_a_stored_vector_finds_it(corpus):
    store, stored, fields = corpus
    target = "doc1-page005"
    query = stored[target][0]
    hits = store.search_visual(query, n_results=10)
    assert len(hits) == 10 and hits[0]["id"] == target
    assert hits[0]["score"] == pytest.approx(1.0, abs=1e-5)
    scores = [hit["score"] for hit in hits]
    assert scores == sorted(scores, reverse=True)
    for hit in hits:
        assert hit["score"] == pytest.approx(cosine(query, stored[hit["id"]][0]), abs=1e-5)
        assert len(hit["representative_vector"]) == DIM
        np.testing.assert_allclose(hit["representative_vector"], stored[hit["id"]][0], rtol=1e-6)
        assert set(hit) == {"id", "score", "metadata", "representative_vector"}
        assert "full_embeddings" in hit["metadata"]
    everything = store.search_visual(query, n_results=100)
    expected = sorted(fields, key=lambda i: -cosine(query, stored[i][0]))
    assert [hit["id"] for hit in everything] == expected


def test_text_search_uses_the_text_collection(corpus):
    store, stored, fields = corpus
    hits = store.search_text(stored["doc0-chunk0007"][0], n_results=3)
    assert hits[0]["id"] == "doc0-chunk0007" and all("chunk" in hit["id"] for hit in hits)
    assert hits[0]["metadata"]["text_preview"] == "chunk 7"


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"filename": "b.pdf"}, lambda m: m["filename"] == "b.pdf"),
        ({"filename": "c.pdf", "page": {"$gte": 5}}, lambda m: m["filename"] == "c.pdf" and m["page"] >= 5),
        ({"$or": [{"page": 1}, {"page": 8}]}, lambda m: m["page"] in (1, 8)),
        (
            {"doc_id": "doc0", "type": "visual", "page": {"$lt": 3}},
            lambda m: m["doc_id"] == "doc0" and m["page"] < 3,
        ),
    ],
    ids=["one-key", "two-keys-and", "or", "three-keys"],
)
def test_filters_select_exactly_the_matching_records(corpus, filters, expected):
    store, stored, fields = corpus
    hits = store.search_visual(stored["doc0-page001"][0], n_results=100, filters=filters)
    assert hits and all(expected(hit["metadata"]) for hit in hits)
    matching = [embedding_id for embedding_id, given in fields.items() if expected(given)]
    assert sorted(hit["id"] for hit in hits) == sorted(matching)


def test_empty_results(make_store, corpus):
    store, stored, fields = corpus
    assert store.search_visual(stored["doc0-page001"][0], filters={"filename": "missing.pdf"}) == []
    empty = make_store(dim=DIM)
    query = np.ones(DIM, dtype=np.float32)
    assert empty.search_visual(query) == [] and empty.search_text(query, n_results=1) == []
    assert empty.search_visual_multivector(np.ones((3, DIM), dtype=np.float32)) == []


def test_bad_queries_are_rejected(corpus):
    store, _, _ = corpus
    with pytest.raises(EmbeddingValidationError, match="shape"):
        store.search_visual(np.ones((1, DIM), dtype=np.float32))
    with pytest.raises(EmbeddingValidationError, match="zeros"):
        store.search_visual(np.zeros(DIM, dtype=np.float32))
    with pytest.raises(EmbeddingValidationError, match="dtype"):
        store.search_text(np.ones(DIM, dtype=np.float64))
    with pytest.raises(MetadataValidationError, match="n_results"):
        store.search_visual(np.ones(DIM, dtype=np.float32), n_results=0)
    with pytest.raises(MetadataValidationError, match="filters"):
        store.search_visual(np.ones(DIM, dtype=np.float32), filters=[("page", 1)])


@pytest.mark.parametrize("kind", ["visual", "text"])
def test_two_stage_scores_equal_reference_maxsim_over_stored_sequences(corpus, kind):
    store, stored, fields = corpus
    target = "doc2-page003" if kind == "visual" else "doc0-chunk0004"
    rng = np.random.default_rng(12)
    query = np.concatenate([stored[target][:1], sequence(rng, 5, DIM)])
    search = store.search_visual_multivector if kind == "visual" else store.search_text_multivector
    hits = search(query, n_candidates=100, n_results=5)
    stage1 = {
        hit["id"]: hit["score"]
        for hit in (store.search_visual if kind == "visual" else store.search_text)(query[0], n_results=100)
    }
    assert len(hits) == 5
    late = [hit["late_interaction_score"] for hit in hits]
    assert late == sorted(late, reverse=True)
    references = {i: maxsim_reference(query, store.get_full_embeddings(i, kind)) for i in stage1}
    assert [hit["id"] for hit in hits] == sorted(references, key=lambda i: -references[i])[:5]
    for hit in hits:
        assert hit["late_interaction_score"] == pytest.approx(references[hit["id"]], rel=1e-4, abs=1e-3)
        assert hit["score"] == pytest.approx(stage1[hit["id"]], abs=1e-6)


def test_rerank_promotes_the_document_matching_all_query_vectors(make_store):
    """Stage 1 prefers a decoy sharing only the first vector; MaxSim finds the true match."""
    store = make_store(storage_version="1.1", dim=DIM)
    rng = np.random.default_rng(13)
    query = sequence(rng, 8, DIM)
    true_match = np.concatenate([query[:1] + 0.5 * sequence(rng, 1, DIM), query[1:]])
    decoy = np.concatenate([query[:1], sequence(rng, 7, DIM)])
    noise = [sequence(rng, 8, DIM) for _ in range(30)]
    store.add_batch_visual("corpus", list(range(1, 33)), [decoy, true_match, *noise], visual_meta())
    assert store.search_visual(query[0], n_results=1)[0]["id"] == "corpus-page001"
    hits = store.search_visual_multivector(query, n_candidates=32, n_results=3)
    assert hits[0]["id"] == "corpus-page002"


def test_full_sequences_of_100_candidates(make_store):
    store = make_store(storage_version="1.1")
    rng = np.random.default_rng(14)
    sequences = [sequence(rng, 100) for _ in range(100)]
    ids = []
    for start in range(0, 100, 25):
        ids += store.add_batch_visual(
            "big", list(range(start + 1, start + 26)), sequences[start : start + 25], visual_meta()
        )
    hits = store.search_visual(sequences[0][0], n_results=100)
    assert sorted(hit["id"] for hit in hits) == sorted(ids)
    by_id = dict(zip(ids, sequences, strict=True))
    for hit in hits:
        full = store.get_full_embeddings(hit["id"])
        np.testing.assert_allclose(full, by_id[hit["id"]], rtol=2**-11, atol=1e-7)
