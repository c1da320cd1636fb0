"""Pages of a PDF document, and image documents (PNG, JPEG, TIFF, WebP, read by OCR), as PNG images for
the document view, rendered on the server (a PDF page by pypdfium2, PDFium; an image or a TIFF frame by
Pillow) and kept on disk under DATA_DIR/cache/pages: the view loads nothing from outside the portal.

Bounded: a page is rendered with its longer side at most `PAGE_IMAGE_MAX_PIXELS` pixels, whatever its
size in points or pixels (an image is only ever reduced), and the cache is trimmed, oldest first, to
`PAGE_CACHE_MAX_BYTES` after each render. An image over the readers' pixel cap is not decoded
(`engine.ocr.open_image`). A cached image is named by the document's content hash, so a replaced
document never shows an old page.

An image document's page is its frame (1 but for a multi-page TIFF) and its size is in pixels, as its
OCR regions are fractions of those pixels; an image is shown as stored, as OCR read it (no EXIF
rotation).
"""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from core.errors import ApplicationError
from engine.readers import DocumentError, ReadOptions

logger = logging.getLogger(__name__)

PAGE_IMAGE_MAX_PIXELS = 1600
PAGE_CACHE_MAX_BYTES = 256 * 1024 * 1024
# The formats (`Dataset.format`, the readers' names) whose documents have pages to show.
IMAGE_FORMATS = frozenset({"png", "jpeg", "tiff", "webp"})
PAGED_FORMATS = IMAGE_FORMATS | {"pdf"}
# Modes Pillow writes to PNG as they are; any other (CMYK, YCbCr, 16-bit) is converted to RGB first.
_PNG_MODES = frozenset({"1", "L", "LA", "P", "RGB", "RGBA"})


class PageUnavailable(ApplicationError):
    """The page cannot be shown: the file is gone, damaged or encrypted, or has no such page."""


@dataclass(frozen=True)
class PageSize:
    """A page's size in PDF points (1/72 inch) or an image's in pixels, for drawing a marked region
    over its image."""

    width: float
    height: float


def pages_cache_dir() -> Path:
    return Path(settings.DATA_DIR) / "cache" / "pages"


def _open(path: Path):  # pypdfium2.PdfDocument
    import pypdfium2

    if not path.is_file():
        raise PageUnavailable("The document's file is not kept on this server.")
    try:
        return pypdfium2.PdfDocument(path)
    except pypdfium2.PdfiumError as error:
        raise PageUnavailable(f"The PDF cannot be opened: {error}.") from None


def _open_image(path: Path, number: int):  # PIL.Image.Image, at frame `number`
    from engine.ocr import open_image

    if not path.is_file():
        raise PageUnavailable("The document's file is not kept on this server.")
    try:
        image = open_image(path, ReadOptions())
    except DocumentError as error:
        raise PageUnavailable(f"The image cannot be shown: {error}.") from None
    frames = getattr(image, "n_frames", 1)
    if not 1 <= number <= frames:
        image.close()
        raise PageUnavailable(f"The document has no page {number}.")
    if frames > 1:
        image.seek(number - 1)
    return image


def page_size(path: Path, number: int, *, document_format: str) -> PageSize:
    """The size of 1-based page `number` of the document at `path` (a PDF, or an image of
    `IMAGE_FORMATS`); PageUnavailable when there is none."""
    if document_format in IMAGE_FORMATS:
        with _open_image(path, number) as image:
            return PageSize(float(image.width), float(image.height))
    pdf = _open(path)
    try:
        if not 1 <= number <= len(pdf):
            raise PageUnavailable(f"The document has no page {number}.")
        width, height = pdf.get_page_size(number - 1)
        return PageSize(width, height)
    finally:
        pdf.close()


def _render(path: Path, number: int, target: Path) -> None:
    pdf = _open(path)
    try:
        if not 1 <= number <= len(pdf):
            raise PageUnavailable(f"The document has no page {number}.")
        page = pdf[number - 1]
        width, height = page.get_size()
        scale = min(PAGE_IMAGE_MAX_PIXELS / max(width, height, 1.0), 4.0)
        image = page.render(scale=scale).to_pil()
        temporary = target.with_name(f".{uuid.uuid4().hex}.png")
        # zlib level 6 (the default): "optimize" took ~1 s more a page for 3 % fewer bytes.
        image.save(temporary, format="PNG")
        os.replace(temporary, target)  # a reader sees the whole image or none
    finally:
        pdf.close()


def _render_image(path: Path, number: int, target: Path) -> None:
    temporary = target.with_name(f".{uuid.uuid4().hex}.png")
    with _open_image(path, number) as image:
        try:
            image.thumbnail((PAGE_IMAGE_MAX_PIXELS, PAGE_IMAGE_MAX_PIXELS))  # reduced before converted
            frame = image if image.mode in _PNG_MODES else image.convert("RGB")
            frame.save(temporary, format="PNG")
        except (OSError, SyntaxError, ValueError) as error:  # truncated or damaged pixels
            temporary.unlink(missing_ok=True)
            raise PageUnavailable(f"The image cannot be shown: {error}.") from None
    os.replace(temporary, target)  # a reader sees the whole image or none


def _trim(directory: Path, limit: int, keep: Path) -> None:
    """Delete the least recently written images, never `keep` (the one being served), until the
    cache holds at most `limit` bytes."""
    images = sorted((p.stat().st_mtime, p.stat().st_size, p) for p in directory.rglob("*.png"))
    total = sum(size for _, size, _ in images)
    for _, size, image in images:
        if total <= limit:
            break
        if image != keep:
            image.unlink(missing_ok=True)
            total -= size


def page_image(*, path: Path, sha256: str, number: int, document_format: str) -> Path:
    """The PNG of 1-based page `number` of the document at `path` (content hash `sha256`; a PDF, or an
    image of `IMAGE_FORMATS`), rendered once and then served from the cache. Raises PageUnavailable
    (no file, damaged, no such page)."""
    directory = pages_cache_dir() / sha256[:64]
    target = directory / f"{number}.png"
    if target.is_file():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    if document_format in IMAGE_FORMATS:
        _render_image(path, number, target)
    else:
        _render(path, number, target)
    try:
        _trim(pages_cache_dir(), PAGE_CACHE_MAX_BYTES, keep=target)
    except OSError:  # another request trimming at once; the next render trims again
        logger.warning("page cache: trimming failed", exc_info=True)
    return target
