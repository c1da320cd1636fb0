"""The document view of an image document (read by OCR): the image itself shown as the passage's page,
the OCR region of the passage outlined over it. A real PNG drawn by Pillow with a TrueType font
(bench.data.scans), uploaded and built through the real services; one small image, OCR'd once. The
page cache's bound and a TIFF's frames are checked on images written by Pillow, without OCR."""

from __future__ import annotations

import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from PIL import Image

from bench.data.scans import render_page
from corpus.documents import document_url
from corpus.models import Memory
from corpus.page_images import PAGE_IMAGE_MAX_PIXELS, PageSize, PageUnavailable, page_image, page_size
from corpus.services.batch_uploads import datasets_upload
from tests.plugins.portal import build_now, login

SENTENCE = "Volcanic ash clouds ground aircraft for days."


def _png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _streamed(response) -> bytes:  # noqa: ANN001 - django FileResponse
    return b"".join(response.streaming_content)


@pytest.mark.slow
def test_an_image_passage_is_outlined_on_the_image(corpus, owner, member, outsider,
                                                    django_capture_on_commit_callbacks):
    scan = render_page(SENTENCE, 150, size_inches=(6.0, 1.2), columns=60, margin_inches=0.3)[0]
    uploaded = _png(scan)
    [outcome] = datasets_upload(corpus=corpus, user=owner,
                                files=[SimpleUploadedFile("whiteboard.png", uploaded)])
    assert outcome.error == ""
    assert build_now(corpus, owner, django_capture_on_commit_callbacks).status == "succeeded"
    scanned = outcome.dataset
    [passage] = Memory.objects.filter(dataset=scanned)
    assert "aircraft" in passage.text and passage.metadata["page"] == 1
    left, top, right, bottom = passage.metadata["region"]
    width, height = scan.size  # 900 x 180 pixels: the region is drawn in the image's own pixels
    view_url = document_url(corpus_id=corpus.pk, document_id=scanned.pk, memory_id=passage.pk)
    client = login(member)
    page = client.get(view_url).content.decode()
    assert '<strong id="place">page 1</strong>' in page and '<mark id="passage">' in page
    assert f'viewBox="0 0 {width:.2f} {height:.2f}"' in page
    outline = (f'<rect class="page-region" id="page-region" x="{left * width:.2f}" y="{top * height:.2f}" '
               f'width="{(right - left) * width:.2f}" height="{(bottom - top) * height:.2f}"/>')
    assert outline in page and "whiteboard.png, the passage marked" in page
    image_url = reverse("corpus:document_page", args=[corpus.pk, scanned.pk, 1])
    assert f'<image href="{image_url}"' in page
    image = client.get(image_url)
    assert image.status_code == 200 and image["Content-Type"] == "image/png"
    with Image.open(io.BytesIO(_streamed(image))) as shown:
        assert shown.format == "PNG" and shown.size == scan.size  # small: shown as stored, not enlarged
    assert client.get(reverse("corpus:document_page", args=[corpus.pk, scanned.pk, 2])).status_code == 404
    original = client.get(reverse("corpus:document_original", args=[corpus.pk, scanned.pk]))
    assert _streamed(original) == uploaded

    stranger = login(outsider)
    for url in (view_url, image_url, reverse("corpus:document_original", args=[corpus.pk, scanned.pk])):
        response = stranger.get(url)
        assert response.status_code == 404, url
        assert b"whiteboard" not in b"".join(getattr(response, "streaming_content", [response.content]))


def test_an_image_page_is_bounded_and_a_tiff_frame_is_its_page(tmp_path, settings):
    settings.DATA_DIR = tmp_path / "data"
    wide = Image.new("RGB", (3200, 800), "white")
    small = Image.new("L", (400, 300), 255)
    path = tmp_path / "scan.tiff"
    wide.save(path, save_all=True, append_images=[small], compression="tiff_deflate")
    assert page_size(path, 2, document_format="tiff") == PageSize(400.0, 300.0)
    first = page_image(path=path, sha256="a" * 64, number=1, document_format="tiff")
    second = page_image(path=path, sha256="a" * 64, number=2, document_format="tiff")
    with Image.open(first) as one, Image.open(second) as two:
        assert one.size == (PAGE_IMAGE_MAX_PIXELS, PAGE_IMAGE_MAX_PIXELS // 4)
        assert two.size == (400, 300) and two.format == "PNG"
    with pytest.raises(PageUnavailable, match="no page 3"):
        page_image(path=path, sha256="a" * 64, number=3, document_format="tiff")
    damaged = tmp_path / "damaged.png"
    damaged.write_bytes(_png(small)[:60])
    with pytest.raises(PageUnavailable, match="cannot be shown"):
        page_image(path=damaged, sha256="b" * 64, number=1, document_format="png")
