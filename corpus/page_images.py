"""Pages of a PDF document as PNG images for the document view, rendered on the server with pypdfium2
(PDFium) and kept on disk under DATA_DIR/cache/pages: the view loads nothing from outside the portal.

Bounded: a page is rendered with its longer side at most `PAGE_IMAGE_MAX_PIXELS` pixels, whatever its
size in points, and the cache is trimmed, oldest first, to `PAGE_CACHE_MAX_BYTES` after each render.
A cached image is named by the document's content hash, so a replaced document never shows an old page.
"""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from core.errors import ApplicationError

logger = logging.getLogger(__name__)

PAGE_IMAGE_MAX_PIXELS = 1600
PAGE_CACHE_MAX_BYTES = 256 * 1024 * 1024


class PageUnavailable(ApplicationError):
    """The page cannot be shown: the file is gone, damaged or encrypted, or has no such page."""


@dataclass(frozen=True)
class PageSize:
    """A page's size in PDF points (1/72 inch), for drawing a marked region over its image."""

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


def page_size(path: Path, number: int) -> PageSize:
    """The size of 1-based page `number` of the PDF at `path`; PageUnavailable when there is none."""
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


def page_image(*, path: Path, sha256: str, number: int) -> Path:
    """The PNG of 1-based page `number` of the PDF at `path` (content hash `sha256`), rendered once
    and then served from the cache. Raises PageUnavailable (no file, not a PDF, no such page)."""
    directory = pages_cache_dir() / sha256[:64]
    target = directory / f"{number}.png"
    if target.is_file():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    _render(path, number, target)
    try:
        _trim(pages_cache_dir(), PAGE_CACHE_MAX_BYTES, keep=target)
    except OSError:  # another request trimming at once; the next render trims again
        logger.warning("page cache: trimming failed", exc_info=True)
    return target
