"""Appends (issue 27, docs/segments.md): an upload is searchable without a click, a deleted dataset
leaves search at once, segments merge past their limit, a failed append changes nothing, and an
outsider sees no segment. Tasks run inline (the real worker: tests/e2e/test_worker.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from core.errors import ApplicationError
from corpus.files import build_dir
from corpus.models import Corpus, IndexBuild, Memory
from corpus.services.appends import append_start, covered_dataset_ids, merge_due, pending_datasets
from corpus.services.corpora import dataset_delete
from corpus.tasks import run_build
from engine.segments import segment_info
from memory.services import memories_search
from tests.plugins.portal import TEXTS, build_now, jsonl_bytes, login, upload

NEW = [
    "Quokkas are small marsupials that live on Rottnest Island off the coast of Western Australia.",
    "Zymurgy is the branch of applied chemistry that studies fermentation in brewing and winemaking.",
]
MORE = [
    "The axolotl is a salamander that keeps its larval gills for its whole life in Mexican lakes.",
    "A sextant measures the angle between a celestial body and the horizon for navigation at sea.",
]
Kind, Status = IndexBuild.Kind, IndexBuild.Status


@pytest.fixture(autouse=True)
def index_on_upload(settings):
    settings.INDEX_ON_UPLOAD = True


def page_upload(client, corpus: Corpus, texts: list[str], name: str, capture):  # noqa: ANN001
    """Upload through the corpus page as its script does (JSON), running queued jobs inline."""
    with capture(execute=True):
        response = client.post(
            reverse("corpus:dataset_add", args=[corpus.pk]),
            {"file": SimpleUploadedFile(name, jsonl_bytes(texts))},
            HTTP_ACCEPT="application/json",
        )
    corpus.refresh_from_db()
    return response


def top_text(user, corpus: Corpus, query: str) -> str | None:  # noqa: ANN001
    results = memories_search(user=user, corpus_ids=[corpus.pk], query=query, top_document=True)
    return results[0].memory.text if results else None


def test_an_upload_is_searchable_without_a_click(corpus, owner, member, django_capture_on_commit_callbacks):
    client = login(owner)
    first = page_upload(client, corpus, TEXTS, "notes.jsonl", django_capture_on_commit_callbacks)
    assert first.status_code == 200 and "Building the index" in first.json()["indexing"]
    base = corpus.active_build
    assert base is not None and base.kind == Kind.BUILD and base.status == Status.SUCCEEDED
    assert corpus.active_appends == []
    second = page_upload(client, corpus, NEW, "new.jsonl", django_capture_on_commit_callbacks)
    assert "searchable in a few seconds" in second.json()["indexing"]
    append = IndexBuild.objects.get(corpus=corpus, kind=Kind.APPEND)
    assert append.status == Status.SUCCEEDED, append.error
    assert corpus.active_build_id == base.pk and corpus.active_appends == [append.pk]
    assert corpus.serving_build_ids == [base.pk, append.pk]
    # Its rows are numbered after the build's, and its files are a segment of the state.
    rows = list(Memory.objects.filter(build=append).order_by("hdv_idx").values_list("hdv_idx", "text"))
    assert rows == [(len(TEXTS) + i, text) for i, text in enumerate(NEW)]
    assert segment_info(append.parameters)["row_offset"] == len(TEXTS)
    assert append.parameters["segment"]["new_tokens"] > 0  # "Quokkas", "Zymurgy"
    # Searchable by anyone who may read the corpus, the old memories still found.
    for text in NEW:
        assert top_text(member, corpus, text) == text
    assert top_text(member, corpus, "storming of the Bastille prison in Paris") == TEXTS[3]
    assert not pending_datasets(corpus) and len(covered_dataset_ids(corpus)) == 2
    # The page lists the segments and counts the memories of both.
    page = client.get(reverse("corpus:detail", args=[corpus.pk])).content.decode()
    assert 'id="segments"' in page and f"{len(TEXTS) + len(NEW)} memories" in page


def test_deleting_a_dataset_hides_its_rows_at_once(corpus, owner, django_capture_on_commit_callbacks):
    client = login(owner)
    page_upload(client, corpus, TEXTS, "notes.jsonl", django_capture_on_commit_callbacks)
    page_upload(client, corpus, NEW, "new.jsonl", django_capture_on_commit_callbacks)
    assert top_text(owner, corpus, NEW[0]) == NEW[0]
    appended = corpus.datasets.get(name="new.jsonl")
    dataset_delete(dataset=appended)
    corpus.refresh_from_db()
    assert corpus.active_appends  # no rebuild happened: the rows are hidden, not gone
    found = memories_search(user=owner, corpus_ids=[corpus.pk], query=NEW[0])
    assert all(result.memory.text not in NEW for result in found)


def test_the_api_upload_answers_with_the_job_that_makes_it_searchable(
        corpus, owner, outsider, django_capture_on_commit_callbacks):
    client = login(owner)
    page_upload(client, corpus, TEXTS, "notes.jsonl", django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/api/v1/corpora/{corpus.pk}/datasets/",
                               {"file": SimpleUploadedFile("new.jsonl", jsonl_bytes(NEW))})
    assert response.status_code == 201, response.content
    job = response.json()["index_job"]
    assert job["kind"] == "append" and job["status"] == "queued" and job["searchable"] is False
    state = client.get(f"/api/v1/builds/{job['id']}/").json()
    assert state["status"] == "succeeded" and state["searchable"] is True and state["documents"] == len(NEW)
    detail = client.get(f"/api/v1/corpora/{corpus.pk}/").json()
    assert detail["active_appends"] == [job["id"]] and detail["append_on_upload"] is True
    # An outsider sees neither the segment nor the corpus.
    other = login(outsider)
    assert other.get(f"/api/v1/builds/{job['id']}/").status_code == 404
    assert other.get(f"/api/v1/corpora/{corpus.pk}/").status_code == 404
    assert other.get(reverse("corpus:detail", args=[corpus.pk])).status_code == 404
    assert other.get(reverse("corpus:build_status", args=[corpus.pk])).status_code == 404
    assert memories_search(user=outsider, corpus_ids=[corpus.pk], query=NEW[0]) == []


def test_a_corpus_that_does_not_index_uploads_waits_for_a_build(
    corpus, owner, django_capture_on_commit_callbacks
):
    corpus.append_on_upload = False
    corpus.save()
    response = page_upload(login(owner), corpus, TEXTS, "notes.jsonl", django_capture_on_commit_callbacks)
    assert "Build the index" in response.json()["indexing"]
    assert not corpus.builds.exists() and corpus.active_build_id is None


def test_segments_past_the_limit_are_merged_into_one_build(
        settings, corpus, owner, django_capture_on_commit_callbacks):
    settings.SEGMENT_LIMIT = 2
    client = login(owner)
    page_upload(client, corpus, TEXTS, "notes.jsonl", django_capture_on_commit_callbacks)
    page_upload(client, corpus, NEW, "new.jsonl", django_capture_on_commit_callbacks)
    assert len(corpus.serving_build_ids) == 2 and not merge_due(corpus)
    page_upload(client, corpus, MORE, "more.jsonl", django_capture_on_commit_callbacks)
    # The second append made three segments: a full build (the merge) replaced the state.
    assert corpus.active_appends == []
    merged = corpus.active_build
    assert merged.kind == Kind.BUILD and merged.documents == len(TEXTS) + len(NEW) + len(MORE)
    assert merged.created_by is None  # queued by the worker, not by a person
    assert sorted(merged.parameters["dataset_ids"]) == sorted(corpus.datasets.values_list("pk", flat=True))
    for text in NEW + MORE + TEXTS[:2]:
        assert top_text(owner, corpus, text) == text


def test_appends_past_the_drift_share_are_merged(settings, corpus, owner, django_capture_on_commit_callbacks):
    settings.SEGMENT_MERGE_PERCENT = 20  # 2 appended memories on 8 is 25 %
    client = login(owner)
    page_upload(client, corpus, TEXTS, "notes.jsonl", django_capture_on_commit_callbacks)
    page_upload(client, corpus, NEW, "new.jsonl", django_capture_on_commit_callbacks)
    assert corpus.active_appends == [] and corpus.active_build.documents == len(TEXTS) + len(NEW)


def test_a_failed_append_leaves_the_state_serving_and_nothing_behind(
        corpus, owner, django_capture_on_commit_callbacks):
    client = login(owner)
    page_upload(client, corpus, TEXTS, "notes.jsonl", django_capture_on_commit_callbacks)
    state = list(corpus.serving_build_ids)
    dataset = upload(corpus, owner, NEW, name="new.jsonl")  # a service upload: no job queued
    Path(dataset.file.path).unlink()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        job = append_start(corpus=corpus, user=owner)
    assert job is not None and callbacks  # the task is queued on commit; run here by hand
    assert run_build(job.pk) == Status.FAILED
    job.refresh_from_db()
    corpus.refresh_from_db()
    assert "is missing" in job.error and corpus.serving_build_ids == state
    assert not Memory.objects.filter(build=job).exists()
    assert not build_dir(corpus.pk, job.pk).exists()
    assert top_text(owner, corpus, TEXTS[3]) == TEXTS[3]


def test_an_append_needs_an_active_build_without_late_interaction(
        corpus, owner, django_capture_on_commit_callbacks):
    upload(corpus, owner)
    with pytest.raises(ApplicationError, match="full build"):
        append_start(corpus=corpus, user=owner)  # no active build yet
    build_now(corpus, owner, django_capture_on_commit_callbacks)
    upload(corpus, owner, NEW, name="new.jsonl")
    corpus.late_interaction = True  # its builds fill per-build token vectors: a full build is needed
    corpus.save()
    with pytest.raises(ApplicationError, match="full build"):
        append_start(corpus=corpus, user=owner)


def test_an_append_skips_documents_the_state_already_holds(corpus, owner, django_capture_on_commit_callbacks):
    client = login(owner)
    page_upload(client, corpus, TEXTS, "notes.jsonl", django_capture_on_commit_callbacks)
    page_upload(client, corpus, [TEXTS[3], *NEW], "overlap.jsonl", django_capture_on_commit_callbacks)
    append = IndexBuild.objects.get(corpus=corpus, kind=Kind.APPEND)
    assert append.status == Status.SUCCEEDED, append.error
    # As a full build of both files would: the Bastille text once, from the first file.
    assert append.documents == len(NEW) and append.duplicates == 1
    assert Memory.objects.filter(corpus=corpus, text=TEXTS[3]).count() == 1
