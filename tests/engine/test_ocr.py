"""OCR (engine.ocr) and the image reader (engine.readers.images) on pages rendered from real text with a
real TrueType font (bench.data.scans), saved by Pillow as PNG, JPEG, TIFF, WebP and an image-only PDF."""

from __future__ import annotations

import pytest
from PIL import Image
from rapidfuzz.distance import Levenshtein

from bench.data.scans import python_doc_paragraphs, render_page, save_image_pdf
from engine.datasets import DatasetError, iter_dataset, validate_dataset
from engine.ocr import OcrLine, clear_caches, ocr_image, reading_order
from engine.readers import DocumentError, ReadOptions, reader_for
from engine.readers.images import OCR_OFF, read_image

SMALL = {"size_inches": (6.0, 2.4), "columns": 60, "margin_inches": 0.4}


@pytest.fixture(scope="module")
def paragraphs() -> list[str]:
    first, second = python_doc_paragraphs(2)
    return [first[:110], second[:110]]


@pytest.fixture(scope="module")
def page(paragraphs):
    """A page of two paragraphs at 150 dpi, skewed by half a degree, with scanner noise."""
    return render_page("\n\n".join(paragraphs), 150, skew=0.5, noise=8, **SMALL)


def _read(path, **options):
    head = path.read_bytes()[:16]
    reader = reader_for(head, path.suffix)
    assert reader is not None
    return reader, list(reader.read(path, ReadOptions(**options)))


def test_ocr_reads_the_lines_of_a_rendered_page_in_order(page):
    image, truth = page
    lines = ocr_image(image.copy())
    expected = [line for line in truth.splitlines() if line]
    assert len(lines) == len(expected)
    got = " ".join(line.text for line in lines)
    assert Levenshtein.distance(got, " ".join(expected)) / len(got) <= 0.03
    tops = [line.box[1] for line in lines]
    assert tops == sorted(tops)
    for line in lines:
        left, top, right, bottom = line.box
        assert 0 <= left < right <= 1 and 0 <= top < bottom <= 1 and 0.5 < line.confidence <= 1


def test_the_image_reader_gives_one_part_per_paragraph_with_its_page_and_region(tmp_path, page, paragraphs):
    path = tmp_path / "whiteboard.png"
    page[0].save(path)
    reader, parts = _read(path)
    assert reader.name == "png"
    assert len(parts) == 2
    for part, paragraph in zip(parts, paragraphs, strict=True):
        assert part.place["page"] == 1
        words = paragraph.split()
        assert words[0] in part.text and words[-2] in part.text
    first, second = (part.place["region"] for part in parts)
    assert first[3] <= second[1]  # the first paragraph's region ends above the second's
    assert all(0 <= value <= 1 for value in first + second) and first[0] < first[2]


def test_a_multi_page_tiff_gives_each_frame_its_page(tmp_path, paragraphs):
    frames = [render_page(text[:60], 150, size_inches=(5.0, 1.0), margin_inches=0.25)[0]
              for text in paragraphs]
    path = tmp_path / "scan.tiff"
    frames[0].save(path, save_all=True, append_images=frames[1:], compression="tiff_deflate")
    reader, parts = _read(path)
    assert reader.name == "tiff"
    assert [part.place["page"] for part in parts] == [1, 2] and [part.share for part in parts] == [0.5, 1.0]
    assert paragraphs[1].split()[0] in parts[1].text


@pytest.mark.parametrize(("suffix", "fmt", "name"), [(".jpg", "JPEG", "jpeg"), (".webp", "WEBP", "webp"),
                                                     (".png", "PNG", "png"), (".tif", "TIFF", "tiff")])
def test_each_image_format_is_found_by_its_content(tmp_path, suffix, fmt, name):
    path = tmp_path / f"image{suffix}"
    Image.new("L", (32, 32), 255).save(path, fmt)
    head = path.read_bytes()[:16]
    assert reader_for(head, suffix).name == name
    assert reader_for(head, ".bin").name == name  # content wins over the name
    with pytest.raises(DocumentError, match="not a"):
        reader_for(b"just some text", suffix)


def test_ocr_off_refuses_an_image_with_the_reason(tmp_path):
    path = tmp_path / "scan.png"
    Image.new("L", (64, 64), 255).save(path)
    with pytest.raises(DocumentError, match=OCR_OFF):
        list(read_image(path, ReadOptions(ocr=False)))


