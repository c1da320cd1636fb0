"""A real `chroma run` server (CHROMA_URL) killed with SIGKILL while it holds a request of the
portal, then started again on the same port and data directory: mid-search (the store's search
API) and mid-fill (a late-interaction build writing its text records).

The user sees a clear error (the search: 503 naming the server; the build: failed, naming it), the
portal recovers on its own process's Chroma connection once the server is back (no restart), and
nothing is stored as complete that was not: the failed build never serves, and its partial records
go with the next build's activation. The kill comes while the server holds the request: a spy
around the store's call stops the server first (`ChromaServer.killed_mid_request`); the fault itself
is the real one."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest

from corpus import serving
from corpus.chroma import store_for
from corpus.models import Corpus, IndexBuild, Memory
from engine.multivector import ChromaClient
from memory.services import memories_search
from tests.plugins.api import error_of, token_client
from tests.plugins.portal import TEXTS, build_now, upload

Status = IndexBuild.Status
DIM = 768
MORE = ["Tides follow the moon because its gravity pulls on the oceans twice a day.",
        "Glaciers carve U-shaped valleys as the ice grinds slowly over the bedrock."]


def _sequence(seed: int, rows: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, DIM)).astype(np.float32)


def _b64(array: np.ndarray) -> dict:
    return {"base64": base64.b64encode(array.astype("<f4").tobytes()).decode(), "shape": list(array.shape)}


def _kill_during(monkeypatch, server, method: str, call: int) -> list[str]:  # noqa: ANN001 - fixtures
    """Make the `call`-th call of ChromaClient.`method` run while `server` is killed under it; the
    calls' first arguments are recorded, in order."""
    real = getattr(ChromaClient, method)
    calls: list[str] = []

    def spy(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202 - the real call, timed
        calls.append(str(args[0]) if args else "")
        if len(calls) != call:
            return real(self, *args, **kwargs)
        with server.killed_mid_request():
            return real(self, *args, **kwargs)

    monkeypatch.setattr(ChromaClient, method, spy)
    return calls


def test_chroma_killed_mid_search_is_a_503_and_searches_answer_again_once_it_is_back(
        own_chroma_server, settings, corpus, owner, no_throttle, monkeypatch):
    settings.CHROMA_URL = url = own_chroma_server.url
    api = token_client(owner)
    chunks = [_sequence(10 + i) for i in range(4)]
    batch = {
        "kind": "text",
        "doc_id": "manual",
        "items": [
            {
                "index": i,
                "embeddings": _b64(rows),
                "metadata": {"filename": "manual.txt", "source_path": "/manual.txt", "text": f"chunk {i}"},
            }
            for i, rows in enumerate(chunks)
        ],
    }
    assert api.post(f"/api/v1/corpora/{corpus.pk}/store/batch/", batch, format="json").status_code == 201

    def search():  # noqa: ANN202 - a test client response
        return api.post(f"/api/v1/corpora/{corpus.pk}/store/search/multivector/",
                        {"kind": "text", "query": _b64(chunks[2][:3]), "n_results": 3}, format="json")

    before = search()
    assert before.status_code == 200 and before.json()[0]["id"] == "manual-chunk0002"
    connection = serving.chroma_client()

    calls = _kill_during(monkeypatch, own_chroma_server, "_search", call=1)
    killed = search()
    assert calls == ["text"]  # the server died under the search's own query
    assert killed.status_code == 503, killed.content
    error = error_of(killed)
    assert (
        error["code"] == "store_unavailable" and url in error["message"] and "lost Chroma" in error["message"]
    )
    monkeypatch.undo()

    down = search()  # still down: the same clear error, not a 500 and not a hang
    assert down.status_code == 503 and url in error_of(down)["message"]

    own_chroma_server.start()  # back, on the same port and data directory
    after = search()
    assert after.status_code == 200 and after.json() == before.json()  # every acknowledged record kept
    assert serving.chroma_client() is connection  # the process's connection reconnected: no restart


@pytest.fixture
def late_corpus(corpus) -> Corpus:
    Corpus.objects.filter(pk=corpus.pk).update(late_interaction=True)
    corpus.refresh_from_db()
    return corpus


def _text_records(corpus_id: int) -> list[dict]:
    return store_for(corpus_id).chroma_collection("text").get(include=["metadatas"])["metadatas"]


def test_chroma_killed_mid_fill_fails_the_build_and_the_next_build_serves_once_it_is_back(
    own_chroma_server, settings, late_corpus, owner, dataset, monkeypatch, django_capture_on_commit_callbacks
):
    settings.CHROMA_URL = url = own_chroma_server.url
    first = build_now(late_corpus, owner, django_capture_on_commit_callbacks)
    assert first.status == Status.SUCCEEDED, first.error
    more = upload(
        late_corpus, owner, MORE, "more.jsonl"
    )  # two datasets: the fill writes one batch per dataset

    calls = _kill_during(monkeypatch, own_chroma_server, "add_batch_text", call=2)
    second = build_now(late_corpus, owner, django_capture_on_commit_callbacks)
    assert len(calls) == 2  # one dataset's records written, the other's in flight when the server died
    assert second.status == Status.FAILED
    assert url in second.error and "ChromaDBConnectionError" in second.error
    # Nothing of it serves: the first build does, searched without Chroma (its own token vectors).
    assert late_corpus.active_build_id == first.pk
    assert not Memory.objects.filter(build=second).exists()
    assert not Path(second.build_dir).exists() and Path(first.build_dir).is_dir()
    assert memories_search(user=owner, corpus_ids=[late_corpus.pk], query=TEXTS[3])[0].memory.text == TEXTS[3]
    monkeypatch.undo()

    own_chroma_server.start()
    # Until then the failed build's partial records lie beside the serving build's, never searched.
    assert {r["index_build"] for r in _text_records(late_corpus.pk)} == {str(first.pk), str(second.pk)}
    third = build_now(late_corpus, owner, django_capture_on_commit_callbacks)
    assert third.status == Status.SUCCEEDED, third.error
    assert late_corpus.active_build_id == third.pk
    # The failed build's partial records went with this build's activation, as the first's did.
    records = _text_records(late_corpus.pk)
    assert {r["index_build"] for r in records} == {str(third.pk)}
    assert len(records) == len(TEXTS) + len(MORE) == third.parameters["text_records"]
    assert {r["source_id"] for r in records} == {dataset.pk, more.pk}
