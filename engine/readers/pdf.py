"""PDF (pypdf): one part per page, place {"page": n}.

A PDF starts with ``%PDF-``. Pages without a text layer (scans, blank pages) are yielded with ""
so the caller can count them; encrypted and damaged files raise DocumentError.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from engine.readers import Clock, DocumentError, Part, Reader, ReadOptions

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
        clock = Clock(options, "PDF")
        for number, page in enumerate(pages, start=1):
            clock.check()
            yield Part((page.extract_text() or "").strip(), {"page": number}, number / len(pages))
    except PdfReadError as error:
        raise DocumentError(f"damaged PDF: {error}") from None


READERS = (Reader("pdf", (".pdf",), sniff, read, "PDF"),)