def test_the_pixel_cap_refuses_an_image_before_its_pixels_are_decoded(tmp_path):
    whole = tmp_path / "whole.png"
    Image.new("L", (3000, 2000), 255).save(whole)
    # Only the header and the start of the pixel data: decoding would fail as damaged, so the cap's
    # reason proves the size was read from the header alone.
    truncated = tmp_path / "big.png"
    truncated.write_bytes(whole.read_bytes()[:200])
    with pytest.raises(DocumentError, match="3,000 x 2,000 pixels, over the cap of 1,000,000"):
        list(read_image(truncated, ReadOptions(max_pixels=1_000_000)))


def test_pillows_decompression_bomb_refusal_is_a_clear_reason(tmp_path):
    path = tmp_path / "bomb.png"
    Image.new("1", (20_000, 20_000), 1).save(path)  # 400 Mpx, twice Pillow's own limit
    # Pillow refuses it while reading the header, under the corpus's cap too: its reason is given.
    for cap in (10 ** 9, ReadOptions().max_pixels):
        with pytest.raises(DocumentError, match="too large to read safely: Image size .400000000 pixels"):
            list(read_image(path, ReadOptions(max_pixels=cap)))


def test_a_damaged_image_is_refused_and_the_next_file_is_still_read(tmp_path, page):
    good, damaged = tmp_path / "good.png", tmp_path / "damaged.png"
    page[0].save(good)
    damaged.write_bytes(good.read_bytes()[: good.stat().st_size // 3])
    with pytest.raises(DocumentError, match="damaged image"):
        list(read_image(damaged, ReadOptions()))
    # An upload's validation decodes without OCR: the damaged file is refused there already.
    with pytest.raises(DatasetError, match="damaged image"):
        validate_dataset(damaged)
    assert len(list(read_image(good, ReadOptions()))) == 2


def test_an_image_without_text_and_the_time_cap_have_reasons(tmp_path):
    path = tmp_path / "blank.png"
    Image.new("L", (400, 300), 255).save(path)
    with pytest.raises(DocumentError, match="OCR found no text on the image"):
        list(read_image(path, ReadOptions()))
    with pytest.raises(DatasetError, match="the image is blank: it has no text to read"):
        validate_dataset(path)  # an upload tells it without OCR
    with pytest.raises(DocumentError, match="reading the image file took longer than the limit of 0 seconds"):
        list(read_image(path, ReadOptions(max_seconds=0)))


def test_an_image_only_pdf_page_is_read_by_ocr_with_its_page_and_region(tmp_path, paragraphs):
    pages = [render_page(text, 200, size_inches=(6.0, 1.6), columns=60, margin_inches=0.3)[0]
             for text in (paragraphs[0][:60], paragraphs[1][:60])]
    path = save_image_pdf(pages, tmp_path / "scan.pdf", 200)
    # The upload's validation leaves the OCR to the build: two pages pending, no text read yet.
    report = validate_dataset(path, chunk_size=256)
    assert (report["ocr_pending"], report["records_valid"], report["record_estimate"]) == (2, 0, 2)
    assert report["complete"] is False and "read by OCR when the corpus is built" in report["notes"][0]
    records = list(iter_dataset(path, chunk_size=256))
    assert [r["metadata"]["page"] for r in records] == [1, 2]
    assert paragraphs[1].split()[0] in records[1]["text"]
    left, top, right, bottom = records[0]["metadata"]["region"]
    assert 0 <= left < right <= 1 and 0 <= top < bottom <= 1
    with pytest.raises(DatasetError, match="no text layer .* and OCR is off for this corpus"):
        validate_dataset(path, options=ReadOptions(ocr=False))


def test_reading_order_keeps_the_pieces_of_a_skewed_line_left_to_right():
    # The right piece of a line tilted up stands higher than its left piece, but within its height.
    left = OcrLine("Serialize obj", (0.10, 0.120, 0.45, 0.160), 0.99)
    right = OcrLine("to a JSON str.", (0.50, 0.110, 0.85, 0.150), 0.99)
    below = OcrLine("If skipkeys is true", (0.10, 0.170, 0.60, 0.210), 0.99)
    assert [line.text for line in reading_order([below, right, left])] == [
        "Serialize obj", "to a JSON str.", "If skipkeys is true"]


def test_the_models_come_from_the_wheel_without_a_connection(monkeypatch, page):
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError(f"OCR tried to connect to {args[1:]}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    clear_caches()  # load the models again, here, with every connection refused
    lines = ocr_image(page[0].copy())
    assert lines and lines[0].text.startswith("Serialize")
