"""Dataset formats: the format table, the two error types, content sniffing and discovery.

Part of `engine.datasets` (which re-exports every public name here); split out so that each
module has one purpose.
"""

from __future__ import annotations

import codecs
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.readers import DocumentError, reader_for, reader_suffixes
from engine.readers.packages import OLE_MAGIC, ZIP_MAGIC

FORMAT_BY_SUFFIX = {
    ".json": "json", ".jsonl": "jsonl", ".parquet": "parquet", ".txt": "text", ".md": "markdown",
    ".markdown": "markdown", ".html": "html", ".htm": "html", ".xml": "xml",
    # The documents' formats, read by `engine.readers` (PDF, DOCX, XLSX, ODS, CSV, PPTX, ODP, ODT, EPUB, ...).
    **reader_suffixes(),
}
FORMATS = frozenset(FORMAT_BY_SUFFIX.values())
CHUNKED_FORMATS = frozenset({"text", "markdown", "html", "xml"})

_SNIFF_BYTES = 64 * 1024
# The binary Office formats before 2007, which no reader reads: what to save each as instead.
_OLD_OFFICE = {".doc": "Word document (DOCX)", ".dot": "Word document (DOCX)",
               ".xls": "Excel workbook (XLSX)", ".xlt": "Excel workbook (XLSX)",
               ".ppt": "PowerPoint presentation (PPTX)", ".pps": "PowerPoint presentation (PPTX)",
               ".pot": "PowerPoint presentation (PPTX)"}
_NUL = b"\x00"


class DatasetError(ValueError):
    """A dataset file that cannot be read at all; the message names the file and the problem."""


