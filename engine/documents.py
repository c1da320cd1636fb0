"""Text of office documents: PDF (pypdf) and DOCX (python-docx), as (page, text) pieces.

The dataset reader (`engine.datasets`) chunks each piece on its own, so every memory of a PDF
carries the 1-based page it came from. A DOCX file has no stored pagination (pages exist only
once a word processor lays it out), so its paragraphs form one piece with page None.

Both formats are recognised by content: a PDF starts with ``%PDF-``; a DOCX is a ZIP archive
holding ``word/document.xml``. Encrypted, damaged or text-less files raise DocumentError with a
message a user can act on.
"""

from __future__ import annotations

import logging
import zipfile
from collections.abc import Iterator
from pathlib import Path

from engine.dataset_chunks import _chunk_stream, window_metadata
from engine.dataset_text import content_id

logger = logging.getLogger(__name__)

DOCUMENT_FORMAT_BY_SUFFIX = {".pdf": "pdf", ".docx": "docx"}
DOCUMENT_FORMATS = frozenset(DOCUMENT_FORMAT_BY_SUFFIX.values())
PDF_MAGIC = b"%PDF-"
ZIP_MAGIC = b"PK\x03\x04"


class DocumentError(ValueError):
    """A document whose text cannot be read; the message says why."""


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


def _pdf_pages(path: Path) -> Iterator[tuple[int, str, float]]:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(path)
        if reader.is_encrypted:
            raise DocumentError("the PDF is encrypted; upload an unprotected copy")
        pages = reader.pages
        for number, page in enumerate(pages, start=1):
            yield number, (page.extract_text() or "").strip(), number / len(pages)
    except PdfReadError as error:
        raise DocumentError(f"damaged PDF: {error}") from None


def _docx_paragraphs(path: Path) -> Iterator[tuple[int | None, str, float]]:
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
    yield None, "\n\n".join(part for part in parts if part), 1.0


def document_pages(path: str | Path, fmt: str) -> Iterator[tuple[int | None, str, float]]:
    """(page, text, share of the document read so far) in order: 1-based pages of a PDF, one
    (None, text, 1.0) of a DOCX. The share lets a partial read extrapolate a record count.

    Pages without text (scans, blank pages) are yielded with "" so callers can count them;
    raises DocumentError when the file cannot be read.
    """
    path = Path(path)
    if fmt == "pdf":
        yield from _pdf_pages(path)
    elif fmt == "docx":
        yield from _docx_paragraphs(path)
    else:
        raise ValueError(f"fmt must be one of {', '.join(sorted(DOCUMENT_FORMATS))}, got {fmt!r}")


def document_records(path: Path, fmt: str, reader, tokenizer, chunk_size: int,
                     source: str) -> Iterator[dict]:
    """The dataset records of a PDF/DOCX (`engine.datasets.iter_dataset`'s shape): each page is
    chunked on its own, so every memory of a PDF names its `page` in the metadata. `reader` is
    the dataset reader whose `bytes_read` estimates progress for a partial validation. Raises
    DocumentError for a document that cannot be read (the dataset reader names the file)."""
    record, size = 0, path.stat().st_size
    for page, text, share in document_pages(path, fmt):
        for char_start, chunk, n_tokens, _ in _chunk_stream([text], tokenizer, chunk_size):
            metadata = {"source": source, "format": fmt, "record": record,
                        **window_metadata(char_start, chunk, n_tokens)}
            if page is not None:
                metadata["page"] = page
            record += 1
            yield {"id": content_id(chunk), "text": chunk, "metadata": metadata}
        reader.bytes_read = round(size * share)
