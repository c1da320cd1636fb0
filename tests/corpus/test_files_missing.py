"""A corpus whose rows name index files that are not on this machine (a database restored without
its files, or files restored from before the rows): its page says what is missing and offers a
rebuild from its datasets, its searches are a clear error in the page and the API (never a 500),
and the rebuild brings it back. Outsiders still see nothing. A corpus that serves but whose upload
is gone (under DATA_DIR, or from the real S3 store) is named by the page, the start checks and the
log: the document a rebuild could not bring back."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from accounts.services.tokens import api_token_create
from corpus.integrity import corpora_files_check, corpora_files_log, corpus_files_report
from corpus.object_store import object_store
from tests.plugins.portal import build_now, upload


@pytest.fixture
def broken(corpus, dataset, owner, django_capture_on_commit_callbacks):  # noqa: ANN201
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == "succeeded"
    shutil.rmtree(Path(build.build_dir))
    return corpus


def _api(user) -> APIClient:  # noqa: ANN001
    _, secret = api_token_create(user=user, name="tests")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def test_the_corpus_page_names_what_is_missing_and_offers_a_rebuild(broken, owner, member, client_for):
    page = client_for(owner).get(f"/corpora/{broken.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="files-missing"' in html and "build #1: its index files are missing" in html
    assert 'id="rebuild-button"' in html
    reader_page = client_for(member).get(f"/corpora/{broken.pk}/").content.decode()
    assert 'id="files-missing"' in reader_page and 'id="rebuild-button"' not in reader_page  # may not write


def test_a_search_of_it_is_a_clear_error_not_a_500(broken, owner, outsider, client_for):
    page = client_for(owner).get("/memory/search/", {"q": "photosynthesis", "corpora": broken.pk})
    assert (
        page.status_code == 200
        and "index files of build #1 of this corpus are missing" in page.content.decode()
    )
    api = _api(owner).get("/api/v1/search/", {"q": "photosynthesis", "corpora": str(broken.pk)})
    assert api.status_code == 503 and api.json()["error"]["code"] == "index_files_missing"
    assert client_for(outsider).get(f"/corpora/{broken.pk}/").status_code == 404
    assert _api(outsider).get("/api/v1/search/", {"q": "photosynthesis"}).json()["count"] == 0


def test_it_is_logged_at_start(broken, caplog):
    reports = corpora_files_log()
    assert [r.corpus_id for r in reports] == [broken.pk]
    assert "cannot serve" in caplog.text and broken.name in caplog.text


def test_the_rebuild_from_its_datasets_brings_it_back(
    broken, owner, client_for, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(owner).post(f"/corpora/{broken.pk}/builds/")
    assert response.status_code == 302
    broken.refresh_from_db()
    assert broken.active_build.number == 2 and not corpus_files_report(corpus=broken).broken
    page = client_for(owner).get(f"/corpora/{broken.pk}/").content.decode()
    assert 'id="files-missing"' not in page
    found = _api(owner).get(
        "/api/v1/search/", {"q": "photosynthesis light energy", "corpora": str(broken.pk)}
    )
    assert found.status_code == 200 and "Photosynthesis" in found.json()["results"][0]["text"]


def test_missing_uploads_say_a_rebuild_cannot_help(broken, dataset, owner, client_for, settings):
    (Path(settings.DATA_DIR) / dataset.file.name).unlink()
    report = corpus_files_report(corpus=broken)
    assert report.datasets == [dataset.name] and not report.can_rebuild
    html = client_for(owner).get(f"/corpora/{broken.pk}/").content.decode()
    assert "upload it again to rebuild" in html and 'id="rebuild-button"' not in html


def _says_the_upload_is_lost(corpus, owner, member, client_for, caplog, name: str, place: str) -> None:  # noqa: ANN001
    """The report, the page (for a reader too), the start check and the log name the document."""
    report = corpus_files_report(corpus=corpus)
    assert not report.broken and report.datasets == [name] and report.uploads_place == place
    for user in (owner, member):
        html = client_for(user).get(f"/corpora/{corpus.pk}/").content.decode()
        assert 'id="uploads-missing"' in html and 'id="files-missing"' not in html
        assert "This document cannot be rebuilt" in html and f"<li>{name}</li>" in html and place in html
    [warning] = corpora_files_check(databases=["default"])
    assert (
        warning.id == "hdrag.W011" and repr(name) in warning.msg and "cannot be rebuilt whole" in warning.msg
    )
    assert [r.corpus_id for r in corpora_files_log()] == [corpus.pk] and repr(name) in caplog.text


def test_a_serving_corpus_whose_upload_is_gone_names_it(corpus, owner, member, client_for, settings, caplog,
                                                         django_capture_on_commit_callbacks):
    kept, lost = (
        upload(corpus, owner),
        upload(corpus, owner, ["Glaciers carve valleys."], name="glaciers.jsonl"),
    )
    assert build_now(corpus, owner, django_capture_on_commit_callbacks).status == "succeeded"
    assert (
        not corpus_files_report(corpus=corpus).has_problems
        and corpora_files_check(databases=["default"]) == []
    )
    (Path(settings.DATA_DIR) / lost.file.name).unlink()
    _says_the_upload_is_lost(corpus, owner, member, client_for, caplog, lost.name, "on this machine")
    assert kept.name not in corpus_files_report(corpus=corpus).datasets


@pytest.mark.service
def test_an_upload_gone_from_the_object_store_is_named(corpus, owner, member, client_for, settings, caplog,
                                                       monkeypatch, s3_server, s3_prefix,
                                                       django_capture_on_commit_callbacks):
    for name, value in s3_server.env(s3_prefix).items():
        monkeypatch.setenv(name, value)
    settings.BUILD_STORAGE_URL = f"s3://hdrag/{s3_prefix}"
    upload(corpus, owner)
    lost = upload(corpus, owner, ["Glaciers carve valleys."], name="glaciers.jsonl")
    assert build_now(corpus, owner, django_capture_on_commit_callbacks).status == "succeeded"
    assert not corpus_files_report(corpus=corpus).has_problems
    object_store().delete(lost.file.name)  # this machine's copy stays: the store is what every build reads
    assert (Path(settings.DATA_DIR) / lost.file.name).is_file()
    _says_the_upload_is_lost(corpus, owner, member, client_for, caplog, lost.name, "in the object store")