class DocumentRefused(DatasetError):
    """A document its format's reader refuses (`engine.readers.DocumentError`), perhaps part way through
    (a sheet over the row cap, the time cap, no text found by OCR): `reason` without the path. A build
    skips that document with the reason and goes on (`engine.build`)."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.reason = reason


@dataclass(frozen=True)
class DatasetIssue:
    """One skipped record: `kind` is "line" (JSONL, 1-based), "item" (JSON list) or "row" (parquet), "part"
    (a piece a document's reader skipped), or "document" (a whole document a build skipped; number 0)."""

    path: str
    kind: str
    number: int
    message: str

    def __str__(self) -> str:
        if self.kind == "document":
            return f"{self.path}: {self.message}"
        return f"{self.path}: {self.kind} {self.number}: {self.message}"



# ----------------------------------------------------------------------------- sniffing

def _decode_head(head: bytes, label: str, complete: bool) -> str:
    if _NUL in head:
        raise DatasetError(
            f"{label}: binary data (NUL byte at byte offset {head.index(_NUL)}), not a text dataset"
        )
    try:
        return codecs.getincrementaldecoder("utf-8-sig")().decode(head, final=complete)
    except UnicodeDecodeError as error:
        raise DatasetError(f"{label}: invalid UTF-8 at byte offset {error.start}") from None


def _too_deep() -> json.JSONDecodeError:
    """Python's parser gives up on nesting deeper than the interpreter's recursion limit with a
    RecursionError; to a dataset that is just one more kind of invalid JSON."""
    return json.JSONDecodeError("nested too deeply", "", 0)


def _is_json_container(line: str) -> bool:
    try:
        return isinstance(json.loads(line), (dict, list))
    except (json.JSONDecodeError, RecursionError):
        return False


def _sniff_json(text: str, complete: bool, suffix_format: str | None, label: str) -> str | None:
    """"json" / "jsonl" when `text` (a file head starting with a bracket) is JSON, None when not.

    A whole file that parses is JSON (JSONL with two or more records never does); otherwise it is
    JSONL when at least half of its first lines parse alone, so a few bad lines stay per-record
    issues instead of condemning the file.
    """
    whole_error = None
    if complete:
        try:
            json.loads(text)
            one_line = len(text.strip().splitlines()) == 1
            return "jsonl" if one_line and suffix_format == "jsonl" else "json"
        except json.JSONDecodeError as error:
            whole_error = error
        except RecursionError:
            whole_error = _too_deep()
    lines = [line for line in text.splitlines() if line.strip()]
    if not complete and len(lines) > 1:
        lines.pop()  # the last line of a cut head may itself be cut
    sample = lines[:100]
    if len(sample) > 1 and 2 * sum(map(_is_json_container, sample)) >= len(sample):
        return "jsonl"
    if whole_error is None:
        # A head cut out of a large document (or out of one huge line) cannot parse: trust the
        # opening bracket, and the extension to tell a JSON document from JSON lines.
        return (
            suffix_format if suffix_format in ("json", "jsonl") else "json" if suffix_format is None else None
        )
    if suffix_format in ("json", "jsonl"):
        raise DatasetError(f"{label}: not valid JSON: {whole_error.msg} at line {whole_error.lineno} "
                           f"column {whole_error.colno}")
    return None


_HTML_ROOT = re.compile(r"<(?:!doctype\s+html|html|head|body)\b", re.IGNORECASE)


def sniff_format(source: str | Path | bytes, filename: str | None = None) -> str:
    """Detect a dataset's format from its content; returns one of the `FORMAT_BY_SUFFIX` values.

    `source` is a path or the file's bytes (its head at least; whole bytes also let a truncated
    parquet file be caught by its missing footer). `filename` (default: the path's name) is used
    only where content cannot decide: text vs markdown, a single-line JSON object (``.jsonl`` keeps
    it JSONL), an HTML fragment. Content wins over the extension otherwise (a ``.json`` holding JSON
    lines is "jsonl"); a name without an extension, or with one the portal does not know ("GPL-3",
    "Apache-2.0"), is sniffed like any other (text when it is UTF-8 text). Raises DatasetError for
    binary or non-UTF-8 content,
    an empty file, or content that contradicts a structured extension (a ``.json`` that is not
    JSON, a ``.parquet`` without the PAR1 magic, a ``.xml`` that is not markup).
    """
    sample = _read_sample(source, filename)
    binary = _sniff_binary(sample)
    if binary:
        return binary
    return _sniff_text(sample, _decode_sample(sample))


@dataclass(frozen=True)
class _Sample:
    """What sniffing looks at: the file's first `_SNIFF_BYTES` and last 4 bytes, whether the head is
    the whole file, the name for messages, and the extension's format (`unknown`: an extension the
    portal does not know, which then counts for nothing)."""

    head: bytes
    tail: bytes
    complete: bool
    label: str
    suffix: str
    suffix_format: str | None
    unknown: str


def _read_sample(source: str | Path | bytes, filename: str | None) -> _Sample:
    if isinstance(source, bytes):
        head, tail, complete = source[:_SNIFF_BYTES], source[-4:], len(source) <= _SNIFF_BYTES
        label = filename or "<upload>"
    else:
        path = Path(source)
        label, filename = str(path), filename or path.name
        try:
            with open(path, "rb") as handle:
                head = handle.read(_SNIFF_BYTES)
                complete = not handle.read(1)
                handle.seek(max(0, handle.seek(0, 2) - 4))
                tail = handle.read(4)
        except OSError as error:
            raise DatasetError(f"{label}: cannot read: {error.strerror or error}") from None
    suffix = Path(filename).suffix.lower() if filename else ""
    suffix_format = FORMAT_BY_SUFFIX.get(suffix)
    unknown = suffix if suffix and suffix_format is None else ""
    if unknown:
        # A name's last dot need not start a type ("Apache-2.0", "notes.v2"): the content decides.
        suffix = ""
    return _Sample(head, tail, complete, label, suffix, suffix_format, unknown)


def _sniff_binary(sample: _Sample) -> str | None:
    """A document reader's format (`engine.readers.reader_for`: by content, or by a name the content
    does not contradict) or parquet, else None (a text format, maybe)."""
    head, label = sample.head, sample.label
    try:
        document = reader_for(head, sample.suffix)
    except DocumentError as error:
        raise DatasetError(f"{label}: {error}") from None
    if document is not None:
        return document.name
    if head.startswith(OLE_MAGIC) and sample.unknown in _OLD_OFFICE:
        raise DatasetError(
            f"{label}: an older binary Office file ({sample.unknown}), which the portal does not read: "
            f"open it in Office or LibreOffice, save it as a {_OLD_OFFICE[sample.unknown]} and upload that"
        )
    if head.startswith(ZIP_MAGIC):
        raise DatasetError(
            f"{label}: unsupported file type {sample.unknown or sample.suffix or '(a ZIP archive)'!r}: "
            f"a ZIP archive is not one dataset (the portal's upload unpacks .zip files into their "
            f"members)"
        )
    if head.startswith(b"PAR1"):
        if sample.tail != b"PAR1" or (sample.complete and len(head) < 8):
            raise DatasetError(f"{label}: truncated parquet file (footer magic PAR1 missing)")
        return "parquet"
    if sample.suffix_format == "parquet":
        raise DatasetError(f"{label}: not a parquet file (no PAR1 magic at the start)")
    return None


def _decode_sample(sample: _Sample) -> str:
    """The head as text; binary or non-UTF-8 content under an unknown extension says which are known."""
    label, unknown = sample.label, sample.unknown
    try:
        return _decode_head(sample.head, label, sample.complete)
    except DatasetError as error:
        if unknown:
            detail = str(error).removeprefix(f"{label}: ")
            raise DatasetError(
                f"{label}: unsupported file type {unknown!r}, and the content is not plain text "
                f"({detail}); supported: {', '.join(sorted(FORMAT_BY_SUFFIX))}, or UTF-8 text "
                f"under any name"
            ) from None
        raise


def _sniff_text(sample: _Sample, text: str) -> str:
    """JSON, JSONL, HTML, XML, or the extension's text format (plain text without one)."""
    label, suffix_format = sample.label, sample.suffix_format
    stripped = text.lstrip()
    if not stripped:
        raise DatasetError(f"{label}: file is empty")
    if stripped[0] in "[{":
        detected = _sniff_json(stripped, sample.complete, suffix_format, label)
        if detected:
            return detected
    if suffix_format in ("json", "jsonl"):
        raise DatasetError(f"{label}: content is not JSON (starts with {stripped[:20]!r})")
    if stripped.startswith("<"):
        if _HTML_ROOT.search(stripped[:4096]):
            return "html"
        if stripped.startswith("<?xml") or suffix_format not in ("text", "markdown", "html"):
            return "xml"
    if suffix_format == "xml":
        raise DatasetError(f"{label}: content is not XML (starts with {stripped[:20]!r})")
    return suffix_format or "text"


# ----------------------------------------------------------------------------- discovery

def discover_datasets(directory: str | Path) -> list[dict]:
    """Indexable files under `directory` (recursive, hidden entries skipped), sorted by name.

    Each entry: ``{"path": Path, "name": str (posix path relative to directory), "format": str |
    None, "size": int (bytes)}``; a file whose content cannot be sniffed has format None and an
    ``"error"`` message instead of raising, so one bad file does not hide the others.
    """
    root = Path(directory)
    if not root.is_dir():
        raise DatasetError(f"{root}: not a directory")
    found = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(part.startswith(".") for part in relative.parts) or not path.is_file():
            continue
        if path.suffix.lower() not in FORMAT_BY_SUFFIX:
            continue
        entry: dict[str, Any] = {
            "path": path,
            "name": relative.as_posix(),
            "format": None,
            "size": path.stat().st_size,
        }
        try:
            entry["format"] = sniff_format(path)
        except DatasetError as error:
            entry["error"] = str(error)
        found.append(entry)
    return found


