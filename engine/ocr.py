"""Text of page images by OCR: scans, photos of whiteboards, PDF pages without a text layer.

The engine is RapidOCR (the `rapidocr` wheel) on onnxruntime, on the CPU: PP-OCRv6 small text
detection and recognition, ONNX models that ship inside the wheel. They are named by path, so
RapidOCR's downloader is never reached: nothing is fetched at run time. Chosen by measurement over
rapidocr-onnxruntime (PP-OCRv4): on an A4 page rendered from the Python documentation's text it
dropped the spaces between words at 150 dpi (3.8 % character error rate against 0.06 %) at about
the same speed (docs/benchmarks.md, bench.ingest).

`ocr_image` gives an image's lines with their boxes (fractions of the width and height) and
confidence; `ocr_parts` groups them into blocks (paragraphs), each a `Part` whose place is its page
and the union of its lines' boxes as `region`. The model is loaded once per process (`clear_caches`
forgets it). Limits: `ReadOptions.max_pixels` is checked from the image's header before its pixels
are decoded (Pillow reads the size lazily), and Pillow's own decompression-bomb refusal is a
DocumentError too. The per-document time cap is the reader's `engine.readers.Clock`, checked
before each page. `PdfPageCheck` and `check_image` are what an upload's validation does instead of
OCR (`ReadOptions.defer_ocr`): the file opens and decodes within the caps, and a blank page (nothing to
read) is told from a scan; the OCR itself is left to the build in the worker.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.readers import Clock, DocumentError, Part, ReadOptions

if TYPE_CHECKING:
    from PIL.Image import Image

# Pages are rendered at this resolution: RapidOCR scales a page to at most 2,000 pixels on its long
# side before detection, which an A4 page at 200 dpi (1,654 x 2,339) just exceeds.
PDF_DPI = 200
# An image larger than this on its long side is reduced before OCR (the detector reduces it anyway;
# this bounds the memory of the decoded pixels).
MAX_SIDE = 4000
# An upload tells a blank PDF page from a scan on a render at this resolution (`PdfPageCheck`), and a
# page or image whose every band spans at most `BLANK_SPREAD` levels is blank.
CHECK_DPI = 36
BLANK_SPREAD = 24
_MODELS = ("PP-OCRv6_det_small.onnx", "PP-OCRv6_rec_small.onnx")


@dataclass(frozen=True)
class OcrLine:
    """One line of text found on an image: `box` is (left, top, right, bottom) as fractions of the
    image's width and height (0..1); `confidence` the recogniser's score (0..1)."""

    text: str
    box: tuple[float, float, float, float]
    confidence: float


@functools.cache
def _engine() -> Any:
    """The RapidOCR engine, its models loaded from the installed wheel (once per process)."""
    import rapidocr
    from rapidocr import RapidOCR

    models = Path(rapidocr.__file__).parent / "models"
    missing = [name for name in _MODELS if not (models / name).is_file()]
    if missing:
        raise RuntimeError(f"the rapidocr wheel lacks its models {missing}: reinstall rapidocr")
    detector, recogniser = (str(models / name) for name in _MODELS)
    # No text-direction classifier: on skewed, noisy scans it turned upright lines that start with a
    # bracket upside down (two lines of garbage a page; bench.ingest: 8.8 % → 0 % at 150 dpi).
    return RapidOCR(params={"Global.log_level": "error", "Global.use_cls": False,
                            "Det.model_path": detector, "Rec.model_path": recogniser})


def clear_caches() -> None:
    """Forget the loaded OCR engine (core.runtime.reset)."""
    _engine.cache_clear()


def open_image(path: Path, options: ReadOptions) -> Image:
    """The image at `path`, opened lazily (no pixels decoded yet); DocumentError when it is not a
    readable image or is larger than `options.max_pixels`."""
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    try:
        image = PILImage.open(path)
    except PILImage.DecompressionBombError as error:
        raise DocumentError(f"the image is too large to read safely: {error}") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as error:
        raise DocumentError(f"damaged or unsupported image: {error}") from None
    check_pixels(image.width, image.height, options)
    return image


def check_pixels(width: int, height: int, options: ReadOptions) -> None:
    """DocumentError when a page of `width` x `height` pixels is over the corpus's cap."""
    if width * height > options.max_pixels:
        raise DocumentError(f"the image is {width:,} x {height:,} pixels, over the cap of "
                            f"{options.max_pixels:,} pixels; scale it down and upload it again")


def ocr_image(image: Image) -> list[OcrLine]:
    """The lines of text on `image` (a Pillow image; its pixels are decoded here), top to bottom.
    Raises DocumentError when the pixels cannot be decoded (a truncated or damaged file)."""
    import numpy as np

    try:
        image.thumbnail((MAX_SIDE, MAX_SIDE))
        pixels = np.asarray(image.convert("RGB"))
    except (OSError, SyntaxError, ValueError) as error:
        raise DocumentError(f"damaged image: {error}") from None
    height, width = pixels.shape[:2]
    result = _engine()(pixels)
    if result.boxes is None or result.txts is None:
        return []
    lines = []
    for points, text, score in zip(result.boxes, result.txts, result.scores, strict=True):
        xs, ys = points[:, 0] / width, points[:, 1] / height
        box = tuple(round(min(max(float(v), 0.0), 1.0), 4) for v in (xs.min(), ys.min(), xs.max(), ys.max()))
        if text.strip():
            lines.append(OcrLine(text.strip(), box, round(float(score), 4)))
    return reading_order(lines)


