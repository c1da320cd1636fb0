"""Text of office documents: PDF (pypdf) and DOCX (python-docx), as (page, text) pieces.

The dataset reader (`engine.datasets`) chunks each piece on its own, so every memory of a PDF
carries the 1-based page it came from. A DOCX file has no stored pagination (pages exist only
once a word processor lays it out), so its paragraphs form one piece with page None.

Both formats are recognised by content: a PDF starts with ``%PDF-``; a DOCX is a ZIP archive
holding ``word/document.xml``. Encrypted, damaged or text-less files raise DocumentError with a
message a user can act on. A PDF page without a text layer (a scan) is read by OCR when the
corpus allows it (`ReadOptions.ocr`, `engine.ocr.ocr_pdf_page`): each block of its text is a piece
placed at its page and its region on the page image. A PDF over `ReadOptions.max_pages` is refused
before any page is read.
"""

from __future__ import annotations

import logging
import zipfile
from collections.abc import Iterator
from pathlib import Path

from engine.dataset_chunks import _chunk_stream, window_metadata
from engine.dataset_text import content_id
from engine.readers import DocumentError, ReadOptions

logger = logging.getLogger(__name__)

DOCUMENT_FORMAT_BY_SUFFIX = {".pdf": "pdf", ".docx": "docx"}
DOCUMENT_FORMATS = frozenset(DOCUMENT_FORMAT_BY_SUFFIX.values())
PDF_MAGIC = b"%PDF-"
ZIP_MAGIC = b"PK\x03\x04"


def sniff_document(head: bytes, suffix: str) -> str | None:
    """"pdf" or "docx" when `head` (the file's first bytes) is one, else None.

    A ZIP is only taken for DOCX when the name says so (a ``.zip`` of datasets is unpacked by the
    portal, never indexed as one document); a ``.pdf``/``.docx`` name with other content is an error.
    """
    if head.startswith(PDF_MAGIC):
        return "pdf"
    if head.startswith(ZIP_MAGIC) and suffix == ".docx":
        return "docx"
    if suffix in DOCUMENT_FORMAT_BY_SUFFIX:
        kind = "PDF" if suffix == ".pdf" else "Word (DOCX)"
        raise DocumentError(f"not a {kind} file (content starts with {head[:8]!r})")
    return None


def _pdf_pages(path: Path, options: ReadOptions) -> Iterator[tuple[dict, str, float]]:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    from engine.ocr import Deadline, ocr_pdf_page

    deadline = Deadline(options.max_seconds)
    try:
        reader = PdfReader(path)
        if reader.is_encrypted:
            raise DocumentError("the PDF is encrypted; upload an unprotected copy")
        pages = reader.pages
        if len(pages) > options.max_pages:
            raise DocumentError(f"the PDF has {len(pages):,} pages, over the cap of {options.max_pages:,}; "
                                "split it into smaller files")
        text_layer = False
        for number, page in enumerate(pages, start=1):
            text, share = (page.extract_text() or "").strip(), number / len(pages)
            text_layer = text_layer or bool(text)
            if text or not options.ocr:
                yield {"page": number}, text, share
                continue
            for part in ocr_pdf_page(path, number, options, share=share, deadline=deadline):
                yield part.place, part.text, share
    except PdfReadError as error:
        raise DocumentError(f"damaged PDF: {error}") from None
    if pages and not text_layer and not options.ocr:
        raise DocumentError("the PDF has no text layer (a scan?) and OCR is off for this corpus")


def _docx_paragraphs(path: Path) -> Iterator[tuple[dict, str, float]]:
    import docx
    from docx.opc.exceptions import PackageNotFoundError

    try:
        document = docx.Document(str(path))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError) as error:
        raise DocumentError(f"not a readable Word document: {error}") from None
    parts = [paragraph.text.strip() for paragraph in document.paragraphs]
    # Tables hold much of the text of real reports; their cells come after the body paragraphs.
    for table in document.tables:
        for row in table.rows:
            cells = [cell.text.strip() for cell in row.cells]
            parts.append(" | ".join(cell for cell in cells if cell))
    yield {}, "\n\n".join(part for part in parts if part), 1.0


def document_pages(path: str | Path, fmt: str,
                   options: ReadOptions | None = None) -> Iterator[tuple[dict, str, float]]:
    """(place, text, share of the document read so far) in order: {"page": n} for the 1-based pages
    of a PDF ({"page": n, "region": [l, t, r, b]} for each block of a page read by OCR), one
    ({}, text, 1.0) of a DOCX. The share lets a partial read extrapolate a record count.

    Pages without text (blank pages, scans with OCR off) are yielded with "" so callers can count
    them; raises DocumentError when the file cannot be read.
    """
    path = Path(path)
    if fmt == "pdf":
        yield from _pdf_pages(path, options or ReadOptions())
    elif fmt == "docx":
        yield from _docx_paragraphs(path)
    else:
        raise ValueError(f"fmt must be one of {', '.join(sorted(DOCUMENT_FORMATS))}, got {fmt!r}")


def document_records(path: Path, fmt: str, reader, tokenizer, chunk_size: int,
                     source: str, options: ReadOptions | None = None) -> Iterator[dict]:
    """The dataset records of a PDF/DOCX (`engine.datasets.iter_dataset`'s shape): each page is
    chunked on its own, so every memory of a PDF names its `page` in the metadata. `reader` is
    the dataset reader whose `bytes_read` estimates progress for a partial validation. Raises
    DocumentError for a document that cannot be read (the dataset reader names the file)."""
    record, size = 0, path.stat().st_size
    for place, text, share in document_pages(path, fmt, options):
        for char_start, chunk, n_tokens, _ in _chunk_stream([text], tokenizer, chunk_size):
            metadata = {"source": source, "format": fmt, "record": record,
                        **window_metadata(char_start, chunk, n_tokens), **place}
            record += 1
            yield {"id": content_id(chunk), "text": chunk, "metadata": metadata}
        reader.bytes_read = round(size * share)
