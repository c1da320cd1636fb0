"""Scanned PDFs through the real upload and build: the upload leaves OCR to the build, OCR'd pages keep
their page and region, an image without text is skipped by the build with its reason; a corpus with OCR
off refuses a scan with that reason, and the other files of the upload are stored all the same."""

from __future__ import annotations

import io

from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from PIL import Image

from bench.data.scans import render_page, save_image_pdf
from corpus.models import Memory
from corpus.services.batch_uploads import datasets_upload
from corpus.services.builds import corpus_parameters
from tests.plugins.portal import build_now

SENTENCE = "Volcanic ash clouds ground aircraft for days."
SECOND = "Glaciers carve valleys over thousands of years."


def _gradient_png() -> bytes:
    """A sky without words: a grey gradient, not one colour (so not blank), with no text for OCR."""
    image = Image.linear_gradient("L").resize((320, 120))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def _scan_pdf(tmp_path, *sentences: str) -> bytes:
    pages = [render_page(text, 200, size_inches=(6.0, 1.2), columns=60, margin_inches=0.3)[0]
             for text in sentences or (SENTENCE,)]
    return save_image_pdf(pages, tmp_path / "scan.pdf", 200).read_bytes()


def test_a_scanned_pdf_is_built_with_the_page_and_region_of_its_text(corpus, owner, tmp_path, client,
                                                                     django_capture_on_commit_callbacks):
    outcomes = datasets_upload(corpus=corpus, user=owner, files=[
        SimpleUploadedFile("scan.pdf", _scan_pdf(tmp_path, SENTENCE, SECOND)),
        SimpleUploadedFile("notes.md", b"# Notes\n\nMagma cools into basalt near the surface."),
        SimpleUploadedFile("sky.png", _gradient_png())])
    assert [o.error for o in outcomes] == ["", "", ""]
    # The upload did not OCR: it says the two pages' text is read at build time, and holds none of it.
    scan = outcomes[0].dataset
    assert (scan.validation["ocr_pending"], scan.validation["records_valid"]) == (2, 0)
    assert (scan.record_count, scan.record_count_exact) == (2, False)
    assert "2 pages have no text layer: the text will be read by OCR" in outcomes[0].as_json()["message"]
    assert corpus_parameters(corpus).ocr is True
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    assert build.status == "succeeded" and build.params.ocr is True
    first, second = Memory.objects.filter(build=build, dataset=scan).order_by("metadata__page")
    assert "aircraft" in first.text and first.metadata["page"] == 1
    assert "valleys" in second.text and second.metadata["page"] == 2
    left, top, right, bottom = first.metadata["region"]
    assert 0 <= left < right <= 1 and 0 <= top < bottom <= 1
    # The image is no blank page, so the upload took it; OCR finds no text on it in the build, which
    # skips it with that reason, kept on the build's row and shown on the corpus page, and goes on.
    assert build.params.skipped_documents == (("sky.png", "OCR found no text on the image"),)
    client.force_login(owner)
    page = client.get(reverse("corpus:detail", args=[corpus.pk])).content.decode()
    assert "Skipped: sky.png (OCR found no text on the image)" in page


def test_ocr_off_refuses_a_scan_with_its_reason_and_keeps_the_rest_of_the_upload(corpus, owner, tmp_path):
    corpus.ocr = False
    corpus.save(update_fields=["ocr"])
    outcomes = datasets_upload(corpus=corpus, user=owner, files=[
        SimpleUploadedFile("scan.pdf", _scan_pdf(tmp_path)),
        SimpleUploadedFile("notes.md", b"# Notes\n\nMagma cools into basalt near the surface.")])
    assert "scan.pdf" in outcomes[0].error and "no text layer" in outcomes[0].error
    assert "OCR is off for this corpus" in outcomes[0].error
    assert outcomes[1].error == "" and list(corpus.datasets.values_list("name", flat=True)) == ["notes.md"]
    assert corpus_parameters(corpus).ocr is False