def reading_order(lines: list[OcrLine]) -> list[OcrLine]:
    """`lines` row by row, top to bottom, each row left to right. A row is the lines whose middles lie
    within the height of its first line: on a skewed scan the pieces of one line the detector
    found apart stand at different heights, and sorting by their tops alone would swap them."""
    rows: list[list[OcrLine]] = []
    for line in sorted(lines, key=lambda line: line.box[1] + line.box[3]):
        middle = (line.box[1] + line.box[3]) / 2
        if rows and rows[-1][0].box[1] <= middle <= rows[-1][0].box[3]:
            rows[-1].append(line)
        else:
            rows.append([line])
    return [line for row in rows for line in sorted(row, key=lambda line: line.box[0])]


def _joins(block: list[OcrLine], line: OcrLine) -> bool:
    """Whether `line` continues `block` (a paragraph): it starts within a line height below the
    block's last line and overlaps the block horizontally."""
    last = block[-1]
    height = max(last.box[3] - last.box[1], line.box[3] - line.box[1])
    left, right = min(b.box[0] for b in block), max(b.box[2] for b in block)
    return line.box[1] - last.box[3] < 0.8 * height and line.box[0] < right and line.box[2] > left


def blocks(lines: list[OcrLine]) -> list[list[OcrLine]]:
    """`lines` grouped into paragraphs, in reading order: top to bottom, a block after the blocks that
    start above it (columns side by side are read block by block as they start down the page)."""
    found: list[list[OcrLine]] = []
    for line in lines:
        block = next((block for block in reversed(found) if _joins(block, line)), None)
        if block is None:
            found.append([line])
        else:
            block.append(line)
    return sorted(found, key=lambda block: (round(block[0].box[1], 2), block[0].box[0]))


def region(block: list[OcrLine]) -> list[float]:
    """The union of a block's line boxes: [left, top, right, bottom] as fractions of the page."""
    return [min(line.box[0] for line in block), min(line.box[1] for line in block),
            max(line.box[2] for line in block), max(line.box[3] for line in block)]


def ocr_parts(image: Image, page: int, share: float) -> list[Part]:
    """One Part per block of text on `image`, placed at `page` with its `region`; `share` is the
    fraction of the document read once this page is done."""
    return [Part("\n".join(line.text for line in block), {"page": page, "region": region(block)}, share)
            for block in blocks(ocr_image(image))]


def ocr_pdf_page(path: Path, page_number: int, options: ReadOptions, *, share: float = 1.0,
                 clock: Clock | None = None) -> list[Part]:
    """The OCR text of the 1-based page `page_number` of the PDF at `path` (a page without a text
    layer), rendered by PDFium at `PDF_DPI` (less for a page that would exceed `max_pixels`); `clock`,
    the reader's time cap, is checked before the page is rendered and again before its OCR."""
    import pypdfium2 as pdfium

    if clock is not None:
        clock.check()
    document = _open_pdf(path)
    try:
        page = document[page_number - 1]
        width, height = page.get_size()
        scale = PDF_DPI / 72
        scale = min(scale, (options.max_pixels / max(1.0, width * height)) ** 0.5)
        image = page.render(scale=scale).to_pil()
    except pdfium.PdfiumError as error:
        raise DocumentError(f"damaged PDF: page {page_number} cannot be rendered ({error})") from None
    finally:
        document.close()
    if clock is not None:
        clock.check()
    return ocr_parts(image, page_number, share)


def _open_pdf(path: Path) -> Any:
    import pypdfium2 as pdfium

    try:
        return pdfium.PdfDocument(path)
    except pdfium.PdfiumError as error:
        raise DocumentError(f"damaged PDF: {error}") from None


class PdfPageCheck:
    """An upload's check of the PDF pages OCR will read at build time, instead of their OCR: PDFium,
    which renders them then, opens the file and each page, and pages are rendered small (`CHECK_DPI`)
    to tell a blank page, with nothing to read, from a scan, until the first page with ink is found
    (then the rest are taken as scans: a few renders a document, never one per page)."""

    def __init__(self, path: Path) -> None:
        self.path, self.inked, self.document = path, False, None

    def pending(self, number: int) -> bool:
        """Whether the 1-based page `number` is left to OCR: it opens and is not blank."""
        import pypdfium2 as pdfium

        if self.document is None:
            self.document = _open_pdf(self.path)
        try:
            page = self.document[number - 1]
            if not self.inked:
                self.inked = not blank(page.render(scale=CHECK_DPI / 72).to_pil())
            page.close()
        except pdfium.PdfiumError as error:
            raise DocumentError(f"damaged PDF: page {number} cannot be opened ({error})") from None
        return self.inked

    def close(self) -> None:
        if self.document is not None:
            self.document.close()


def blank(image: Image) -> bool:
    """Whether `image` is one colour, every band within `BLANK_SPREAD` levels: nothing for OCR to read."""
    extrema = image.getextrema()
    bands = extrema if isinstance(extrema[0], tuple) else (extrema,)
    return all(high - low <= BLANK_SPREAD for low, high in bands)


def check_image(image: Image) -> bool:
    """What an upload checks of an image (a frame) OCR will read at build time: its pixels decode (a
    truncated or damaged file is refused now; a JPEG at a reduced scale, at least `MAX_SIDE` on its long
    side). Whether it has ink (False: blank, nothing to read)."""
    try:
        image.draft("RGB", (MAX_SIDE, MAX_SIDE))
        image.load()
        return not blank(image)
    except (OSError, SyntaxError, ValueError) as error:
        raise DocumentError(f"damaged image: {error}") from None
