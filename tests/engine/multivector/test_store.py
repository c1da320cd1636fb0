"""Collections, adds and input validation, on the embedded store and the real server."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import chromadb
import numpy as np
import pytest
from chromadb.config import Settings

from engine.multivector import (
    MAX_PAYLOAD_BYTES,
    ChromaClient,
    EmbeddingValidationError,
    MetadataCompressionError,
    MetadataValidationError,
    PayloadTooLargeError,
    StorageError,
    ValidationError,
)
from tests.engine.multivector.data import sequence, text_meta, visual_meta


def test_collections_are_created_cosine_and_reopened(make_store):
    store = make_store(name="reopen")
    for kind in ("visual", "text"):
        collection = store.chroma_collection(kind)
        assert collection.name == store.collection_names[kind]
        assert collection.configuration["hnsw"]["space"] == "cosine"
    store.add_visual_embedding("doc", 1, sequence(np.random.default_rng(0), 3), visual_meta())
    again = make_store(name="reopen")
    assert again.get_collection_stats()["visual_count"] == 1


def test_existing_collection_with_other_dim_or_space_is_refused(make_store):
    make_store(name="dim768", dim=768)
    with pytest.raises(StorageError, match="dim 768"):
        make_store(name="dim768", dim=128)
    store = make_store(name="l2-check")
    store._client.create_collection(
        "visual-l2", configuration={"hnsw": {"space": "l2"}}, embedding_function=None
    )
    with pytest.raises(StorageError, match="not cosine"):
        ChromaClient(client=store._client, visual_collection="visual-l2", text_collection="text-l2")


def test_existing_default_collection_is_tuned_to_persist_often(make_store):
    store = make_store()
    store._client.create_collection(
        "visual-plain", configuration={"hnsw": {"space": "cosine"}}, embedding_function=None
    )
    assert store._client.get_collection("visual-plain").configuration["hnsw"]["sync_threshold"] == 1000
    ChromaClient(client=store._client, visual_collection="visual-plain", text_collection="text-plain")
    assert store._client.get_collection("visual-plain").configuration["hnsw"]["sync_threshold"] == 10


def has_wal(store_dir: Path) -> bool:
    # Only looks for the file: a second SQLite library opening the database in this process
    # would drop Chroma's POSIX locks (and delete its WAL) when it closed its handle.
    return (store_dir / "chroma.sqlite3-wal").exists()


def test_new_embedded_stores_write_through_the_sqlite_wal(tmp_path):
    fresh = ChromaClient(path=tmp_path / "fresh", dim=8)
    assert has_wal(tmp_path / "fresh")
    fresh.add_visual_embedding("doc", 1, np.eye(8, dtype=np.float32), visual_meta())
    again = ChromaClient(path=tmp_path / "fresh", dim=8)
    assert again.get_full_embeddings("doc-page001").shape == (8, 8)
    # A store Chroma made (rollback journal) and still has open is used as it is: switching it
    # under Chroma's open connections would lock its writers out.
    plain = chromadb.PersistentClient(
        path=str(tmp_path / "plain"), settings=Settings(anonymized_telemetry=False)
    )
    plain.create_collection(
        "visual-plain", configuration={"hnsw": {"space": "cosine"}}, embedding_function=None
    )
    store = ChromaClient(
        path=tmp_path / "plain", visual_collection="visual-plain", text_collection="text-plain", dim=8
    )
    store.add_visual_embedding("doc", 1, np.eye(8, dtype=np.float32), visual_meta())
    assert not has_wal(tmp_path / "plain")
    assert plain.get_collection("visual-plain").get(ids=["doc-page001"])["ids"] == ["doc-page001"]


def test_constructor_arguments_are_checked(tmp_path):
    with pytest.raises(ValueError, match="at most one"):
        ChromaClient(path=tmp_path, url="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="must differ"):
        ChromaClient(path=tmp_path, visual_collection="same", text_collection="same")
    with pytest.raises(ValueError, match="storage_version"):
        ChromaClient(path=tmp_path, storage_version="2.0")
    with pytest.raises(ValueError, match="url"):
        ChromaClient(url="chroma:8000")


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_visual_record_metadata_and_payload(make_store, version):
    store = make_store(storage_version=version)
    embeddings = sequence(np.random.default_rng(1), 100)
    embedding_id = store.add_visual_embedding("a1b2c3d4", 1, embeddings, visual_meta(tag="q3"))
    assert embedding_id == "a1b2c3d4-page001"
    [record] = store.get_document_records("a1b2c3d4", "visual")
    metadata = record["metadata"]
    assert {key: metadata[key] for key in ("doc_id", "type", "page", "seq_length", "embedding_shape")} == {
        "doc_id": "a1b2c3d4",
        "type": "visual",
        "page": 1,
        "seq_length": 100,
        "embedding_shape": "(100, 768)",
    }
    assert metadata["filename"] == "Q3-2023-Earnings.pdf" and metadata["file_size"] == 1234
    assert metadata["source_path"] == "/data/uploads/finance/Q3-2023-Earnings.pdf" and metadata["tag"] == "q3"
    assert metadata["storage_version"] == version
    assert datetime.fromisoformat(metadata["timestamp"]).tzinfo is not None
    restored = store.get_full_embeddings(embedding_id, "visual")
    tolerance = 0 if version == "1.0" else 2**-11
    np.testing.assert_allclose(restored, embeddings, rtol=tolerance, atol=1e-7 if tolerance else 0)


def test_text_record_fields_from_text_or_given(store):
    long_text = "word " * 300
    first = store.add_text_embedding(
        "doc",
        0,
        sequence(np.random.default_rng(2), 64),
        text_meta(text=long_text, page=3, timestamp="2024-01-02T03:04:05+00:00"),
    )
    second = store.add_text_embedding(
        "doc",
        12,
        sequence(np.random.default_rng(3), 64),
        text_meta(text=None, text_preview="given preview", word_count=2) | {},
    )
    assert (first, second) == ("doc-chunk0000", "doc-chunk0012")
    records = store.get_document_records("doc", "text")
    assert [record["id"] for record in records] == [first, second]
    metadata = records[0]["metadata"]
    assert metadata["text_preview"] == long_text[:200] and metadata["word_count"] == 300
    assert metadata["page"] == 3 and metadata["chunk_id"] == 0 and metadata["type"] == "text"
    assert metadata["timestamp"] == "2024-01-02T03:04:05+00:00" and "text" not in metadata
    assert (
        records[1]["metadata"]["text_preview"] == "given preview"
        and records[1]["metadata"]["word_count"] == 2
    )


@pytest.mark.parametrize(
    ("embeddings", "problem"),
    [
        (np.zeros(768, dtype=np.float32), "shape"),
        (np.zeros((5, 767), dtype=np.float32), "shape"),
        (np.zeros((0, 768), dtype=np.float32), "shape"),
        (np.zeros((2, 5, 768), dtype=np.float32), "shape"),
        (np.zeros((5, 768), dtype=np.float64), "dtype"),
        (np.zeros((5, 768), dtype=np.int32), "dtype"),
        (np.full((5, 768), np.nan, dtype=np.float32), "NaN"),
        (np.full((5, 768), np.inf, dtype=np.float16), "NaN or infinite"),
        ([[0.0] * 768], "numpy array"),
    ],
    ids=["1-d", "wrong-dim", "zero-rows", "3-d", "float64", "int32", "nan", "inf", "list"],
)
def test_invalid_embeddings_are_rejected(store, embeddings, problem):
    with pytest.raises(EmbeddingValidationError, match=problem) as caught:
        store.add_visual_embedding("doc", 1, embeddings, visual_meta())
    assert isinstance(caught.value, ValueError)
    assert store.get_collection_stats()["visual_count"] == 0


def test_float16_input_is_accepted(store):
    embeddings = sequence(np.random.default_rng(4), 10, dtype=np.float16)
    store.add_visual_embedding("doc", 2, embeddings, visual_meta())
    np.testing.assert_array_equal(store.get_full_embeddings("doc-page002"), embeddings.astype(np.float32))


@pytest.mark.parametrize(
    ("kind", "metadata", "field"),
    [
        ("visual", {"source_path": "/x"}, "filename"),
        ("visual", {"filename": "", "source_path": "/x"}, "filename"),
        ("visual", {"filename": "a.pdf"}, "source_path"),
        ("visual", visual_meta(timestamp="yesterday"), "timestamp"),
        ("visual", visual_meta(doc_id="other"), "doc_id"),
        ("visual", visual_meta(type="text"), "type"),
        ("visual", visual_meta(page=9), "page"),
        ("visual", visual_meta(full_embeddings="x"), "full_embeddings"),
        ("visual", visual_meta(tags=["a", "b"]), "tags"),
        ("visual", visual_meta(file_size=-1), "file_size"),
        ("text", {"filename": "a.pdf", "source_path": "/x"}, "text_preview"),
        ("text", {"filename": "a.pdf", "source_path": "/x", "text_preview": "p"}, "word_count"),
        ("text", text_meta(page=0), "page"),
    ],
)
def test_invalid_metadata_names_the_field(store, kind, metadata, field):
    add = store.add_visual_embedding if kind == "visual" else store.add_text_embedding
    with pytest.raises(MetadataValidationError, match=field) as caught:
        add("doc", 1, sequence(np.random.default_rng(5), 2), metadata)
    assert isinstance(caught.value, ValidationError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize(("kind", "index"), [("visual", 0), ("visual", True), ("text", -1), ("text", "3")])
def test_invalid_page_or_chunk_number(store, kind, index):
    add = store.add_visual_embedding if kind == "visual" else store.add_text_embedding
    meta = visual_meta() if kind == "visual" else text_meta()
    with pytest.raises(MetadataValidationError, match="page" if kind == "visual" else "chunk_id"):
        add("doc", index, sequence(np.random.default_rng(6), 2), meta)


@pytest.mark.parametrize(("version", "longest"), [("1.0", 520), ("1.1", 1024)])
def test_sequence_lengths_up_to_the_size_limit(make_store, version, longest):
    """1 row and the longest (seq, 768) that fits in 2 MiB are stored; one row more is refused
    with nothing written. 2048 rows fit only at a narrower dim."""
    store = make_store(storage_version=version)
    rng = np.random.default_rng(7)
    for page, rows in ((1, sequence(rng, 1)), (2, sequence(rng, longest))):
        store.add_visual_embedding("doc", page, rows, visual_meta())
        np.testing.assert_allclose(
            store.get_full_embeddings(f"doc-page{page:03d}"), rows, rtol=2**-11, atol=1e-7
        )
    too_long = sequence(rng, 1800 if version == "1.0" else longest + 1)
    with pytest.raises(PayloadTooLargeError, match=str(MAX_PAYLOAD_BYTES)) as caught:
        store.add_visual_embedding("doc", 3, too_long, visual_meta())
    assert isinstance(caught.value, MetadataCompressionError) and isinstance(
        caught.value, EmbeddingValidationError
    )
    assert store.get_collection_stats()["visual_count"] == 2
    narrow = make_store(storage_version=version, dim=128)
    narrow.add_visual_embedding("doc", 1, sequence(rng, 2048, 128), visual_meta())
    assert narrow.get_full_embeddings("doc-page001").shape == (2048, 128)


def test_batches_are_validated_whole_and_written_once(store):
    rng = np.random.default_rng(8)
    pages = [sequence(rng, 20) for _ in range(10)]
    ids = store.add_batch_visual("doc", list(range(1, 11)), pages, visual_meta())
    assert ids == [f"doc-page{page:03d}" for page in range(1, 11)]
    chunks = [sequence(rng, 8) for _ in range(5)]
    metas = [text_meta(text=f"chunk {i}") for i in range(5)]
    assert store.add_batch_text("doc", list(range(5)), chunks, metas)[-1] == "doc-chunk0004"
    assert store.get_document_records("doc", "text")[4]["metadata"]["text_preview"] == "chunk 4"
    bad = [*pages[:9], np.zeros((3, 5), dtype=np.float32)]
    with pytest.raises(EmbeddingValidationError):
        store.add_batch_visual("other", list(range(1, 11)), bad, visual_meta())
    with pytest.raises(MetadataValidationError, match="duplicate"):
        store.add_batch_visual("other", [1, 1], pages[:2], visual_meta())
    with pytest.raises(MetadataValidationError, match="equal"):
        store.add_batch_visual("other", [1, 2, 3], pages[:2], visual_meta())
    assert store.get_document_records("other", "visual") == []


def test_adding_the_same_page_again_replaces_it(store):
    rng = np.random.default_rng(9)
    store.add_visual_embedding("doc", 1, sequence(rng, 5), visual_meta())
    newer = sequence(rng, 7)
    store.add_visual_embedding("doc", 1, newer, visual_meta(filename="v2.pdf"))
    [record] = store.get_document_records("doc", "visual")
    assert record["metadata"]["filename"] == "v2.pdf" and record["metadata"]["seq_length"] == 7
    np.testing.assert_array_equal(store.get_full_embeddings("doc-page001"), newer)
