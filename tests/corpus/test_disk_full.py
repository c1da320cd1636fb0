"""The disk filling up during a build, for real: DATA_DIR is a small tmpfs (mounted by the test,
which needs root; it fails, never skips, where it cannot mount). The first build fits, the second
runs out of space: it fails with "No space left on device" on the corpus page, its partial files
are removed, and the first build keeps serving."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from corpus.models import Corpus
from corpus.services.corpora import corpus_create
from memory.services import memories_search
from tests.plugins.portal import SMALL_HDC, TEXTS, build_now, upload

# One build of the small corpus takes about 2.7 MB (most of it the vocabulary), so a second does not fit.
SIZE = "4m"


@pytest.fixture
def small_disk(settings, tmp_path) -> Path:
    mount = tmp_path / "small-disk"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mount)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.fail(
            f"cannot mount a {SIZE} tmpfs as DATA_DIR (root is needed): {result.stderr}", pytrace=False
        )
    settings.DATA_DIR = mount
    settings.FILE_UPLOAD_TEMP_DIR = str(mount / "tmp")
    (mount / "tmp").mkdir()
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_build_that_fills_the_disk_fails_cleanly_and_the_old_index_serves(
        small_disk, owner: User, client_for, django_capture_on_commit_callbacks):
    corpus = corpus_create(owner=owner, name="Small disk", visibility=Corpus.Visibility.PRIVATE, **SMALL_HDC)
    upload(corpus, owner, TEXTS)
    first = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert first.status == "succeeded"
    before = [
        r.memory.text for r in memories_search(user=owner, corpus_ids=[corpus.pk], query="binary search")
    ]

    second = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert second.status == "failed" and "No space left on device" in second.error
    corpus.refresh_from_db()
    assert corpus.active_build_id == first.pk
    assert not (small_disk / "corpora" / str(corpus.pk) / "builds" / str(second.pk)).exists()
    assert not list((small_disk / "tmp").rglob("*.partial"))
    page = client_for(owner).get(f"/corpora/{corpus.pk}/").content.decode()
    assert "No space left on device" in page
    after = [
        r.memory.text for r in memories_search(user=owner, corpus_ids=[corpus.pk], query="binary search")
    ]
    assert after == before and after
