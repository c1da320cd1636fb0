"""A folder source under SOURCE_ROOTS: synced, changed, emptied, moved away; nothing outside the
roots is read, symlinks included."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from corpus.sources.models import Source
from corpus.sources.reading import SourceRefused
from corpus.sources.services import source_create
from tests.corpus.sources import (
    ADDED,
    CHANGED,
    DELETED,
    DOCS,
    KEPT_PHRASE,
    assert_all_still_found,
    assert_first_sync,
    assert_second_sync,
    found,
    sync,
)


@pytest.fixture
def roots(settings, tmp_path) -> Path:
    root = tmp_path / "shared"
    root.mkdir()
    settings.SOURCE_ROOTS = [str(root)]
    return root


def write(folder: Path, files: dict[str, str]) -> None:
    for path, text in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text)


@pytest.fixture
def folder(roots) -> Path:
    folder = roots / "team-docs"
    write(folder, DOCS)
    (folder / "image.png").write_bytes(b"\x89PNG not a document")
    return folder


def test_folder_sync_follows_changes(corpus, owner, member, folder, django_capture_on_commit_callbacks):
    source = source_create(corpus=corpus, user=owner, name="docs", kind="folder", location=str(folder))
    sync(source, django_capture_on_commit_callbacks)
    assert_first_sync(source, member, corpus)
    write(folder, CHANGED | ADDED)
    (folder / DELETED).unlink()
    sync(source, django_capture_on_commit_callbacks)
    assert_second_sync(source, member, corpus)
    # Nothing changed: nothing read, nothing queued.
    jobs = corpus.builds.count()
    sync(source, django_capture_on_commit_callbacks)
    assert (source.added, source.changed, source.removed, source.status) == (0, 0, 0, "succeeded")
    assert corpus.builds.count() == jobs
    assert source.documents.get(path="guide/install.md").url.startswith("file://")


def test_folder_emptied_or_gone(corpus, owner, member, folder, django_capture_on_commit_callbacks):
    source = source_create(corpus=corpus, user=owner, name="docs", kind="folder", location=str(folder))
    sync(source, django_capture_on_commit_callbacks)
    write(folder, CHANGED | ADDED)
    (folder / DELETED).unlink()
    sync(source, django_capture_on_commit_callbacks)
    # A moved mount point: the sync fails with its reason; every document stays.
    moved = folder.with_name("moved")
    folder.rename(moved)
    sync(source, django_capture_on_commit_callbacks)
    assert source.status == Source.Status.FAILED and "does not exist" in source.error
    assert_all_still_found(member, corpus)
    # An emptied folder: the sync stops to ask; nothing removed until the owner confirms.
    moved.rename(folder)
    for path in folder.rglob("*.md"):
        path.unlink()
    sync(source, django_capture_on_commit_callbacks)
    assert source.status == Source.Status.CONFIRM and "would remove 4 of the source's 4" in source.error
    assert source.documents.count() == 4
    assert_all_still_found(member, corpus)
    sync(source, django_capture_on_commit_callbacks, confirm=True)
    assert source.status == Source.Status.SUCCEEDED and source.removed == 4
    assert not found(member, corpus, KEPT_PHRASE)


def test_folder_outside_the_roots_is_refused(
    corpus, owner, roots, tmp_path, django_capture_on_commit_callbacks
):
    outside = tmp_path / "private"
    write(outside, {"secret.md": "The vault combination is seven seven three one.\n"})
    with pytest.raises(SourceRefused, match="outside the folders"):
        source_create(corpus=corpus, user=owner, name="escape", kind="folder", location=str(outside))
    with pytest.raises(SourceRefused, match="outside the folders"):
        source_create(
            corpus=corpus, user=owner, name="dots", kind="folder", location=str(roots / ".." / "private")
        )
    (roots / "link").symlink_to(outside)
    with pytest.raises(SourceRefused, match="outside the folders"):
        source_create(corpus=corpus, user=owner, name="link", kind="folder", location=str(roots / "link"))
    # A symlink inside the folder that leads out is named and skipped; the rest is synced.
    folder = roots / "docs"
    write(folder, {"readme.md": "The heron gateway answers on port nine thousand.\n"})
    (folder / "secret.md").symlink_to(outside / "secret.md")
    source = source_create(corpus=corpus, user=owner, name="docs", kind="folder", location=str(folder))
    sync(source, django_capture_on_commit_callbacks)
    assert source.status == Source.Status.SUCCEEDED and source.added == 1
    assert source.failures == [
        {"name": "secret.md", "reason": "a symlink that leads outside the source's folder"}
    ]
    assert not corpus.datasets.filter(name__contains="secret").exists()


def test_a_folder_needs_source_roots(corpus, owner, settings, tmp_path):
    settings.SOURCE_ROOTS = []
    with pytest.raises(SourceRefused, match="no SOURCE_ROOTS"):
        source_create(corpus=corpus, user=owner, name="docs", kind="folder", location=str(tmp_path))


def test_an_unreadable_document_is_named_and_skipped(corpus, owner, member, folder,
                                                     django_capture_on_commit_callbacks):
    (folder / "broken.json").write_text("{not json")
    source = source_create(corpus=corpus, user=owner, name="docs", kind="folder", location=str(folder))
    sync(source, django_capture_on_commit_callbacks)
    assert source.status == Source.Status.SUCCEEDED and source.added == len(DOCS)
    # The fixture's image.png is damaged: named too, now that images are read (OCR).
    assert [f["name"] for f in source.failures] == ["broken.json", "image.png"]
    assert found(member, corpus, KEPT_PHRASE)
    shutil.rmtree(folder)


def test_through_the_api_and_the_pages(corpus, owner, member, folder, django_capture_on_commit_callbacks):
    from django.urls import reverse

    from corpus.models import Memory
    from tests.plugins.portal import login

    client = login(owner)
    created = client.post(f"/api/v1/corpora/{corpus.pk}/sources/", {
        "name": "docs", "kind": "folder", "location": str(folder), "include": "guide/*\nfaq.md"},
        content_type="application/json")
    assert created.status_code == 201, created.content
    source_id = created.json()["id"]
    with django_capture_on_commit_callbacks(execute=True):
        queued = client.post(f"/api/v1/sources/{source_id}/sync/", {}, content_type="application/json")
    assert queued.status_code == 202 and queued.json()["status"] == "queued"
    state = client.get(f"/api/v1/sources/{source_id}/").json()
    assert (state["status"], state["added"], state["documents"]) == ("succeeded", 3, 3), state
    assert found(member, corpus, KEPT_PHRASE) and not found(member, corpus, "axolotl service")  # not included
    # The page lists it with its last sync; a sync from its button; each memory links to its document.
    page = client.get(reverse("corpus:detail", args=[corpus.pk])).content.decode()
    assert 'id="sources"' in page and "Synced" in page and str(folder) in page
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(reverse("corpus:source_sync", args=[source_id])).status_code == 302
    assert client.get(f"/api/v1/sources/{source_id}/").json()["sync_finished"] != state["sync_finished"]
    memory = Memory.objects.filter(text__contains="sextant dashboard").first()
    detail = login(member).get(reverse("memory:detail", args=[memory.pk])).content.decode()
    assert 'id="at-source"' in detail and f"file://{folder}/faq.md" in detail
    # Two syncs at once: the second is refused while the first is queued.
    Source.objects.filter(pk=source_id).update(status=Source.Status.QUEUED)
    refused = client.post(f"/api/v1/sources/{source_id}/sync/", {}, content_type="application/json")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "sync_active"


def test_the_schedule_queues_sources_whose_interval_passed(
    corpus, owner, folder, django_capture_on_commit_callbacks
):
    from datetime import timedelta

    from django.utils import timezone

    from corpus.tasks import sync_sources_due

    due = source_create(corpus=corpus, user=owner, name="due", kind="folder", location=str(folder),
                        interval_minutes=30)
    recent = source_create(
        corpus=corpus,
        user=owner,
        name="recent",
        kind="folder",
        location=str(folder / "guide"),
        interval_minutes=30,
    )
    manual = source_create(corpus=corpus, user=owner, name="manual", kind="folder", location=str(folder))
    Source.objects.filter(pk=due.pk).update(sync_started=timezone.now() - timedelta(minutes=31))
    Source.objects.filter(pk=recent.pk).update(sync_started=timezone.now() - timedelta(minutes=29))
    with django_capture_on_commit_callbacks(execute=True):
        assert sync_sources_due() == 1
    statuses = dict(Source.objects.values_list("name", "status"))
    assert statuses == {"due": "succeeded", "recent": "idle", "manual": "idle"}
    assert manual.documents.count() == 0 and Source.objects.get(pk=due.pk).documents.count() == len(DOCS)


def test_a_sync_waits_for_the_corpus_job(corpus, owner, member, folder, django_capture_on_commit_callbacks):
    """A build queued or running holds the corpus's job lock: the sync stores its documents and
    queues no job of its own; the build takes them, and the old versions leave when it activates."""
    from corpus.models import IndexBuild
    from corpus.services.builds import build_start
    from corpus.tasks import run_build
    from tests.corpus.sources import NEW_PHRASES, OLD_PHRASES

    source = source_create(corpus=corpus, user=owner, name="docs", kind="folder", location=str(folder))
    sync(source, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=False):
        build = build_start(corpus=corpus, user=owner)  # queued, its task not run yet
    write(folder, CHANGED)
    sync(source, django_capture_on_commit_callbacks)
    assert source.status == Source.Status.SUCCEEDED and source.changed == 2
    assert list(IndexBuild.objects.filter(corpus=corpus, status__in=IndexBuild.ACTIVE_STATUSES)) == [build]
    assert found(member, corpus, OLD_PHRASES[0]) and not found(member, corpus, NEW_PHRASES[0])
    with django_capture_on_commit_callbacks(execute=True):
        run_build(build.pk)
    build.refresh_from_db()
    assert build.status == IndexBuild.Status.SUCCEEDED, build.error
    assert found(member, corpus, NEW_PHRASES[0]) and found(member, corpus, NEW_PHRASES[1])
    assert not found(member, corpus, OLD_PHRASES[0]) and not found(member, corpus, OLD_PHRASES[1])
    assert corpus.datasets.count() == len(DOCS)
