"""PDF (pypdf): one part per page, place {"page": n}; a page's ruled tables as rows with their headers,
each table a part with its page and region (`engine.readers.pdf_tables`, pdfplumber).

A PDF starts with ``%PDF-``. A page without a text layer (a scan) is read by OCR when the corpus
allows it (`ReadOptions.ocr`, `engine.ocr.ocr_pdf_page`): each block of its text is a part placed at
its page and its region on the page image. With OCR off such pages are yielded with "" so the caller
can count them, and a PDF with no text layer at all is refused with that reason; encrypted and
damaged files raise DocumentError. An upload's validation (`ReadOptions.defer_ocr`) does not OCR: the
text-less pages are yielded as `ocr_pending` parts once PDFium opens them and they are not blank
(`engine.ocr.PdfPageCheck`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from engine.readers import Clock, DocumentError, Part, Reader, ReadOptions
from engine.readers.pdf_tables import PdfTables

PDF_MAGIC = b"%PDF-"


def sniff(head: bytes, suffix: str) -> bool:
    if head.startswith(PDF_MAGIC):
        return True
    if suffix == ".pdf":
        raise DocumentError(f"not a PDF file (content starts with {head[:8]!r})")
    return False


def read(path: Path, options: ReadOptions) -> Iterator[Part]:
    """The pages' text in order, each with its 1-based page number."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(path)
        if reader.is_encrypted:
            raise DocumentError("the PDF is encrypted; upload an unprotected copy")
        pages = reader.pages
        if len(pages) > options.max_pages:
            raise DocumentError(f"the PDF has {len(pages):,} pages, more than the limit of "
                                f"{options.max_pages:,}")
        yield from _pages(path, pages, options)
    except PdfReadError as error:
        raise DocumentError(f"damaged PDF: {error}") from None


def _pages(path: Path, pages: Sequence[Any], options: ReadOptions) -> Iterator[Part]:
    from engine.ocr import PdfPageCheck, ocr_pdf_page

    clock, text_layer = Clock(options, "PDF"), False
    check, tables = PdfPageCheck(path), PdfTables(path)
    try:
        for number, page in enumerate(pages, start=1):
            clock.check()
            text, share = (page.extract_text() or "").strip(), number / len(pages)
            text_layer = text_layer or bool(text)
            if text and tables.ruled(number) and (parts := tables.parts(number, share)):
                yield from parts
            elif text or not options.ocr:
                yield Part(text, {"page": number}, share)
            elif options.defer_ocr:  # an upload: the page opens and is not blank; the build reads it
                yield Part("", {"page": number}, share, ocr_pending=check.pending(number))
            else:
                yield from ocr_pdf_page(path, number, options, share=share, clock=clock)
    finally:
        check.close()
        tables.close()
    if len(pages) and not text_layer and not options.ocr:
        raise DocumentError("the PDF has no text layer (a scan?) and OCR is off for this corpus")


READERS = (Reader("pdf", (".pdf",), sniff, read, "PDF"),)
