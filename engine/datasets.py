"""Dataset reading: text extraction, discovery, format sniffing, streaming iteration, chunking.

Formats: ``json`` (a top-level list of records, or an object holding one), ``jsonl`` (one record
per line), ``parquet``, ``text``, ``markdown``, ``html``, ``xml``. Structured records become one
document each through `extract_text`, or, when longer than one window, one per window (a memory
longer than a chat's token budget could never be given to the model); plain text, markdown, and
the readable text of HTML/XML is cut into overlapping windows of ``chunk_size`` tokens
(``chunk_size // 8`` overlap); `engine.markup` reduces HTML/XML to that text.

Errors come in two sizes. A malformed record (a bad JSON line, a record that is not an object, a
record without text) is a `DatasetIssue`: logged, appended to the caller's ``errors`` list, and
skipped. A file that cannot be read at all (binary data, invalid UTF-8, broken JSON array syntax,
a truncated parquet file) raises `DatasetError` naming the file and where it broke.

The parts live in `engine.dataset_formats` (format table, errors, sniffing, discovery),
`engine.dataset_text` (record text, ids), `engine.dataset_readers` (streaming readers) and
`engine.dataset_chunks` (chunking); this module iterates datasets and re-exports their public names.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from engine.dataset_chunks import _chunk_stream, chunk_spans, window_bounds, window_metadata
from engine.dataset_documents import document_records
from engine.dataset_formats import (
    CHUNKED_FORMATS,
    FORMAT_BY_SUFFIX,
    FORMATS,
    DatasetError,
    DatasetIssue,
    DocumentRefused,
    discover_datasets,
    sniff_format,
)
from engine.dataset_readers import (
    MAX_JSON_OBJECT_BYTES,
    RECORD_LIST_KEYS,
    TEXT_COLUMNS,
    _json_records,
    _jsonl_records,
    _parquet_records,
    _Reader,
)
from engine.dataset_text import content_id, extract_text
from engine.markup import MarkupError, html_text, xml_text
from engine.readers import DocumentError, Part, ReadOptions, reader_named
from engine.text_places import TextPlaces
from engine.tokenizer import Tokenizer

__all__ = [
    "CHUNKED_FORMATS",
    "FORMATS",
    "FORMAT_BY_SUFFIX",
    "MAX_JSON_OBJECT_BYTES",
    "RECORD_LIST_KEYS",
    "TEXT_COLUMNS",
    "DatasetError",
    "DatasetIssue",
    "DocumentRefused",
    "chunk_spans",
    "content_id",
    "discover_datasets",
    "extract_text",
    "iter_dataset",
    "sniff_format",
    "validate_dataset",
    "window_bounds",
]

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- iteration

def _records(
    path: Path, fmt: str, reader: _Reader, report: Callable[[str, int, str], None]
) -> Iterator[tuple[str, int, Any]]:
    """(kind, number, record) for the structured formats."""
    if fmt == "parquet":
        for row, record in _parquet_records(reader):
            yield "row", row, record
        return
    with open(path, "rb") as handle:
        if fmt == "jsonl":
            for line, record in _jsonl_records(
                reader, handle, lambda number, message: report("line", number, message)
            ):
                yield "line", line, record
        else:
            for item, record in _json_records(reader, handle):
                yield "item", item, record


def _markup_text(path: Path, fmt: str, reader: _Reader, places: TextPlaces) -> Iterator[str]:
    with open(path, "rb") as handle:
        try:
            if fmt == "html":
                yield from html_text(reader.blocks(handle), places.heading)
            elif fmt == "xml":
                yield from xml_text(reader.raw_blocks(handle))
            else:
                yield from reader.blocks(handle)
        except MarkupError as error:
            raise DatasetError(f"{path}: {error}") from None


def _iter(path: Path, tokenizer: Tokenizer | None, chunk_size: int, on_issue: Callable[[DatasetIssue], None],
          source: str | None, fmt: str | None, reader: _Reader,
          options: ReadOptions | None = None,
          on_pending: Callable[[Part], None] | None = None) -> Iterator[dict]:
    fmt = fmt or sniff_format(path)
    source = source or path.name

    def report(kind: str, number: int, message: str) -> None:
        issue = DatasetIssue(str(path), kind, number, message)
        logger.warning("skipped record: %s", issue)
        on_issue(issue)

    document_reader = reader_named(fmt)
    if document_reader is not None:
        try:
            yield from document_records(path, document_reader, options or ReadOptions(), reader, tokenizer,
                                        chunk_size, source, report, on_pending)
        except DocumentError as error:
            raise DocumentRefused(path, str(error)) from None
        return
    if fmt in CHUNKED_FORMATS:
        places = TextPlaces(fmt)
        text_pieces = places.watch(_markup_text(path, fmt, reader, places))
        for char_start, text, n_tokens, index in _chunk_stream(text_pieces, tokenizer, chunk_size):
            metadata = {"source": source, "format": fmt, "record": index,
                        **window_metadata(char_start, text, n_tokens), **places.place(char_start, text)}
            yield {"id": content_id(text), "text": text, "metadata": metadata}
        return
    for kind, number, record in _records(path, fmt, reader, report):
        if not isinstance(record, dict):
            report(kind, number, f"record is a {type(record).__name__}, expected an object")
            continue
        try:
            text = extract_text(record)
        except RecursionError:  # content parts nested nearly as deep as the parser allows
            report(kind, number, "record nested too deeply")
            continue
        if not text:
            report(kind, number, f"no text found (keys: {', '.join(list(record)[:12]) or 'none'})")
            continue
        yield from _record_documents(
            text, tokenizer, chunk_size, {"source": source, "format": fmt, "record": number}
        )


def _record_documents(
    text: str, tokenizer: Tokenizer | None, chunk_size: int, metadata: dict
) -> Iterator[dict]:
    """A structured record's documents: the record whole, or, when it is longer than one window of
    `chunk_size` tokens, its overlapping windows as a text's, each with metadata ``part`` (0-based),
    ``char_start``/``char_end`` in the record's text and ``tokens``. A record of at most `chunk_size`
    UTF-8 bytes is not tokenized here: a token covers at least one byte."""
    if len(text.encode("utf-8")) > chunk_size:
        windows = list(_chunk_stream([text], tokenizer, chunk_size))
        if len(windows) > 1:
            for char_start, window, n_tokens, part in windows:
                yield {
                    "id": content_id(window),
                    "text": window,
                    "metadata": {**metadata, "part": part, **window_metadata(char_start, window, n_tokens)},
                }
            return
    yield {"id": content_id(text), "text": text, "metadata": metadata}


def iter_dataset(path: str | Path, tokenizer: Tokenizer | None = None, chunk_size: int = 1024, *,
                 errors: list[DatasetIssue] | None = None, source: str | None = None,
                 format: str | None = None, options: ReadOptions | None = None) -> Iterator[dict]:
    """Stream the documents of one dataset file.

    Yields ``{"id": content_id(text), "text": str, "metadata": {"source", "format", "record", ...}}``.
    ``record`` is the 1-based line (JSONL), the 0-based item (JSON list) or row (parquet), or the
    0-based chunk index (text formats, whose metadata adds ``char_start``/``char_end`` in the
    readable text, and ``tokens``: the window length, in whitespace words when no tokenizer is given).
    A structured record longer than one window yields one document per window, with ``part`` and
    the same ``char_start``/``char_end``/``tokens`` in the record's text. `source` defaults to
    the file name; `format` defaults to `sniff_format(path)`. A document read by its `engine.readers`
    reader (PDF, XLSX, PPTX, mail, source code, ...) under `options` (the corpus's caps and OCR;
    defaults without) gives each part's windows, with the part's place (a mail's header fields too;
    ``lines`` narrowed to the window's) in their metadata; what the reader skips is an issue of kind
    "part". Markdown and text windows carry ``lines``, Markdown and HTML ones ``headings``
    (`engine.text_places`). Skipped records are logged and
    appended to `errors` as DatasetIssue; unreadable files raise DatasetError.
    """
    path = Path(path)
    if format is not None and format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(sorted(FORMATS))}, got {format!r}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    on_issue = errors.append if errors is not None else _ignore
    return _iter(path, tokenizer, chunk_size, on_issue, source, format, _Reader(path), options)


def _ignore(issue: DatasetIssue) -> None:
    """Issues are always logged; without an `errors` list there is nothing more to do."""


DOCUMENT_RECORDS_TO_CHECK = 200


class _EnoughChecked(Exception):
    pass


def validate_dataset(path: str | Path, max_records_to_check: int = 1000, *,
                     tokenizer: Tokenizer | None = None, chunk_size: int = 1024,
                     options: ReadOptions | None = None) -> dict:
    """Check an uploaded file by reading up to `max_records_to_check` documents.

    Returns ``{"path", "format", "size", "records_checked", "records_valid", "record_estimate",
    "complete" (the whole file was read), "issues": first 20 issue strings, "issue_count",
    "ocr_pending", "notes"}``. Text formats count chunks of `chunk_size` tokens of `tokenizer` (the
    build's, for an estimate that matches the build; without one, whitespace words stand in). Images
    and PDF pages without a text layer are not read by OCR here (seconds of CPU a page, in an upload's
    request): they are checked by decode and caps (`ReadOptions.defer_ocr`), counted in
    ``ocr_pending`` and as one record each in the estimate (then never "complete"), and ``notes``
    says their text is read at build time. Raises DatasetError when the file is unreadable or none of
    the checked records has text (nor a page left to OCR).
    """
    path = Path(path)
    fmt = sniff_format(path)
    if reader_named(fmt) is not None:
        # A document's record is a page, a slide or 50 rows: fewer of them tell its shape, and an
        # upload's check of a 100,000-row workbook stays seconds (the parts' shares extrapolate).
        max_records_to_check = min(max_records_to_check, DOCUMENT_RECORDS_TO_CHECK)
    options = dataclasses.replace(options or ReadOptions(), defer_ocr=True)
    errors: list[DatasetIssue] = []
    reader = _Reader(path)
    valid = pending = 0

    def enough() -> bool:
        return valid + pending + len(errors) >= max_records_to_check

    def on_issue(issue: DatasetIssue) -> None:
        errors.append(issue)
        if enough():
            raise _EnoughChecked

    def on_pending(part: Part) -> None:
        nonlocal pending
        pending += 1
        if enough():
            raise _EnoughChecked

    records = _iter(path, tokenizer, chunk_size, on_issue, None, fmt, reader, options, on_pending)
    complete = False
    try:
        for _ in records:
            valid += 1
            if enough():
                break
        else:
            complete = True
    except _EnoughChecked:
        pass
    finally:
        records.close()
    checked = valid + len(errors)
    if valid + pending == 0:
        first = f": {errors[0]}" if errors else ""
        raise DatasetError(f"{path}: no readable records in the first {checked} checked{first}")
    return _validation(path, fmt, reader, complete, valid, pending, errors)


def _validation(path: Path, fmt: str, reader: _Reader, complete: bool, valid: int, pending: int,
                errors: list[DatasetIssue]) -> dict:
    """`validate_dataset`'s answer, the record count estimated from what was read."""
    size = path.stat().st_size
    if complete:
        estimate = valid + pending
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        estimate = pq.ParquetFile(path).metadata.num_rows
    else:
        estimate = round((valid + pending) * size / max(1, reader.bytes_read))
    notes = []
    if pending:
        noun = "page has" if pending == 1 else "pages have"
        notes.append(f"{pending:,}{'' if complete else '+'} {noun} no text layer: the text will be read "
                     "by OCR when the corpus is built (the record count is an estimate until then)")
    return {"path": str(path), "format": fmt, "size": size, "records_checked": valid + pending + len(errors),
            "records_valid": valid, "record_estimate": estimate, "complete": complete and not pending,
            "issues": [str(issue) for issue in errors[:20]], "issue_count": len(errors),
            "ocr_pending": pending, "notes": notes}
