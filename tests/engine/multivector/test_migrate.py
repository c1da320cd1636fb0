"""Migration between storage versions: nothing lost, idempotent, verified; and its CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.multivector import ChromaClient, PayloadTooLargeError, compress_embeddings, migrate_store
from tests.engine.multivector.data import sequence, text_meta, visual_meta

REPO = Path(__file__).resolve().parents[3]


def fill(store: ChromaClient, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """7 pages and 12 chunks over two documents, plus one legacy page written the way a
    pre-versioning contract writer did (no storage_version field)."""
    stored = {}
    for doc_id in ("doc-a", "doc-b"):
        pages = [sequence(rng, int(rng.integers(1, 60)), 64) for _ in range(3)]
        stored.update(
            zip(store.add_batch_visual(doc_id, [1, 2, 3], pages, visual_meta()), pages, strict=True)
        )
        chunks = [sequence(rng, 16, 64) for _ in range(6)]
        ids = store.add_batch_text(doc_id, list(range(6)), chunks, text_meta())
        stored.update(zip(ids, chunks, strict=True))
    legacy = sequence(rng, 9, 64)
    store.chroma_collection("visual").add(
        ids=["legacy-page001"],
        embeddings=legacy[:1],
        metadatas=[
            {
                **visual_meta(),
                "doc_id": "legacy",
                "type": "visual",
                "page": 1,
                "seq_length": 9,
                "embedding_shape": "(9, 64)",
                "timestamp": "2023-10-01T12:00:00",
                "full_embeddings": compress_embeddings(legacy),
            }
        ],
    )
    stored["legacy-page001"] = legacy
    return stored


def snapshot(store: ChromaClient) -> dict[str, dict]:
    records = {}
    for kind in ("visual", "text"):
        found = store.chroma_collection(kind).get(include=["metadatas", "embeddings"])
        for embedding_id, metadata, vector in zip(
            found["ids"], found["metadatas"], found["embeddings"], strict=True
        ):
            records[embedding_id] = {"kind": kind, "metadata": metadata, "vector": np.asarray(vector)}
    return records


def test_migration_to_11_and_back_loses_nothing(make_store):
    store = make_store(storage_version="1.0", dim=64)
    stored = fill(store, np.random.default_rng(31))
    before = snapshot(store)
    query = stored["doc-a-page002"][0]
    hits_before = [(h["id"], round(h["score"], 6)) for h in store.search_visual(query, n_results=10)]

    assert migrate_store(store, "1.1", batch_size=4) == {
        "visual": {"converted": 7, "unchanged": 0},
        "text": {"converted": 12, "unchanged": 0},
    }
    after = snapshot(store)
    assert after.keys() == before.keys() == stored.keys()
    for embedding_id, record in after.items():
        metadata = record["metadata"]
        assert metadata["storage_version"] == "1.1"
        unchanged = {
            k: v
            for k, v in before[embedding_id]["metadata"].items()
            if k not in ("full_embeddings", "storage_version")
        }
        assert {k: metadata[k] for k in unchanged} == unchanged
        np.testing.assert_array_equal(record["vector"], before[embedding_id]["vector"])
        full = store.get_full_embeddings(embedding_id, record["kind"])
        np.testing.assert_array_equal(full, stored[embedding_id].astype(np.float16).astype(np.float32))
    assert [(h["id"], round(h["score"], 6)) for h in store.search_visual(query, n_results=10)] == hits_before

    assert migrate_store(store, "1.1") == {
        "visual": {"converted": 0, "unchanged": 7},
        "text": {"converted": 0, "unchanged": 12},
    }
    assert migrate_store(store, "1.0")["visual"] == {"converted": 7, "unchanged": 0}
    for embedding_id, record in snapshot(store).items():
        assert record["metadata"]["storage_version"] == "1.0"
        np.testing.assert_array_equal(
            store.get_full_embeddings(embedding_id, record["kind"]),
            stored[embedding_id].astype(np.float16).astype(np.float32),
        )


def test_a_record_too_large_for_the_target_stops_the_migration_without_loss(make_store):
    store = make_store(storage_version="1.1")
    rng = np.random.default_rng(32)
    small, large = sequence(rng, 10), sequence(rng, 1000)
    store.add_batch_visual("doc", [1, 2], [small, large], visual_meta())
    with pytest.raises(PayloadTooLargeError, match="doc-page002"):
        migrate_store(store, "1.0", batch_size=2)
    for page, rows in ((1, small), (2, large)):
        np.testing.assert_array_equal(
            store.get_full_embeddings(f"doc-page{page:03d}"), rows.astype(np.float16).astype(np.float32)
        )


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "engine.multivector.migrate", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_migrates_a_server_store(chroma_server):
    store = ChromaClient(
        url=chroma_server, visual_collection="cli-visual", text_collection="cli-text", dim=64
    )
    stored = fill(store, np.random.default_rng(33))
    done = run_cli(
        "--url",
        chroma_server,
        "--to",
        "1.1",
        "--visual-collection",
        "cli-visual",
        "--text-collection",
        "cli-text",
        "--dim",
        "64",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "visual": {"converted": 7, "unchanged": 0},
        "text": {"converted": 12, "unchanged": 0},
    }
    for embedding_id, record in snapshot(store).items():
        assert record["metadata"]["storage_version"] == "1.1"
        np.testing.assert_allclose(
            store.get_full_embeddings(embedding_id, record["kind"]),
            stored[embedding_id],
            rtol=2**-11,
            atol=1e-7,
        )


def test_cli_migrates_an_embedded_store_and_reports_failures(tmp_path):
    path = tmp_path / "store"
    writer = subprocess.run(
        [
            sys.executable,
            "-c",
            "import numpy as np, sys; from engine.multivector import ChromaClient;"
            "s = ChromaClient(path=sys.argv[1]);"
            "s.add_visual_embedding('d', 1, np.ones((3, 768), np.float32), {'filename': 'f', 'source_path': "
            "'/f'})",
            str(path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert writer.returncode == 0, writer.stderr
    done = run_cli("--path", str(path), "--to", "1.1")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["visual"] == {"converted": 1, "unchanged": 0}
    reader = ChromaClient(path=path)
    [record] = reader.get_document_records("d")
    assert record["metadata"]["storage_version"] == "1.1"
    np.testing.assert_array_equal(reader.get_full_embeddings("d-page001"), np.ones((3, 768), np.float32))
    refused = run_cli("--url", "http://127.0.0.1:9", "--to", "1.1")
    assert refused.returncode == 1 and "http://127.0.0.1:9" in refused.stderr
