"""Bad input is a clear 400 (or a skipped record), never a 500, and leaves nothing behind."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from chat.services import conversation_create
from corpus.models import IndexBuild
from engine.datasets import iter_dataset
from tests.plugins.portal import TEXTS, build_now, jsonl_bytes, login, stored_files

DEEP = 100_000


def _post_file(client, corpus, name: str, content: bytes):  # noqa: ANN001, ANN202
    return client.post(
        reverse("corpus:dataset_add", args=[corpus.pk]), {"file": SimpleUploadedFile(name, content)}
    )


@pytest.mark.parametrize("length", [239, 247, 255])
def test_a_long_file_name_is_stored_under_a_short_one(corpus, owner, data_dir, length):
    name = "n" * (length - len(".jsonl")) + ".jsonl"
    response = _post_file(login(owner), corpus, name, jsonl_bytes(TEXTS))
    assert response.status_code == 302, response.content.decode()[:500]
    dataset = corpus.datasets.get()
    on_disk = dataset.file.path.rsplit("/", 1)[1]
    assert dataset.name == name and len(on_disk.encode()) <= 255 and on_disk.endswith(".jsonl")
    assert dataset.record_count == len(TEXTS)


def test_an_absurd_extension_is_refused_before_spooling(corpus, owner, data_dir):
    name = "notes." + "j" * 250
    response = _post_file(login(owner), corpus, name, jsonl_bytes(TEXTS))
    assert response.status_code == 400
    assert "unsupported file type" in response.content.decode()
    assert not corpus.datasets.exists() and stored_files(data_dir) == []


def test_deeply_nested_json_is_refused_with_a_message(corpus, owner, data_dir):
    content = b"[" * DEEP + b"]" * DEEP
    response = _post_file(login(owner), corpus, "deep.json", content)
    assert response.status_code == 400
    assert "nested too deeply" in response.content.decode()
    assert not corpus.datasets.exists() and stored_files(data_dir) == []


def test_a_deep_list_item_is_refused_too(corpus, owner, data_dir):
    content = b'[{"text": "fine"}, ' + b"[" * DEEP + b"]" * DEEP + b"]"
    response = _post_file(login(owner), corpus, "deep-item.json", content)
    assert response.status_code == 400 and "nested too deeply" in response.content.decode()


def test_a_deep_jsonl_record_after_the_checked_ones_is_skipped_at_build(corpus, owner, data_dir,
                                                                         django_capture_on_commit_callbacks):
    """The upload check reads the first 1,000 records; a bad one after them must not fail every build."""
    lines = [json.dumps({"text": f"{TEXTS[i % len(TEXTS)]} number {i}"}) for i in range(1_100)]
    lines.append("[" * DEEP + "]" * DEEP)
    lines.append(json.dumps({"text": "the record after the deep one is kept"}))
    response = _post_file(login(owner), corpus, "late.jsonl", ("\n".join(lines) + "\n").encode())
    assert response.status_code == 302, response.content.decode()[:500]
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == IndexBuild.Status.SUCCEEDED, build.error
    assert build.documents == 1_101
    errors: list = []
    texts = [doc["text"] for doc in iter_dataset(corpus.datasets.get().file.path, errors=errors)]
    assert texts[-1] == "the record after the deep one is kept"
    assert [(e.number, e.message) for e in errors] == [(1_101, "invalid JSON: nested too deeply")]


def test_a_corpus_id_beyond_64_bits_is_a_clear_message(owner, corpus):
    conversation = conversation_create(user=owner)
    client = login(owner)
    response = client.post(reverse("chat:settings", args=[conversation.pk]),
                           {"corpora": ["99999999999999999999999"], "token_budget": "512"}, follow=True)
    assert response.status_code == 200
    assert "Unknown or unreadable corpora: [99999999999999999999999]" in response.content.decode()
    assert list(conversation.corpora.all()) == []


def test_ids_beyond_64_bits_in_urls_are_404s(owner, corpus):
    client = login(owner)
    huge = 99999999999999999999999
    for url in (f"/chat/{huge}/", f"/corpora/{huge}/", f"/corpora/datasets/{huge}/toggle/",
                f"/memory/corpora/{huge}/stats/"):
        response = client.post(url) if "toggle" in url else client.get(url)
        assert response.status_code == 404, url
