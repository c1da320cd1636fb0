"""A Git repository source, served over smart HTTP by `git http-backend` on loopback: synced,
changed by a commit, unreachable, behind a token."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from corpus.sources.models import Source
from corpus.sources.reading import SourceRefused
from corpus.sources.services import source_create
from tests.corpus.source_servers import git_server
from tests.corpus.sources import (
    ADDED,
    CHANGED,
    DELETED,
    DOCS,
    assert_all_still_found,
    assert_first_sync,
    assert_second_sync,
    found,
    sync,
)

# The servers listen on loopback: these sources are allowed it, as an operator would allow a network.
pytestmark = pytest.mark.usefixtures("allow_loopback")


@pytest.fixture
def server(tmp_path):
    with git_server(tmp_path / "git") as server:
        yield server


def test_git_sync_follows_commits(corpus, owner, member, server, django_capture_on_commit_callbacks):
    work = server.repository("handbook", {**DOCS, "logo.png": "not a document"})
    source = source_create(
        corpus=corpus, user=owner, name="handbook", kind="git", location=server.url("handbook"), branch="main"
    )
    sync(source, django_capture_on_commit_callbacks)
    assert_first_sync(source, member, corpus)
    first = source.cursor["commit"]
    commit = server.commit(work, CHANGED | ADDED, delete=(DELETED,))
    sync(source, django_capture_on_commit_callbacks)
    assert_second_sync(source, member, corpus)
    assert source.cursor["commit"] == commit != first
    # Each document links to itself at the commit that was read.
    document = source.documents.get(path="guide/install.md")
    assert document.url == f"{server.url('handbook').removesuffix('.git')}/blob/{commit}/guide/install.md"
    assert source.documents.get(path="faq.md").version["commit"] == first  # unchanged: not read again
    # The server goes away: the sync fails with its reason; everything stays searchable.
    server.down = True
    sync(source, django_capture_on_commit_callbacks)
    assert source.status == Source.Status.FAILED
    assert "Fetching branch 'main'" in source.error and "503" in source.error
    assert_all_still_found(member, corpus)
    server.down = False
    # A branch that does not exist: a clear reason, nothing lost.
    Source.objects.filter(pk=source.pk).update(branch="no-such-branch")
    source.refresh_from_db()
    sync(source, django_capture_on_commit_callbacks)
    assert source.status == Source.Status.FAILED and "no-such-branch" in source.error
    assert_all_still_found(member, corpus)


def test_git_token_is_sent_and_never_shown(corpus, owner, member, server, caplog, settings,
                                          django_capture_on_commit_callbacks):
    server.repository("private", DOCS, private=True)
    caplog.set_level(logging.DEBUG)
    source = source_create(
        corpus=corpus,
        user=owner,
        name="private",
        kind="git",
        location=server.url("private"),
        token="wrong-token",
    )
    sync(source, django_capture_on_commit_callbacks)
    assert source.status == Source.Status.FAILED and "Fetching branch 'main'" in source.error
    assert "wrong-token" not in source.error
    Source.objects.filter(pk=source.pk).update(token=server.token)
    source.refresh_from_db()
    sync(source, django_capture_on_commit_callbacks)
    assert_first_sync(source, member, corpus)
    assert found(member, corpus, "sextant dashboard shows the angle")
    assert "wrong-token" not in caplog.text and server.token not in caplog.text
    # The clone keeps no credential.
    clone = Path(settings.DATA_DIR) / "sources" / str(source.pk)
    assert server.token not in (clone / "clone.git" / "config").read_text()


def test_git_urls_that_are_refused(corpus, owner):
    for url, reason in [("file:///etc", "not an https URL"), ("ext::sh -c id", "not an https URL"),
                        ("http://example.com/repo.git", "only https"),
                        ("https://user:pw@example.com/repo.git", "token field")]:
        with pytest.raises(SourceRefused, match=reason):
            source_create(corpus=corpus, user=owner, name="x", kind="git", location=url)
