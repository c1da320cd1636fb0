"""Uploads replace too: a file named like a dataset of the corpus replaces it (the page always,
the API with replace=true), the old text searchable until the new one is, never both."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from corpus.models import Dataset
from tests.corpus.sources import found
from tests.plugins.portal import TEXTS, jsonl_bytes, login

NEW = ["The pangolin ledger records every shipment that leaves the northern warehouse."]


@pytest.fixture(autouse=True)
def index_on_upload(settings):
    settings.INDEX_ON_UPLOAD = True


def page_upload(client, corpus, texts, capture):  # noqa: ANN001
    with capture(execute=True):
        response = client.post(reverse("corpus:dataset_add", args=[corpus.pk]),
                               {"file": SimpleUploadedFile("notes.jsonl", jsonl_bytes(texts))},
                               HTTP_ACCEPT="application/json")
    assert response.status_code == 200, response.content
    corpus.refresh_from_db()


def test_the_page_replaces_a_dataset_of_the_same_name(
    corpus, owner, member, django_capture_on_commit_callbacks
):
    client = login(owner)
    assert "replaces it" in client.get(reverse("corpus:detail", args=[corpus.pk])).content.decode()
    page_upload(client, corpus, TEXTS, django_capture_on_commit_callbacks)
    first = Dataset.objects.get(corpus=corpus)
    assert found(member, corpus, "storming of the Bastille")
    page_upload(client, corpus, [*TEXTS[:3], *NEW], django_capture_on_commit_callbacks)
    assert not Dataset.objects.filter(pk=first.pk).exists()
    assert list(corpus.datasets.values_list("name", flat=True)) == ["notes.jsonl"]
    assert found(member, corpus, "pangolin ledger records every shipment")
    assert not found(member, corpus, "storming of the Bastille")
    assert found(member, corpus, "binary search halves the remaining interval")


def test_the_api_replaces_only_when_asked(corpus, owner, member, django_capture_on_commit_callbacks):
    client = login(owner)
    url = f"/api/v1/corpora/{corpus.pk}/datasets/"
    with django_capture_on_commit_callbacks(execute=True):
        assert (
            client.post(url, {"file": SimpleUploadedFile("notes.jsonl", jsonl_bytes(TEXTS))}).status_code
            == 201
        )
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(url, {"file": SimpleUploadedFile("notes.jsonl", jsonl_bytes(TEXTS[:2])),
                                     "replace": "true"})
    assert response.status_code == 201, response.content
    assert corpus.datasets.count() == 1
    assert not found(member, corpus, "storming of the Bastille")
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(url, {"file": SimpleUploadedFile("notes.jsonl", jsonl_bytes(NEW))})
    assert response.status_code == 201 and corpus.datasets.count() == 2
    assert found(member, corpus, "pangolin ledger") and found(member, corpus, "quick brown fox jumps")


def test_a_replacement_waits_for_its_job(corpus, owner, member, settings, django_capture_on_commit_callbacks):
    """Until the job indexing the new version activates, the old one serves; a second new version
    before then replaces the one that serves, and the waiting one goes."""
    from corpus.services.corpora import dataset_upload
    from tests.plugins.portal import build_now

    old = dataset_upload(
        corpus=corpus, user=owner, uploaded_file=SimpleUploadedFile("n.jsonl", jsonl_bytes(TEXTS))
    )
    build_now(corpus, owner, django_capture_on_commit_callbacks)
    waiting = dataset_upload(corpus=corpus, user=owner, replace=True,
                             uploaded_file=SimpleUploadedFile("n.jsonl", jsonl_bytes(NEW)))
    assert waiting.replaces_id == old.pk
    assert found(member, corpus, "storming of the Bastille")
    latest = dataset_upload(
        corpus=corpus,
        user=owner,
        replace=True,
        uploaded_file=SimpleUploadedFile("n.jsonl", jsonl_bytes([*TEXTS[:3], *TEXTS[4:]])),
    )
    assert latest.replaces_id == old.pk and not Dataset.objects.filter(pk=waiting.pk).exists()
    assert found(member, corpus, "storming of the Bastille")
    # A full build (a merge) leaves the replaced version out and deletes it when it activates.
    build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert list(corpus.datasets.values_list("pk", flat=True)) == [latest.pk]
    assert found(member, corpus, "quick brown fox jumps") and not found(
        member, corpus, "storming of the Bastille"
    )
