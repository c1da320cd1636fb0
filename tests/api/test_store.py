"""The corpus's multi-vector store over HTTP, on a real embedded Chroma (per-test DATA_DIR)."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from corpus.chroma import store_for
from tests.plugins.api import error_of, token_client

DIM = 768
PAGE_META = {"filename": "report.pdf", "source_path": "/docs/report.pdf"}


def _sequence(seed: int, rows: int = 5) -> np.ndarray:
    generator = np.random.default_rng(seed)
    return generator.standard_normal((rows, DIM)).astype(np.float32)


def _b64(array: np.ndarray) -> dict:
    return {"base64": base64.b64encode(array.astype("<f4").tobytes()).decode(), "shape": list(array.shape)}


@pytest.fixture
def api(owner):
    return token_client(owner)


def test_add_pages_as_json_and_base64_and_read_them_back(api, corpus, member):
    first, second = _sequence(1), _sequence(2, rows=3)
    url = f"/api/v1/corpora/{corpus.pk}/store/pages/"
    added = api.post(
        url,
        {"doc_id": "report", "index": 1, "embeddings": first.tolist(), "metadata": PAGE_META},
        format="json",
    )
    assert added.status_code == 201 and added.json() == {"ids": ["report-page001"]}
    added = api.post(url, {"doc_id": "report", "index": 2, "embeddings": _b64(second), "metadata": PAGE_META},
                     format="json")
    assert added.json() == {"ids": ["report-page002"]}
    reader = token_client(member)
    as_json = reader.get(f"/api/v1/corpora/{corpus.pk}/store/embeddings/report-page001/").json()
    assert as_json["shape"] == [5, DIM]
    np.testing.assert_allclose(np.array(as_json["embeddings"], dtype=np.float32), first, rtol=1e-3, atol=1e-3)
    as_b64 = reader.get(f"/api/v1/corpora/{corpus.pk}/store/embeddings/report-page002/",
                        {"encoding": "base64"}).json()
    decoded = np.frombuffer(base64.b64decode(as_b64["base64"]), dtype="<f4").reshape(as_b64["shape"])
    # The store keeps float16 (storage version 1.1): equal to that precision.
    np.testing.assert_allclose(decoded, second, rtol=1e-3, atol=1e-3)
    stats = reader.get(f"/api/v1/corpora/{corpus.pk}/store/").json()
    assert stats["visual_count"] == 2 and stats["total_documents"] == 1
    assert store_for(corpus.pk).get_collection_stats()["visual_count"] == 2


def test_batch_search_two_stage_and_delete(api, corpus):
    chunks = [_sequence(10 + i) for i in range(4)]
    batch = {"kind": "text", "doc_id": "manual", "items": [
        {"index": i, "embeddings": _b64(rows), "metadata": {**PAGE_META, "text": f"chunk {i}"}}
        for i, rows in enumerate(chunks)]}
    added = api.post(f"/api/v1/corpora/{corpus.pk}/store/batch/", batch, format="json")
    assert added.status_code == 201 and len(added.json()["ids"]) == 4
    target = chunks[2]
    stage1 = api.post(f"/api/v1/corpora/{corpus.pk}/store/search/",
                      {"kind": "text", "query": target[0].tolist(), "n_results": 2}, format="json").json()
    assert stage1[0]["id"] == "manual-chunk0002" and "full_embeddings" not in stage1[0]["metadata"]
    two_stage = api.post(f"/api/v1/corpora/{corpus.pk}/store/search/multivector/",
                         {"kind": "text", "query": _b64(target[:3]), "n_results": 3}, format="json").json()
    assert two_stage[0]["id"] == "manual-chunk0002" and two_stage[0]["late_interaction_score"] > 0
    scores = [hit["late_interaction_score"] for hit in two_stage]
    assert scores == sorted(scores, reverse=True)
    documents = api.get(f"/api/v1/corpora/{corpus.pk}/store/documents/").json()
    assert documents["results"] == [{"doc_id": "manual", "pages": 0, "chunks": 4}]
    deleted = api.delete(f"/api/v1/corpora/{corpus.pk}/store/documents/manual/")
    assert deleted.status_code == 200 and deleted.json() == {"pages": 0, "chunks": 4}
    assert api.delete(f"/api/v1/corpora/{corpus.pk}/store/documents/manual/").status_code == 404


@pytest.mark.parametrize(("body", "field"), [
    ({"embeddings": [[0.1] * 10]}, "embeddings"),                           # wrong width
    ({"embeddings": [[0.1] * DIM, [0.1] * 5]}, "embeddings"),               # ragged
    ({"embeddings": {"base64": "!!!", "shape": [1, DIM]}}, "embeddings"),   # not base64
    ({"embeddings": {"base64": base64.b64encode(b"\0" * 8).decode(), "shape": [1, DIM]}}, "embeddings"),
    ({"embeddings": [[1e39] * DIM]}, "embeddings"),                          # overflows float32
    ({"embeddings": "text"}, "embeddings"),
    ({"index": -1}, "index"),
    ({"doc_id": ""}, "doc_id"),
])
def test_bad_embeddings_are_400_naming_the_field(api, corpus, body, field):
    payload = {"doc_id": "d", "index": 1, "embeddings": [[0.1] * DIM], "metadata": PAGE_META, **body}
    response = api.post(f"/api/v1/corpora/{corpus.pk}/store/pages/", payload, format="json")
    assert response.status_code == 400, response.content
    assert field in error_of(response)["details"]


def test_store_contract_errors_are_400_not_500(api, corpus):
    missing_meta = api.post(f"/api/v1/corpora/{corpus.pk}/store/pages/",
                            {"doc_id": "d", "index": 1, "embeddings": [[0.1] * DIM]}, format="json")
    assert missing_meta.status_code == 400 and "filename" in error_of(missing_meta)["message"]
    page_zero = api.post(
        f"/api/v1/corpora/{corpus.pk}/store/pages/",
        {"doc_id": "d", "index": 0, "embeddings": [[0.1] * DIM], "metadata": PAGE_META},
        format="json",
    )
    assert page_zero.status_code == 400
    zero_query = api.post(
        f"/api/v1/corpora/{corpus.pk}/store/search/", {"kind": "visual", "query": [0.0] * DIM}, format="json"
    )
    assert zero_query.status_code == 400 and "zero" in error_of(zero_query)["message"]


def test_unreachable_chroma_is_503(api, corpus, settings):
    settings.CHROMA_URL = "http://127.0.0.1:9"  # nothing listens on the discard port
    response = api.get(f"/api/v1/corpora/{corpus.pk}/store/")
    assert response.status_code == 503 and error_of(response)["code"] == "store_unavailable"
