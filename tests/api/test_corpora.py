"""Corpora, datasets, builds, search and memories through the API, on the real services."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from corpus.models import Corpus, Dataset, IndexBuild, Memory
from tests.plugins.api import error_of, token_client
from tests.plugins.portal import TEXTS, jsonl_bytes


def test_create_get_update_delete_a_corpus(owner, readers, writers, outsider):
    owner.groups.add(readers)
    client = token_client(owner)
    created = client.post(
        "/api/v1/corpora/",
        {
            "name": "Field notes",
            "description": "d",
            "visibility": "groups",
            "readable_groups": [readers.pk],
            "hdc_dimensions": 2048,
            "hdc_ngram": 4,
            "chunk_size": 256,
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    body = created.json()
    corpus = Corpus.objects.get(pk=body["id"])
    assert (corpus.owner, corpus.hdc_dimensions, corpus.hdc_ngram, corpus.chunk_size) == (owner, 2048, 4, 256)
    assert body["readable_groups"] == [readers.pk] and body["visibility"] == "groups"
    assert client.get(f"/api/v1/corpora/{corpus.pk}/").json()["name"] == "Field notes"
    updated = client.patch(f"/api/v1/corpora/{corpus.pk}/", {"name": "Renamed", "late_interaction": True},
                           format="json")
    assert updated.status_code == 200 and updated.json()["name"] == "Renamed"
    corpus.refresh_from_db()
    assert corpus.late_interaction and corpus.hdc_dimensions == 2048
    # The meaning channel ranks after the exact-word channel: not with late interaction, nothing saved.
    refused = client.patch(f"/api/v1/corpora/{corpus.pk}/", {"meaning_channel": True}, format="json")
    assert refused.status_code == 400 and "meaning_channel" in error_of(refused)["details"]
    meaning = client.patch(
        f"/api/v1/corpora/{corpus.pk}/", {"meaning_channel": True, "late_interaction": False}, format="json"
    )
    assert meaning.status_code == 200 and meaning.json()["meaning_channel"] is True
    corpus.refresh_from_db()
    assert corpus.meaning_channel and not corpus.late_interaction
    assert client.delete(f"/api/v1/corpora/{corpus.pk}/").status_code == 204
    assert not Corpus.objects.filter(pk=corpus.pk).exists()


def test_corpus_input_is_validated(owner, outsider, writers):
    client = token_client(owner)
    for body, field in (({}, "name"), ({"name": "x", "visibility": "nobody"}, "visibility"),
                        ({"name": "x", "hdc_dimensions": 8}, "hdc_dimensions"),
                        ({"name": "x", "writable_groups": [writers.pk]}, "writable_groups"),
                        # Beyond any row's id (schemathesis found it: SQLite's OverflowError, a 500).
                        ({"name": "x", "readable_groups": [2**70]}, "readable_groups"),
                        ({"name": "x", "gguf_path": "/etc/passwd"}, "gguf_path")):
        response = client.post("/api/v1/corpora/", body, format="json")
        assert response.status_code == 400, body
        assert field in error_of(response)["details"], response.json()
    assert client.post("/api/v1/corpora/", {"name": "Same"}, format="json").status_code == 201
    duplicate = client.post("/api/v1/corpora/", {"name": "Same"}, format="json")
    assert duplicate.status_code == 409 and error_of(duplicate)["code"] == "name_taken"
    malformed = client.generic("POST", "/api/v1/corpora/", b'{"name": ', content_type="application/json")
    assert malformed.status_code == 400 and error_of(malformed)["code"] == "parse_error"
    not_json = client.generic("POST", "/api/v1/corpora/", b"name=x", content_type="text/plain")
    assert not_json.status_code == 415 or not_json.status_code == 400
    error_of(not_json)


@pytest.mark.slow
def test_an_embedding_model_the_engine_cannot_tokenize_is_refused_like_the_form(staff, gemma_gguf):
    from engine.model_files import default_chat_gguf_path

    client = token_client(staff)
    refused = client.post("/api/v1/corpora/", {"name": "Qwen", "gguf_path": str(default_chat_gguf_path())},
                          format="json")
    assert refused.status_code == 400
    message = error_of(refused)["details"]["gguf_path"][0]
    assert "'gpt2'" in message and "SentencePiece" in message
    accepted = client.post("/api/v1/corpora/", {"name": "Gemma", "gguf_path": str(gemma_gguf)}, format="json")
    assert accepted.status_code == 201 and Corpus.objects.get(name="Gemma").gguf_path == str(gemma_gguf)


def test_upload_validates_like_the_page(corpus, owner, settings):
    client = token_client(owner)
    url = f"/api/v1/corpora/{corpus.pk}/datasets/"
    ok = client.post(url, {"file": SimpleUploadedFile("notes.jsonl", jsonl_bytes(TEXTS))}, format="multipart")
    assert ok.status_code == 201, ok.content
    assert ok.json()["format"] == "jsonl" and ok.json()["record_count"] == len(TEXTS)
    again = client.post(
        url, {"file": SimpleUploadedFile("copy.jsonl", jsonl_bytes(TEXTS))}, format="multipart"
    )
    assert again.status_code == 409 and error_of(again)["code"] == "duplicate"
    binary = client.post(
        url, {"file": SimpleUploadedFile("x.json", b"\xff\xfe\x00garbage")}, format="multipart"
    )
    assert binary.status_code == 400 and error_of(binary)["code"] == "dataset_rejected"
    missing = client.post(url, {}, format="multipart")
    assert missing.status_code == 400 and "file" in error_of(missing)["details"]
    settings.UPLOAD_MAX_BYTES = 64
    big = client.post(url, {"file": SimpleUploadedFile("big.txt", b"word " * 100)}, format="multipart")
    assert big.status_code == 413 and error_of(big)["code"] == "too_large"
    assert Dataset.objects.filter(corpus=corpus).count() == 1


def test_dataset_enable_disable_and_delete(corpus, owner, dataset):
    client = token_client(owner)
    url = f"/api/v1/corpora/{corpus.pk}/datasets/{dataset.pk}/"
    assert client.patch(url, {"enabled": False}, format="json").json()["enabled"] is False
    dataset.refresh_from_db()
    assert not dataset.enabled
    assert client.patch(url, {"enabled": "maybe"}, format="json").status_code == 400
    assert client.delete(url).status_code == 204
    assert not Dataset.objects.filter(pk=dataset.pk).exists()
    other = Corpus.objects.create(owner=owner, name="Other")
    assert client.get(f"/api/v1/corpora/{other.pk}/datasets/{dataset.pk}/").status_code == 404


def test_build_start_status_and_cancel(corpus, owner, dataset, django_capture_on_commit_callbacks):
    client = token_client(owner)
    with django_capture_on_commit_callbacks(execute=True):
        started = client.post(f"/api/v1/corpora/{corpus.pk}/builds/")
    assert started.status_code == 202, started.content
    build_id = started.json()["id"]
    state = client.get(f"/api/v1/builds/{build_id}/").json()
    assert state["status"] == "succeeded" and state["percent"] == 100 and state["error"] == ""
    assert state["documents"] == len(TEXTS)
    listed = client.get(f"/api/v1/corpora/{corpus.pk}/builds/").json()
    assert [b["id"] for b in listed["results"]] == [build_id]
    finished = client.post(f"/api/v1/builds/{build_id}/cancel/")
    assert finished.status_code == 409 and error_of(finished)["code"] == "build_finished"
    queued = client.post(f"/api/v1/corpora/{corpus.pk}/builds/")  # on_commit not run: stays queued
    cancelled = client.post(f"/api/v1/builds/{queued.json()['id']}/cancel/")
    assert cancelled.status_code == 202 and cancelled.json()["status"] == "cancelled"


def test_build_without_datasets_is_refused(corpus, owner):
    response = token_client(owner).post(f"/api/v1/corpora/{corpus.pk}/builds/")
    assert response.status_code == 400 and "dataset" in error_of(response)["message"]


def test_search_ranks_memories_with_scores_sources_and_tokens(corpus, owner, member, built, dataset):
    client = token_client(member)
    response = client.get(
        f"/api/v1/corpora/{corpus.pk}/search/", {"q": "mitochondria produce ATP in the cell"}
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["count"] >= 1 and body["took_ms"] > 0
    assert response["Server-Timing"] == f"search;dur={body['took_ms']}"
    best = body["results"][0]
    assert "Mitochondria" in best["text"]
    assert (
        best["dataset"] == dataset.pk
        and best["dataset_name"] == "notes.jsonl"
        and best["corpus"] == corpus.pk
    )
    assert best["score"] > 0 and best["token_count"] > 0
    # The second score, when the build fuses one, says what it is: here its word channel, BM25.
    assert (best["late_kind"] is None) == (best["late_score"] is None)
    build = IndexBuild.objects.get(pk=corpus.active_build_id)
    IndexBuild.objects.filter(pk=build.pk).update(
        parameters={**build.parameters, "word_fusion": {"rule": "z:1", "evidence": {}}})
    fused = client.get(f"/api/v1/corpora/{corpus.pk}/search/", {"q": "mitochondria produce ATP"}).json()[
        "results"
    ][0]
    assert "Mitochondria" in fused["text"] and fused["late_kind"] == "bm25" and fused["late_score"] > 0
    memory = client.get(f"/api/v1/memories/{best['id']}/").json()
    assert memory["text"] == Memory.objects.get(pk=best["id"]).text and memory["active"] is True
    raw = client.get(f"/api/v1/corpora/{corpus.pk}/search/", {"q": "mitochondria ATP", "mode": "raw",
                                                              "limit": 3}).json()
    assert len(raw["results"]) == 3 and "Mitochondria" in raw["results"][0]["text"]
    assert [r["score"] for r in raw["results"]] == sorted((r["score"] for r in raw["results"]), reverse=True)
    multi = client.get("/api/v1/search/", {"q": "mitochondria ATP", "corpora": str(corpus.pk)}).json()
    assert "Mitochondria" in multi["results"][0]["text"]
    paged = client.get(
        f"/api/v1/corpora/{corpus.pk}/search/",
        {"q": "mitochondria ATP", "mode": "raw", "limit": 5, "page_size": 2},
    ).json()
    assert paged["count"] == 5 and len(paged["results"]) == 2 and paged["next"]
    # `limit` holds in pipeline mode too (issue 31.5): the best results, in the same order.
    whole = client.get(
        f"/api/v1/corpora/{corpus.pk}/search/", {"q": "cell energy and the mitochondria"}
    ).json()
    assert whole["count"] >= 2
    limited = client.get(f"/api/v1/corpora/{corpus.pk}/search/", {"q": "cell energy and the mitochondria",
                                                                  "limit": 1}).json()
    assert limited["count"] == 1 and limited["results"][0]["id"] == whole["results"][0]["id"]


def test_search_follows_datasets_and_their_switches(corpus, owner, built, dataset):
    client = token_client(owner)
    url = f"/api/v1/corpora/{corpus.pk}/search/"
    assert client.get(url, {"q": "mitochondria", "datasets": "999999"}).json()["count"] == 0
    assert client.get(url, {"q": "mitochondria", "datasets": str(dataset.pk)}).json()["count"] >= 1
    client.patch(f"/api/v1/corpora/{corpus.pk}/datasets/{dataset.pk}/", {"enabled": False}, format="json")
    assert client.get(url, {"q": "mitochondria"}).json()["count"] == 0
    for bad in (
        {"q": ""},
        {"q": "x", "mode": "fuzzy"},
        {"q": "x", "budget": 0},
        {"q": "x", "datasets": "a,b"},
    ):
        response = client.get(url, bad)
        assert response.status_code == 400, bad
        error_of(response)


def test_outsider_cannot_read_memories(built, outsider, corpus):
    memory = Memory.objects.filter(corpus=corpus).first()
    assert token_client(outsider).get(f"/api/v1/memories/{memory.pk}/").status_code == 404
    search = token_client(outsider).get("/api/v1/search/", {"q": "mitochondria"}).json()
    assert search["count"] == 0


def test_builds_list_is_paginated(corpus, owner, dataset):
    for _ in range(3):
        IndexBuild.objects.create(corpus=corpus, status="failed", error="boom")
    page = token_client(owner).get(f"/api/v1/corpora/{corpus.pk}/builds/", {"page_size": 2}).json()
    assert page["count"] == 3 and len(page["results"]) == 2 and page["results"][0]["error"] == "boom"
    beyond = token_client(owner).get(f"/api/v1/corpora/{corpus.pk}/builds/", {"page": 9})
    assert beyond.status_code == 404 and error_of(beyond)["code"] == "not_found"
