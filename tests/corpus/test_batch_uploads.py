"""Several files at once, ZIPs of files, PDF/DOCX, per-file errors and an honest record estimate."""

from __future__ import annotations

import io
import json
import zipfile

from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from corpus.models import Memory
from corpus.services.batch_uploads import datasets_upload
from tests.documents import docx_bytes, pdf_bytes
from tests.plugins.portal import TEXTS, build_now, jsonl_bytes, login


def zip_bytes(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return out.getvalue()


def test_several_files_in_one_form_post_each_get_a_message(corpus, owner):
    response = login(owner).post(reverse("corpus:dataset_add", args=[corpus.pk]), {"file": [
        SimpleUploadedFile("a.jsonl", jsonl_bytes(TEXTS[:3])),
        SimpleUploadedFile("b.md", b"# Heading\n\nSome markdown text about volcanoes and magma."),
        SimpleUploadedFile("bad.json", b"not json at all"),
    ]}, follow=True)
    page = response.content.decode()
    assert sorted(corpus.datasets.values_list("name", flat=True)) == ["a.jsonl", "b.md"]
    assert "Uploaded a.jsonl: JSONL, 3 records." in page and "Uploaded b.md: Markdown, 1 record." in page
    assert "bad.json: content is not JSON" in page


def test_script_upload_gets_json_per_file(corpus, owner):
    client = login(owner)
    url = reverse("corpus:dataset_add", args=[corpus.pk])
    ok = client.post(
        url,
        {"file": SimpleUploadedFile("a.jsonl", jsonl_bytes(TEXTS))},
        headers={"Accept": "application/json"},
    )
    assert ok.status_code == 200
    [result] = ok.json()["results"]
    assert result["ok"] and result["records"] == len(TEXTS) and result["format"] == "jsonl"
    bad = client.post(url, {"file": SimpleUploadedFile("a-again.jsonl", jsonl_bytes(TEXTS))},
                      headers={"Accept": "application/json"})
    assert bad.status_code == 400
    assert bad.json()["results"] == [
        {
            "name": "a-again.jsonl",
            "ok": False,
            "error": "a-again.jsonl: the same content is already in this corpus as 'a.jsonl'.",
        }
    ]
    empty = client.post(url, {}, headers={"Accept": "application/json"})
    assert empty.status_code == 400 and "required" in empty.json()["results"][0]["error"]


def test_zip_members_become_datasets_and_bad_members_are_reported(corpus, owner):
    archive = zip_bytes(
        {
            "docs/one.txt": b"Mitochondria produce most of the ATP of a cell.",
            "docs/two.html": b"<html><body><p>Volcanoes erupt when magma rises.</p></body></html>",
            "docs/.hidden.txt": b"skipped silently",
            "__MACOSX/docs/._one.txt": b"resource fork",
            "docs/tool.exe": b"MZ\x90\x00",
            "docs/": b"",
        }
    )
    response = login(owner).post(
        reverse("corpus:dataset_add", args=[corpus.pk]),
        {"file": SimpleUploadedFile("bundle.zip", archive)},
        headers={"Accept": "application/json"},
    )
    assert response.status_code == 200
    results = {r["name"]: r for r in response.json()["results"]}
    assert set(results) == {"docs/one.txt", "docs/two.html", "docs/tool.exe"}
    assert results["docs/one.txt"]["ok"] and results["docs/two.html"]["format"] == "html"
    assert "unsupported file type '.exe'" in results["docs/tool.exe"]["error"]
    assert sorted(corpus.datasets.values_list("name", flat=True)) == ["one.txt", "two.html"]


def test_zip_member_over_the_limit_is_refused_alone(corpus, owner, settings):
    settings.UPLOAD_MAX_BYTES = 4096
    outcomes = datasets_upload(corpus=corpus, user=owner, files=[SimpleUploadedFile("z.zip", zip_bytes({
        "big.txt": b"word " * 2000, "small.txt": b"a small text about binary search"}))])
    assert [(o.name, o.dataset is not None) for o in outcomes] == [("big.txt", False), ("small.txt", True)]
    assert "larger than the upload limit" in outcomes[0].error


def test_damaged_zip_is_one_clear_error(corpus, owner):
    [outcome] = datasets_upload(
        corpus=corpus, user=owner, files=[SimpleUploadedFile("z.zip", b"PK\x03\x04garbage")]
    )
    assert outcome.dataset is None and "not a readable ZIP archive" in outcome.error


def test_pdf_and_docx_are_built_with_page_numbers(corpus, owner, django_capture_on_commit_callbacks):
    pages = [["The storming of the Bastille happened in 1789."], ["Glycolysis splits glucose into pyruvate."]]
    outcomes = datasets_upload(corpus=corpus, user=owner, files=[
        SimpleUploadedFile("history.pdf", pdf_bytes(pages)),
        SimpleUploadedFile("report.docx", docx_bytes(["Quarterly revenue grew by twelve percent."]))])
    assert [o.dataset.format for o in outcomes] == ["pdf", "docx"]
    assert [o.dataset.record_count for o in outcomes] == [2, 1]
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == "succeeded"
    pdf_memories = Memory.objects.filter(build=build, dataset=outcomes[0].dataset).order_by("hdv_idx")
    assert [m.metadata["page"] for m in pdf_memories] == [1, 2]
    assert "Bastille" in pdf_memories[0].text


def test_text_estimate_matches_the_build(corpus, owner, django_capture_on_commit_callbacks):
    """The estimate counts the build's chunks (its tokenizer and chunk size), not whitespace words."""
    corpus.chunk_size = 32
    corpus.save()
    html = (
        "<html><body>"
        + "".join(f"<p>Paragraph {i}: {' '.join(TEXTS)}</p>" for i in range(6))
        + "</body></html>"
    )
    [outcome] = datasets_upload(
        corpus=corpus, user=owner, files=[SimpleUploadedFile("page.html", html.encode())]
    )
    estimate = outcome.dataset.record_count
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert build.documents == estimate > 20


def test_readers_and_outsiders_cannot_upload(corpus, member, outsider):
    url = reverse("corpus:dataset_add", args=[corpus.pk])
    payload = {"file": SimpleUploadedFile("a.jsonl", jsonl_bytes(TEXTS))}
    assert login(member).post(url, payload).status_code == 403
    payload = {"file": SimpleUploadedFile("a.jsonl", json.dumps({"text": "x"}).encode())}
    assert login(outsider).post(url, payload).status_code == 404
    assert not corpus.datasets.exists()
