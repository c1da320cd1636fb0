"""End-to-end storage of a document, stats, deletion, corrupt records, tenancy, connections."""

from __future__ import annotations

import numpy as np
import pytest

from engine.llama_server import free_port
from engine.multivector import (
    ChromaClient,
    ChromaDBConnectionError,
    DecompressionError,
    DocumentNotFoundError,
    MetadataCompressionError,
)
from tests.engine.multivector.data import sequence, text_meta, visual_meta


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_a_pdf_with_10_pages_and_30_chunks(make_store, version):
    store = make_store(storage_version=version)
    rng = np.random.default_rng(21)
    pages = [sequence(rng, 100) for _ in range(10)]
    chunks = [sequence(rng, 64) for _ in range(30)]
    texts = [f"chunk {i} " + "word " * i for i in range(30)]
    store.add_batch_visual("a1b2c3d4", list(range(1, 11)), pages, visual_meta())
    for chunk_id, rows in enumerate(chunks):
        store.add_text_embedding(
            "a1b2c3d4", chunk_id, rows, text_meta(text=texts[chunk_id], page=chunk_id // 3 + 1)
        )
    store.add_visual_embedding("other", 1, sequence(rng, 5), visual_meta("other.pdf"))

    visual = store.get_document_records("a1b2c3d4", "visual")
    text = store.get_document_records("a1b2c3d4", "text")
    assert [r["id"] for r in visual] == [f"a1b2c3d4-page{p:03d}" for p in range(1, 11)]
    assert [r["id"] for r in text] == [f"a1b2c3d4-chunk{c:04d}" for c in range(30)]
    for record, rows in zip(visual + text, pages + chunks, strict=True):
        metadata = record["metadata"]
        assert metadata["doc_id"] == "a1b2c3d4" and metadata["filename"] == "Q3-2023-Earnings.pdf"
        assert metadata["seq_length"] == len(rows) and metadata["embedding_shape"] == f"({len(rows)}, 768)"
        kind = metadata["type"]
        np.testing.assert_allclose(
            store.get_full_embeddings(record["id"], kind), rows, rtol=2**-11, atol=1e-7
        )
    assert [r["metadata"]["word_count"] for r in text] == [len(t.split()) for t in texts]
    assert [r["metadata"]["page"] for r in text] == [c // 3 + 1 for c in range(30)]

    stats = store.get_collection_stats()
    assert (stats["visual_count"], stats["text_count"], stats["total_documents"]) == (11, 30, 2)
    payload_mb = sum(len(r["metadata"]["full_embeddings"]) for r in visual + text) / 1e6
    assert payload_mb < stats["storage_size_mb"] < payload_mb * 1.1 + 0.1

    assert store.delete_document("a1b2c3d4") == (10, 30)
    assert store.delete_document("a1b2c3d4") == (0, 0)
    assert store.get_collection_stats() | {"storage_size_mb": 0} == {
        "visual_count": 1,
        "text_count": 0,
        "total_documents": 1,
        "storage_size_mb": 0,
    }
    with pytest.raises(DocumentNotFoundError, match="a1b2c3d4-page001"):
        store.get_full_embeddings("a1b2c3d4-page001")


def test_unknown_ids_and_collections(store):
    with pytest.raises(DocumentNotFoundError) as caught:
        store.get_full_embeddings("nope-chunk0000", "text")
    assert isinstance(caught.value, ValueError)
    with pytest.raises(ValueError, match="collection"):
        store.get_full_embeddings("nope-page001", "images")
    assert store.delete_document("never-stored") == (0, 0)
    assert store.get_collection_stats() == {
        "visual_count": 0,
        "text_count": 0,
        "total_documents": 0,
        "storage_size_mb": 0.0,
    }


@pytest.mark.parametrize(
    "damage",
    [
        {"full_embeddings": "%%%not base64%%%"},
        {"embedding_shape": "(3, 768)"},
        {"embedding_shape": "three rows"},
        {"storage_version": "0.9"},
    ],
    ids=["payload", "shape-mismatch", "shape-text", "version"],
)
def test_corrupted_metadata_raises_compression_error(store, damage):
    rows = sequence(np.random.default_rng(22), 4)
    embedding_id = store.add_visual_embedding("doc", 1, rows, visual_meta())
    store.chroma_collection("visual").update(ids=[embedding_id], metadatas=[damage])
    with pytest.raises(MetadataCompressionError, match=embedding_id) as caught:
        store.get_full_embeddings(embedding_id)
    assert isinstance(caught.value, DecompressionError)
    with pytest.raises(MetadataCompressionError, match=embedding_id):
        store.search_visual_multivector(rows)


def test_collection_pairs_on_one_server_are_isolated(chroma_server, tmp_path):
    rng = np.random.default_rng(23)
    first = ChromaClient(
        url=chroma_server, visual_collection="corpus-1-visual", text_collection="corpus-1-text"
    )
    second = ChromaClient(
        url=chroma_server, visual_collection="corpus-2-visual", text_collection="corpus-2-text"
    )
    shared = sequence(rng, 10)
    first.add_visual_embedding("doc", 1, shared, visual_meta("first.pdf"))
    first.add_text_embedding("doc", 0, shared, text_meta("first.pdf"))
    second.add_visual_embedding("doc", 2, sequence(rng, 10), visual_meta("second.pdf"))
    assert [hit["id"] for hit in second.search_visual(shared[0])] == ["doc-page002"]
    assert second.search_text(shared[0]) == []
    with pytest.raises(DocumentNotFoundError):
        second.get_full_embeddings("doc-page001")
    assert second.delete_document("doc") == (1, 0)
    assert (
        first.get_collection_stats()["visual_count"] == 1 and first.get_collection_stats()["text_count"] == 1
    )
    # An embedded store made after server clients must stay local (chromadb Settings are mutable).
    local = ChromaClient(
        path=tmp_path / "local", visual_collection="corpus-1-visual", text_collection="corpus-1-text"
    )
    assert local.get_collection_stats()["visual_count"] == 0
    assert (tmp_path / "local" / "chroma.sqlite3").exists()


@pytest.mark.parametrize("how", ["host-port", "url"])
def test_connection_failure_names_the_url(how):
    port = free_port()
    with pytest.raises(ChromaDBConnectionError, match=f"http://127.0.0.1:{port}"):
        if how == "url":
            ChromaClient(url=f"http://127.0.0.1:{port}")
        else:
            ChromaClient(host="127.0.0.1", port=port)


def test_an_existing_chromadb_client_can_be_used(tmp_path):
    import chromadb

    client = chromadb.EphemeralClient()
    store = ChromaClient(client=client, visual_collection="given-visual", text_collection="given-text", dim=8)
    store.add_visual_embedding("doc", 1, np.eye(8, dtype=np.float32), visual_meta())
    assert store.search_visual(np.eye(8, dtype=np.float32)[0])[0]["id"] == "doc-page001"
    assert {c.name for c in client.list_collections()} >= {"given-visual", "given-text"}
