"""Archive bombs and the per-account storage quota (issue 30.2): an upload whose ZIP members expand
past UPLOAD_MAX_EXPANDED_BYTES, or that would take its uploader past USER_STORAGE_QUOTA_BYTES, is
refused whole with a clear error (the API: 413) and leaves nothing on disk; staff have no quota."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from corpus.files import datasets_dir, staging_dir
from corpus.models import Dataset
from tests.plugins.api import token_client
from tests.plugins.portal import TEXTS, jsonl_bytes, login, stored_files, upload

KIB = 1024


def bomb(members: int, member_bytes: int, tag: str = "") -> bytes:
    """A ZIP of `members` distinct texts of `member_bytes` each that deflate to almost nothing."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for i in range(members):
            line = f"{tag}Member {i} says the same thing again and again.\n".encode()
            archive.writestr(
                f"bomb/part-{i:02d}.txt", (line * (member_bytes // len(line) + 1))[:member_bytes]
            )
    return out.getvalue()


def nothing_of_the_upload(corpus, data_dir: Path) -> bool:  # noqa: ANN001 - a Corpus
    return (not corpus.datasets.exists() and not any(datasets_dir(corpus.pk).glob("*"))
            and not any(staging_dir().glob("*")) and stored_files(data_dir) == [])


def test_archive_past_the_expanded_cap_is_refused_whole_and_nothing_stored(corpus, owner, data_dir, settings):
    settings.UPLOAD_MAX_BYTES = 64 * KIB
    settings.UPLOAD_MAX_EXPANDED_BYTES = 256 * KIB
    archive = bomb(members=10, member_bytes=60 * KIB)  # every member under the per-file limit
    assert len(archive) < 16 * KIB
    url = reverse("corpus:dataset_add", args=[corpus.pk])
    response = login(owner).post(url, {"file": SimpleUploadedFile("bomb.zip", archive)},
                                 headers={"Accept": "application/json"})
    assert response.status_code == 400
    [result] = response.json()["results"]
    assert result == {
        "name": "bomb.zip",
        "ok": False,
        "error": "bomb.zip: its files expand to more than the limit of "
        "256 KiB for one upload; nothing of it was stored.",
    }
    assert nothing_of_the_upload(corpus, data_dir)
    page = login(owner).post(url, {"file": SimpleUploadedFile("bomb.zip", archive)})
    assert page.status_code == 400 and "expand to more than the limit of 256 KiB" in page.content.decode()
    assert nothing_of_the_upload(corpus, data_dir)


def test_archive_at_the_expanded_cap_is_stored(corpus, owner, settings):
    settings.UPLOAD_MAX_BYTES = 64 * KIB
    settings.UPLOAD_MAX_EXPANDED_BYTES = 4 * 60 * KIB
    response = login(owner).post(
        reverse("corpus:dataset_add", args=[corpus.pk]),
        {"file": SimpleUploadedFile("four.zip", bomb(members=4, member_bytes=60 * KIB))},
        headers={"Accept": "application/json"},
    )
    assert response.status_code == 200 and all(r["ok"] for r in response.json()["results"])
    assert corpus.datasets.count() == 4


def test_several_archives_in_one_request_share_the_cap(corpus, owner, data_dir, settings):
    settings.UPLOAD_MAX_BYTES = 64 * KIB
    settings.UPLOAD_MAX_EXPANDED_BYTES = 3 * 60 * KIB
    first, second = bomb(members=2, member_bytes=60 * KIB), bomb(members=3, member_bytes=60 * KIB, tag="2nd ")
    response = login(owner).post(reverse("corpus:dataset_add", args=[corpus.pk]), {"file": [
        SimpleUploadedFile("first.zip", first), SimpleUploadedFile("second.zip", second)]},
        headers={"Accept": "application/json"})
    results = response.json()["results"]
    assert [r["ok"] for r in results] == [True, True, False]
    assert results[-1]["error"].startswith("second.zip: its files expand to more than the limit")
    assert corpus.datasets.count() == 2


def test_user_at_the_quota_gets_a_clear_error_on_the_page_and_413_from_the_api(
    corpus, owner, data_dir, settings
):
    first = upload(corpus, owner, TEXTS[:4])
    settings.USER_STORAGE_QUOTA_BYTES = first.size + 100
    before = stored_files(data_dir)
    page = login(owner).get(reverse("corpus:detail", args=[corpus.pk])).content.decode()
    assert f"You use {first.size} bytes of your storage quota of {first.size + 100} bytes." in page
    response = login(owner).post(reverse("corpus:dataset_add", args=[corpus.pk]),
                                 {"file": SimpleUploadedFile("more.jsonl", jsonl_bytes(TEXTS[4:]))})
    assert response.status_code == 400
    assert (
        f"more.jsonl: this would take you past your storage quota: you use {first.size} bytes of "
        f"{first.size + 100} bytes. Delete datasets you no longer need, or ask an administrator for more "
        "room."
        in response.content.decode()
    )
    api = token_client(owner).post(
        f"/api/v1/corpora/{corpus.pk}/datasets/",
        {"file": SimpleUploadedFile("more.jsonl", jsonl_bytes(TEXTS[4:]))},
        format="multipart",
    )
    assert api.status_code == 413 and api.json()["error"]["code"] == "quota_exceeded"
    assert "past your storage quota" in api.json()["error"]["message"]
    assert list(corpus.datasets.all()) == [first] and stored_files(data_dir) == before


def test_archive_past_the_quota_left_is_refused_whole(corpus, owner, data_dir, settings):
    settings.UPLOAD_MAX_BYTES = 64 * KIB
    settings.USER_STORAGE_QUOTA_BYTES = 100 * KIB
    response = login(owner).post(
        reverse("corpus:dataset_add", args=[corpus.pk]),
        {"file": SimpleUploadedFile("two.zip", bomb(members=2, member_bytes=60 * KIB))},
        headers={"Accept": "application/json"},
    )
    [result] = response.json()["results"]
    assert (
        response.status_code == 400
        and "two.zip: this would take you past your storage quota" in result["error"]
    )
    assert nothing_of_the_upload(corpus, data_dir)


def test_quota_counts_what_each_user_uploaded_and_staff_have_none(corpus, owner, writer, staff, settings):
    first = upload(corpus, owner, TEXTS[:4])
    settings.USER_STORAGE_QUOTA_BYTES = first.size + 100
    url = reverse("corpus:dataset_add", args=[corpus.pk])
    more = jsonl_bytes(TEXTS[4:])
    refused = login(owner).post(url, {"file": SimpleUploadedFile("more.jsonl", more)})
    assert refused.status_code == 400 and "past your storage quota" in refused.content.decode()
    assert login(writer).post(url, {"file": SimpleUploadedFile("more.jsonl", more)}).status_code == 302
    staff_page = login(staff).get(reverse("corpus:detail", args=[corpus.pk])).content.decode()
    assert "storage quota" not in staff_page
    for i in range(3):
        stored = login(staff).post(
            url, {"file": SimpleUploadedFile(f"s{i}.jsonl", jsonl_bytes([f"staff {i}", *TEXTS]))}
        )
        assert stored.status_code == 302
    assert Dataset.objects.filter(uploaded_by=staff).count() == 3
    assert sorted(
        Dataset.objects.filter(uploaded_by__isnull=False).values_list("uploaded_by__username", flat=True)
    ) == ["owner", "staff", "staff", "staff", "writer"]
