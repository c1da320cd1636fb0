"""Scans made from real text: a page of text drawn with a real TrueType font (DejaVu Serif, from
Debian's fonts-dejavu-core or matplotlib's copy), at a chosen resolution, with a slight skew and
scanner noise, as a Pillow image; and image-only PDFs of such pages (Pillow's PDF writer).

The source text is the Python standard library's own documentation (docstrings), so a character
error rate can be measured against exactly the text the page was rendered from.
"""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PIL.Image import Image

_FONT_PATHS = ("/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf",)
A4_INCHES = (8.27, 11.69)


def font_path() -> Path:
    """A DejaVu Serif TrueType file on this machine (Debian's, else matplotlib's)."""
    for candidate in _FONT_PATHS:
        if Path(candidate).is_file():
            return Path(candidate)
    try:
        import matplotlib

        bundled = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSerif.ttf"
    except ImportError:
        bundled = None
    if bundled is not None and bundled.is_file():
        return bundled
    raise FileNotFoundError("no DejaVu Serif font: apt-get install fonts-dejavu-core")


def python_doc_paragraphs(count: int = 4, *, min_chars: int = 300) -> list[str]:
    """`count` paragraphs of the Python documentation's prose (docstrings of well-known functions,
    whitespace joined, reStructuredText's ``literal`` marks removed as a reader would see them)."""
    import collections
    import json
    import shutil
    import textwrap as wrap_module

    sources = (json.dumps, wrap_module.wrap, inspect.getsource, inspect.cleandoc, shutil.copytree,
               collections.namedtuple, json.loads, shutil.rmtree)
    found = []
    for source in sources:
        text = " ".join(inspect.cleandoc(source.__doc__ or "").replace("``", "").split())
        if len(text) >= min_chars:
            found.append(text)
    return found[:count]


def render_page(text: str, dpi: int, *, skew: float = 0.0, noise: float = 0.0, seed: int = 0,
                size_inches: tuple[float, float] = A4_INCHES, points: float = 11.0,
                columns: int = 80, margin_inches: float = 0.8) -> tuple[Image, str]:
    """`text` wrapped at `columns` characters and drawn black on white at `points` (a page of
    `size_inches` at `dpi`, `margin_inches` from its top left), its paragraphs (split at blank
    lines) apart by a blank line, rotated by `skew` degrees, with Gaussian noise of `noise` grey
    levels. Returns (the greyscale page, the text as drawn: its lines joined by newlines, a blank
    line between paragraphs; lines below the bottom margin are left out)."""
    import numpy as np
    from PIL import Image as PILImage
    from PIL import ImageDraw, ImageFont

    font_px = round(points / 72 * dpi)
    font = ImageFont.truetype(str(font_path()), font_px)
    width, height = round(size_inches[0] * dpi), round(size_inches[1] * dpi)
    page = PILImage.new("L", (width, height), 255)
    draw = ImageDraw.Draw(page)
    margin = round(margin_inches * dpi)
    lines: list[str] = []
    for paragraph in text.split("\n\n"):
        lines += [*([""] if lines else []), *textwrap.wrap(paragraph, width=columns)]
    step = round(font_px * 1.4)
    lines = lines[: max(0, (height - 2 * margin) // step)]  # what fits on the page is what is drawn
    for number, line in enumerate(lines):
        draw.text((margin, margin + number * step), line, font=font, fill=0)
    if skew:
        page = page.rotate(skew, resample=PILImage.Resampling.BICUBIC, fillcolor=255)
    if noise:
        grey = np.asarray(page, dtype=np.float32)
        grey += np.random.default_rng(seed).normal(0.0, noise, grey.shape).astype(np.float32)
        page = PILImage.fromarray(np.clip(grey, 0, 255).astype(np.uint8))
    return page, "\n".join(lines)


def lines_per_page(dpi: int, *, size_inches: tuple[float, float] = A4_INCHES, points: float = 11.0,
                   margin_inches: float = 0.8) -> int:
    """How many lines `render_page` draws on a page of these measures."""
    step = round(round(points / 72 * dpi) * 1.4)
    return (round(size_inches[1] * dpi) - 2 * round(margin_inches * dpi)) // step


def save_image_pdf(pages: list[Image], path: Path, dpi: int) -> Path:
    """An image-only PDF of `pages` (no text layer: a scan), written by Pillow's PDF writer."""
    first, *rest = [page.convert("RGB") for page in pages]
    first.save(path, "PDF", resolution=float(dpi), save_all=True, append_images=rest)
    return path
