"""Upload validation: every bad input class is refused with a clear message and nothing is stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from corpus.services.corpora import DatasetRejected, dataset_upload
from tests.plugins.portal import TEXTS, jsonl_bytes, login, stored_files

BAD_FILES = [
    ("notes.json", b"this is plain text, not JSON", "not JSON"),
    ("data.parquet", b"just some text pretending to be parquet", "not a parquet file"),
    ("image.txt", bytes(range(256)) * 8, "binary"),
    ("latin1.txt", "caf\u00e9 cr\u00e8me br\u00fbl\u00e9e".encode("latin-1") * 20, "UTF-8"),
    ("broken.json", b'[{"text": "first record is fine"}, {"text": "second is cut', "broken.json"),
    ("lines.jsonl", b"{not json at all\n{neither}\n", "not valid JSON"),
    ("notext.jsonl", b'{"id": 1}\n{"id": 2}\n', "no text found"),
    ("empty.txt", b"   \n", "empty"),
    ("tool.exe", b"MZ\x90\x00", "unsupported file type"),
]


@pytest.mark.parametrize(("name", "content", "message"), BAD_FILES, ids=[f[0] for f in BAD_FILES])
def test_bad_file_refused_by_the_page_and_nothing_stored(corpus, owner, data_dir, name, content, message):
    client = login(owner)
    response = client.post(reverse("corpus:dataset_add", args=[corpus.pk]),
                           {"file": SimpleUploadedFile(name, content)})
    assert response.status_code == 400
    page = response.content.decode()
    assert message.lower() in page.lower(), page[page.find("errorlist") - 200:][:600]
    assert name in page or message == "empty"
    assert not corpus.datasets.exists()
    assert stored_files(data_dir) == []


def test_oversized_upload_stops_while_streaming(corpus, owner, data_dir, settings):
    settings.UPLOAD_MAX_BYTES = 64 * 1024
    client = login(owner)
    big = jsonl_bytes([f"record {i} " + "word " * 40 for i in range(600)])
    assert len(big) > 2 * settings.UPLOAD_MAX_BYTES
    response = client.post(
        reverse("corpus:dataset_add", args=[corpus.pk]), {"file": SimpleUploadedFile("big.jsonl", big)}
    )
    assert response.status_code == 400 and "upload limit of 0 MiB" not in response.content.decode()
    assert "larger than the upload limit" in response.content.decode()
    assert not corpus.datasets.exists() and stored_files(data_dir) == []
    with pytest.raises(DatasetRejected, match="larger than the upload limit"):
        dataset_upload(corpus=corpus, user=owner, uploaded_file=SimpleUploadedFile("big.jsonl", big))
    assert stored_files(data_dir) == []


def test_duplicate_content_refused_even_under_another_name(corpus, owner, data_dir):
    first = dataset_upload(
        corpus=corpus, user=owner, uploaded_file=SimpleUploadedFile("a.jsonl", jsonl_bytes(TEXTS))
    )
    before = stored_files(data_dir)
    with pytest.raises(DatasetRejected, match="already in this corpus as 'a.jsonl'"):
        dataset_upload(
            corpus=corpus, user=owner, uploaded_file=SimpleUploadedFile("b.jsonl", jsonl_bytes(TEXTS))
        )
    assert list(corpus.datasets.all()) == [first] and stored_files(data_dir) == before


def test_good_upload_stored_with_size_hash_format_and_estimate(corpus, owner, data_dir):
    content = json.dumps({"data": [{"text": t} for t in TEXTS]}).encode()
    client = login(owner)
    response = client.post(reverse("corpus:dataset_add", args=[corpus.pk]),
                           {"file": SimpleUploadedFile("records.txt.json", content)}, follow=True)
    assert f"Uploaded records.txt.json: JSON, {len(TEXTS)} records." in response.content.decode()
    dataset = corpus.datasets.get()
    import hashlib

    assert dataset.size == len(content) and dataset.sha256 == hashlib.sha256(content).hexdigest()
    assert dataset.format == "json" and dataset.record_count == len(TEXTS) and dataset.record_count_exact
    assert Path(dataset.file.path).read_bytes() == content
    assert Path(dataset.file.path).is_relative_to(data_dir / "corpora" / str(corpus.pk) / "datasets")
    assert stored_files(data_dir / "tmp") == []


def test_content_decides_format_over_extension(corpus, owner):
    dataset = dataset_upload(
        corpus=corpus, user=owner, uploaded_file=SimpleUploadedFile("lines.json", jsonl_bytes(TEXTS))
    )
    assert dataset.format == "jsonl"
