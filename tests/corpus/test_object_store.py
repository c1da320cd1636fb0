"""Several machines (issue 28): uploads and segments through a real S3-compatible store
(`rclone serve s3`, tests/plugins/s3.py). The web and the worker are told apart by their DATA_DIR
(switched between steps, tasks inline); tests/e2e/test_worker.py runs them as two processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from corpus import segment_cache, serving
from corpus.files import build_dir
from corpus.models import IndexBuild
from corpus.object_store import ObjectStoreUnavailable, file_digest
from corpus.services.builds import index_after_upload
from corpus.services.corpora import dataset_upload
from memory.services import memories_search
from tests.plugins.portal import TEXTS, build_now, jsonl_bytes, login, upload

NEW = "Quokkas are small marsupials that live on Rottnest Island off the coast of Western Australia."
Status = IndexBuild.Status


@pytest.fixture
def store(settings, monkeypatch, s3_server, s3_prefix):  # noqa: ANN201
    for name, value in s3_server.env(s3_prefix).items():
        monkeypatch.setenv(name, value)
    settings.BUILD_STORAGE_URL = f"s3://hdrag/{s3_prefix}"
    return s3_server, s3_prefix


def top_text(user, corpus, query: str) -> str | None:  # noqa: ANN001
    results = memories_search(user=user, corpus_ids=[corpus.pk], query=query, top_document=True)
    return results[0].memory.text if results else None


def on_machine(settings, name: str) -> Path:  # noqa: ANN001
    """Switch this process to another machine's DATA_DIR (what it holds on disk)."""
    settings.DATA_DIR = Path(settings.DATA_DIR).parent / name
    Path(settings.DATA_DIR).mkdir(exist_ok=True)
    return settings.DATA_DIR


def test_the_worker_reads_uploads_and_the_web_fetches_segments_from_the_store(
        settings, store, corpus, owner, member, outsider, django_capture_on_commit_callbacks):
    server, prefix = store
    on_machine(settings, "web")
    dataset = upload(corpus, owner)
    assert server.objects(prefix) == [dataset.file.name]
    on_machine(settings, "worker")  # nothing of the web's disk
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == Status.SUCCEEDED, build.error
    published = build.parameters["published"]
    assert {"manifest.json", "vocab.idx", "corpus.idx", "words.npz"} <= set(published)
    assert {f"corpora/{corpus.pk}/builds/{build.pk}/{name}" for name in published} <= set(
        server.objects(prefix)
    )
    assert build.parameters["model_name"].endswith(".gguf") and len(build.parameters["model_sha256"]) == 64
    on_machine(settings, "web")
    assert not build_dir(corpus.pk, build.pk).exists()
    assert top_text(member, corpus, TEXTS[3]) == TEXTS[3]  # fetched into the web's cache, checked, mapped
    directory = build_dir(corpus.pk, build.pk)
    assert all(file_digest(directory / name) == published[name] for name in published)
    # An outsider learns nothing through the new path.
    assert memories_search(user=outsider, corpus_ids=[corpus.pk], query=TEXTS[3]) == []
    # An append, made on the worker, is fetched by the web too.
    settings.INDEX_ON_UPLOAD = True
    with django_capture_on_commit_callbacks(execute=True):
        dataset_upload(
            corpus=corpus, user=owner, uploaded_file=SimpleUploadedFile("new.jsonl", jsonl_bytes([NEW]))
        )
    on_machine(settings, "worker")
    with django_capture_on_commit_callbacks(execute=True):
        job = index_after_upload(corpus=corpus, user=owner)
    job.refresh_from_db()
    assert job.kind == IndexBuild.Kind.APPEND and job.status == Status.SUCCEEDED, job.error
    on_machine(settings, "web")
    assert top_text(member, corpus, NEW) == NEW and top_text(member, corpus, TEXTS[3]) == TEXTS[3]


def test_an_empty_cache_a_corrupted_file_and_a_store_that_is_down(
        settings, store, monkeypatch, corpus, owner, django_capture_on_commit_callbacks):
    upload(corpus, owner)
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == Status.SUCCEEDED, build.error
    on_machine(settings, "fresh-web")  # a web process started with an empty cache serves
    assert top_text(owner, corpus, TEXTS[3]) == TEXTS[3]
    # A cached file corrupted on disk: a new process checks before mapping and fetches it again.
    index_file = build_dir(corpus.pk, build.pk) / "corpus.idx"
    data = bytearray(index_file.read_bytes())
    data[-100:] = bytes(100)
    serving.forget_build(index_file.parent)
    index_file.write_bytes(bytes(data))
    segment_cache._checked.clear()  # what a new process starts with
    assert top_text(owner, corpus, TEXTS[3]) == TEXTS[3]
    assert file_digest(index_file) == build.parameters["published"]["corpus.idx"]
    # The store down, on a machine that lacks the segment: a clear 503, never a 500; then it recovers.
    on_machine(settings, "web-while-down")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(ObjectStoreUnavailable, match="object store"):
        memories_search(user=owner, corpus_ids=[corpus.pk], query=TEXTS[3])
    client = login(owner)
    response = client.get(f"/api/v1/corpora/{corpus.pk}/search/", {"q": TEXTS[3]})
    assert response.status_code == 503 and response.json()["error"]["code"] == "store_unavailable"
    assert "object store" in response.json()["error"]["message"]
    page = client.get(reverse("memory:search"), {"q": TEXTS[3], "corpora": corpus.pk})
    assert page.status_code in (200, 503) and "object store" in page.content.decode()
    monkeypatch.setenv("AWS_ENDPOINT_URL", store[0].endpoint)
    assert top_text(owner, corpus, TEXTS[3]) == TEXTS[3]


def test_an_upload_the_store_refuses_leaves_nothing(settings, store, monkeypatch, corpus, owner):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    client = login(owner)
    response = client.post(f"/api/v1/corpora/{corpus.pk}/datasets/",
                           {"file": SimpleUploadedFile("notes.jsonl", jsonl_bytes(TEXTS))})
    assert response.status_code == 503, response.content
    assert not corpus.datasets.exists()
    datasets_dir = Path(settings.DATA_DIR) / "corpora" / str(corpus.pk) / "datasets"
    assert not datasets_dir.exists() or not any(datasets_dir.iterdir())


def test_a_build_records_its_model_by_identity_and_refuses_another(
        settings, corpus, owner, django_capture_on_commit_callbacks, tmp_path):
    upload(corpus, owner)
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    parameters = build.params
    assert serving.model_for(parameters) == Path(parameters.gguf_path)
    # Another machine keeps its models elsewhere: the name finds it in this machine's model cache.
    moved = parameters.replace(gguf_path=str(tmp_path / "elsewhere" / parameters.model_name))
    assert serving.model_for(moved).name == parameters.model_name
    # A file of that name with other content is refused, naming the model.
    impostor = tmp_path / "models" / parameters.model_name
    impostor.parent.mkdir()
    impostor.write_bytes(b"GGUF" + bytes(1000))
    settings.GGUF_PATH = str(impostor)
    with pytest.raises(Exception, match=parameters.model_name):
        serving.model_for(parameters.replace(gguf_path=str(impostor), model_sha256="0" * 64))
    assert json.dumps(build.parameters)  # the row stays plain JSON
