"""The object store down when a build reaches its publish phase (the real rclone S3 server of the
session, the store's address pointed at a port where nothing listens): the build fails with the
store's error on its row and page, nothing of it stays on disk or in the store, the previous build
keeps serving, and once the store is back the next build publishes and serves."""

from __future__ import annotations

from corpus.files import build_dir
from tests.corpus.test_object_store import store, top_text  # noqa: F401 - store is a fixture
from tests.plugins.portal import TEXTS, build_now, login, upload


def test_a_build_that_cannot_publish_fails_and_the_previous_one_serves(
        store, monkeypatch, corpus, owner, django_capture_on_commit_callbacks):  # noqa: F811
    server, prefix = store
    upload(corpus, owner)
    first = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert first.status == "succeeded", first.error

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # the store goes away
    second = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert second.status == "failed" and "object store" in second.error and second.phase == "publish"
    corpus.refresh_from_db()
    assert corpus.active_build_id == first.pk
    assert not build_dir(corpus.pk, second.pk).exists()
    assert "object store" in login(owner).get(f"/corpora/{corpus.pk}/").content.decode()
    assert top_text(owner, corpus, TEXTS[3]) == TEXTS[3]  # from this machine's copy of the first build

    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)  # back
    assert not [key for key in server.objects(prefix) if f"/builds/{second.pk}/" in key]
    third = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert third.status == "succeeded", third.error
    assert third.parameters["published"]
    corpus.refresh_from_db()
    assert corpus.active_build_id == third.pk and top_text(owner, corpus, TEXTS[3]) == TEXTS[3]
