"""Images (PNG, JPEG, TIFF, WebP) read by OCR (`engine.ocr`): a whiteboard photo, a scanned page.

Each block of text (a paragraph) found on an image is a Part placed at its page (1; the frame of a
multi-page TIFF) and its `region` on that page. An image has no text layer: with OCR off for the
corpus it is refused with that reason, as is one over the pixel or page caps, a damaged one, and
one on which OCR finds no text. An upload's validation (`ReadOptions.defer_ocr`) checks each frame by
decode and caps only and yields it as an `ocr_pending` part (a blank one refused): the OCR is the build's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from engine.ocr import check_image, check_pixels, ocr_parts, open_image
from engine.readers import Clock, DocumentError, Part, Reader, ReadOptions

OCR_OFF = "an image has no text layer and OCR is off for this corpus"


def read_image(path: Path, options: ReadOptions) -> Iterator[Part]:
    """The OCR text of every frame of the image at `path`, block by block (see the module)."""
    if not options.ocr:
        raise DocumentError(OCR_OFF)
    clock = Clock(options, "image")
    with open_image(path, options) as image:
        frames = getattr(image, "n_frames", 1)
        if frames > options.max_pages:
            raise DocumentError(f"the image has {frames:,} pages, over the cap of {options.max_pages:,}")
        found = False
        for number in range(1, frames + 1):
            clock.check()
            if frames > 1:
                image.seek(number - 1)
                check_pixels(image.width, image.height, options)
            if options.defer_ocr:
                inked = check_image(image)
                found = found or inked
                yield Part("", {"page": number}, number / frames, ocr_pending=inked)
                continue
            page = image.copy() if frames > 1 else image
            for part in ocr_parts(page, number, number / frames):
                found = True
                yield part
    if not found:
        raise DocumentError("the image is blank: it has no text to read" if options.defer_ocr
                            else "OCR found no text on the image")


def _sniffer(name: str, suffixes: tuple[str, ...], *magics: bytes,
             webp: bool = False) -> Callable[[bytes, str], bool]:
    def sniff(head: bytes, suffix: str) -> bool:
        if any(head.startswith(magic) for magic in magics) and (not webp or head[8:12] == b"WEBP"):
            return True
        if suffix in suffixes:
            raise DocumentError(f"not a {name} image (content starts with {head[:8]!r})")
        return False

    return sniff


READERS = (
    Reader("png", (".png",), _sniffer("PNG", (".png",), b"\x89PNG\r\n\x1a\n"), read_image, "PNG image"),
    Reader("jpeg", (".jpg", ".jpeg"), _sniffer("JPEG", (".jpg", ".jpeg"), b"\xff\xd8\xff"), read_image,
           "JPEG image"),
    Reader("tiff", (".tif", ".tiff"), _sniffer("TIFF", (".tif", ".tiff"), b"II*\x00", b"MM\x00*"), read_image,
           "TIFF image"),
    Reader("webp", (".webp",), _sniffer("WebP", (".webp",), b"RIFF", webp=True), read_image, "WebP image"),
)
