"""Dataset reading: text extraction, discovery, format sniffing, streaming iteration, chunking.

Formats: ``json`` (a top-level list of records, or an object holding one), ``jsonl`` (one record
per line), ``parquet``, ``text``, ``markdown``, ``html``, ``xml``. Structured records become one
document each through `extract_text`; plain text, markdown, and the readable text of HTML/XML is
cut into overlapping windows of ``chunk_size`` tokens (``chunk_size // 8`` overlap); `engine.markup`
reduces HTML/XML to that text.

Errors come in two sizes. A malformed record (a bad JSON line, a record that is not an object, a
record without text) is a `DatasetIssue`: logged, appended to the caller's ``errors`` list, and
skipped. A file that cannot be read at all (binary data, invalid UTF-8, broken JSON array syntax,
a truncated parquet file) raises `DatasetError` naming the file and where it broke.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from engine.documents import (
    DOCUMENT_FORMAT_BY_SUFFIX,
    DOCUMENT_FORMATS,
    DocumentError,
    document_records,
    sniff_document,
)
from engine.markup import MarkupError, html_text, xml_text
from engine.tokenizer import Tokenizer

logger = logging.getLogger(__name__)

FORMAT_BY_SUFFIX = {
    ".json": "json", ".jsonl": "jsonl", ".parquet": "parquet", ".txt": "text", ".md": "markdown",
    ".markdown": "markdown", ".html": "html", ".htm": "html", ".xml": "xml", **DOCUMENT_FORMAT_BY_SUFFIX,
}
FORMATS = frozenset(FORMAT_BY_SUFFIX.values())
CHUNKED_FORMATS = frozenset({"text", "markdown", "html", "xml"})
# Keys under which a top-level JSON object commonly holds its list of records, in priority order.
RECORD_LIST_KEYS = ("data", "records", "items", "rows", "examples", "instances", "documents", "train")
# A top-level JSON *object* is parsed whole; lists and JSONL stream. Past this, ask for JSONL.
MAX_JSON_OBJECT_BYTES = 256 * 1024 * 1024
TEXT_COLUMNS = ("conversations", "messages", "instruction", "input", "output", "prompt", "response",
                "completion", "text", "content")

_BLOCK_BYTES = 1 << 20
_SNIFF_BYTES = 64 * 1024
_SEGMENT_CHARS = 256 * 1024
_NUL = b"\x00"


class DatasetError(ValueError):
    """A dataset file that cannot be read at all; the message names the file and the problem."""


@dataclass(frozen=True)
class DatasetIssue:
    """One skipped record: `kind` is "line" (JSONL, 1-based), "item" (JSON list) or "row" (parquet)."""

    path: str
    kind: str
    number: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.kind} {self.number}: {self.message}"


# ----------------------------------------------------------------------------- text extraction

def _as_text(value: Any) -> str:
    """Plain text of a message body: a string, or OpenAI content parts (only "text" parts count)."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list):
        parts = [_as_text(part) if isinstance(part, str) else
                 _as_text(part.get("text")) if isinstance(part, dict) and part.get("type", "text") == "text" else ""
                 for part in value]
        return "\n".join(part for part in parts if part)
    return ""


def _turns(turns: Any, role_key: str, text_key: str) -> str:
    lines = []
    for turn in turns if isinstance(turns, list) else ():
        if not isinstance(turn, dict):
            continue
        text = _as_text(turn.get(text_key))
        if text:
            role = turn.get(role_key)
            lines.append(f"{role}: {text}" if isinstance(role, str) and role.strip() else text)
    return "\n".join(lines)


def extract_text(item: dict) -> str:
    """The indexable text of one record, or "" when it holds none.

    Schemas, tried in this order (the first that yields text wins):
    - ShareGPT ``conversations: [{from, value}]`` and OpenAI ``messages: [{role, content}]``: one
      ``"<role>: <text>"`` line per turn, joined by "\\n" (a turn without a role is its bare text).
      ``content`` may be a list of parts; the ``{"type": "text", "text": ...}`` parts (and bare
      strings) are joined by "\\n", other parts (images, audio) are ignored.
    - Alpaca ``instruction`` / ``input`` / ``output`` and ``prompt`` / ``response`` / ``completion``:
      the non-empty fields in that order, joined by "\\n", without labels.
    - Raw ``text``, then ``content``.
    Every piece is stripped; empty pieces are dropped.
    """
    if not isinstance(item, dict):
        return ""
    text = _turns(item.get("conversations"), "from", "value") or _turns(item.get("messages"), "role", "content")
    if text:
        return text
    fields = [_as_text(item.get(key)) for key in ("instruction", "input", "output", "prompt", "response", "completion")]
    text = "\n".join(field for field in fields if field)
    return text or _as_text(item.get("text")) or _as_text(item.get("content"))


def content_id(text: str) -> str:
    """Stable document id: blake2b-128 of the UTF-8 text, as 32 hex characters."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


# ----------------------------------------------------------------------------- sniffing

def _decode_head(head: bytes, label: str, complete: bool) -> str:
    if _NUL in head:
        raise DatasetError(f"{label}: binary data (NUL byte at byte offset {head.index(_NUL)}), not a text dataset")
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
        return suffix_format if suffix_format in ("json", "jsonl") else "json" if suffix_format is None else None
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
    lines is "jsonl"). Raises DatasetError for an unsupported extension, binary or non-UTF-8 text,
    an empty file, or content that contradicts a structured extension (a ``.json`` that is not
    JSON, a ``.parquet`` without the PAR1 magic, a ``.xml`` that is not markup).
    """
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
    if suffix and suffix_format is None:
        raise DatasetError(f"{label}: unsupported file type {suffix!r}; supported: {', '.join(sorted(FORMAT_BY_SUFFIX))}")
    try:
        document = sniff_document(head, suffix)
    except DocumentError as error:
        raise DatasetError(f"{label}: {error}") from None
    if document:
        return document
    if head.startswith(b"PAR1"):
        if tail != b"PAR1" or (complete and len(head) < 8):
            raise DatasetError(f"{label}: truncated parquet file (footer magic PAR1 missing)")
        return "parquet"
    if suffix_format == "parquet":
        raise DatasetError(f"{label}: not a parquet file (no PAR1 magic at the start)")
    text = _decode_head(head, label, complete)
    stripped = text.lstrip()
    if not stripped:
        raise DatasetError(f"{label}: file is empty")
    if stripped[0] in "[{":
        detected = _sniff_json(stripped, complete, suffix_format, label)
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
        entry: dict[str, Any] = {"path": path, "name": relative.as_posix(), "format": None, "size": path.stat().st_size}
        try:
            entry["format"] = sniff_format(path)
        except DatasetError as error:
            entry["error"] = str(error)
        found.append(entry)
    return found


# ----------------------------------------------------------------------------- low-level reading

class _Reader:
    """Reads a file as checked UTF-8 text blocks and remembers how far it got (for estimates)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bytes_read = 0

    def blocks(self, handle: IO[bytes], block_bytes: int | None = None) -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8-sig")()
        while True:
            block = handle.read(block_bytes or _BLOCK_BYTES)
            if _NUL in block:
                offset = self.bytes_read + block.index(_NUL)
                raise DatasetError(f"{self.path}: binary data (NUL byte at byte offset {offset})")
            pending = len(decoder.getstate()[0])
            try:
                text = decoder.decode(block, final=not block)
            except UnicodeDecodeError as error:
                offset = self.bytes_read - pending + error.start
                raise DatasetError(f"{self.path}: invalid UTF-8 at byte offset {offset}") from None
            self.bytes_read += len(block)
            if text:
                yield text
            if not block:
                return

    def raw_blocks(self, handle: IO[bytes]) -> Iterator[bytes]:
        """The file's bytes as they are (for parsers that decode themselves)."""
        while block := handle.read(_BLOCK_BYTES):
            self.bytes_read += len(block)
            yield block


def _iter_json_array(reader: _Reader, handle: IO[bytes]) -> Iterator[tuple[int, Any]]:
    """Stream the items of a top-level JSON array without holding the whole file.

    Only a window of the text stays in memory; an item that does not fit is retried with twice
    the text, so parsing stays linear. Broken syntax is fatal: an array cannot be resynchronised.
    """
    decoder = json.JSONDecoder()
    blocks = reader.blocks(handle)
    buffer, pos, lines_before, eof = "", 0, 0, False

    def fail(message: str, at: int) -> DatasetError:
        line = lines_before + buffer.count("\n", 0, at) + 1
        return DatasetError(f"{reader.path}: invalid JSON at line {line}: {message}")

    def fill(minimum: int) -> bool:
        nonlocal buffer, pos, lines_before, eof
        lines_before += buffer.count("\n", 0, pos)
        buffer, pos = buffer[pos:], 0
        while not eof and len(buffer) < minimum:
            block = next(blocks, None)
            if block is None:
                eof = True
            else:
                buffer += block
        return pos < len(buffer)

    def skip_space() -> bool:
        nonlocal pos
        while True:
            while pos < len(buffer) and buffer[pos] in " \t\r\n":
                pos += 1
            if pos < len(buffer) or not fill(_BLOCK_BYTES):
                return pos < len(buffer)

    if not skip_space() or buffer[pos] != "[":
        raise fail("expected a top-level list '['", pos)
    pos += 1
    index = 0
    if skip_space() and buffer[pos] == "]":
        pos += 1
    else:
        while True:
            if not skip_space():
                raise fail("unexpected end of file inside the list", pos)
            want = _BLOCK_BYTES
            while True:
                try:
                    item, end = decoder.raw_decode(buffer, pos)
                    if end < len(buffer) or eof:
                        break
                except json.JSONDecodeError as error:
                    if eof:
                        raise fail(error.msg, error.pos) from None
                except RecursionError:
                    raise fail(_too_deep().msg, pos) from None
                want = max(want, 2 * (len(buffer) - pos))
                fill(want)
            pos = end
            yield index, item
            index += 1
            if not skip_space():
                raise fail("unexpected end of file inside the list", pos)
            if buffer[pos] == "]":
                pos += 1
                break
            if buffer[pos] != ",":
                raise fail(f"expected ',' or ']' after item {index - 1}", pos)
            pos += 1
    if skip_space():
        raise fail("unexpected data after the top-level list", pos)


def _json_records(reader: _Reader, handle: IO[bytes]) -> Iterator[tuple[int, Any]]:
    first = next((char for block in reader.blocks(handle, 4096) for char in block if not char.isspace()), "")
    handle.seek(0)
    reader.bytes_read = 0
    if first == "[":
        yield from _iter_json_array(reader, handle)
        return
    size = reader.path.stat().st_size
    if size > MAX_JSON_OBJECT_BYTES:
        raise DatasetError(f"{reader.path}: a top-level JSON object is parsed whole and this one is {size} bytes "
                           f"(limit {MAX_JSON_OBJECT_BYTES}); store the records as JSONL or a top-level list")
    text = "".join(reader.blocks(handle))
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise DatasetError(f"{reader.path}: invalid JSON at line {error.lineno} column {error.colno}: {error.msg}") from None
    except RecursionError:
        raise DatasetError(f"{reader.path}: invalid JSON: {_too_deep().msg}") from None
    if not isinstance(document, dict):
        raise DatasetError(f"{reader.path}: top-level JSON must be a list of records or an object, got {type(document).__name__}")
    if extract_text(document):
        yield 0, document
        return
    lists = [key for key in RECORD_LIST_KEYS if isinstance(document.get(key), list)]
    lists = lists or [key for key, value in document.items() if isinstance(value, list)]
    if not lists:
        raise DatasetError(f"{reader.path}: JSON object has no text and no list of records (keys: {', '.join(list(document)[:12])})")
    yield from enumerate(document[lists[0]])


def _jsonl_records(reader: _Reader, handle: IO[bytes], errors: Callable[[int, str], None]) -> Iterator[tuple[int, Any]]:
    for number, raw in enumerate(handle, start=1):
        if number == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[3:]
            reader.bytes_read += 3
        if _NUL in raw:
            raise DatasetError(f"{reader.path}: binary data (NUL byte at byte offset {reader.bytes_read + raw.index(_NUL)})")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise DatasetError(f"{reader.path}: invalid UTF-8 at byte offset {reader.bytes_read + error.start}") from None
        reader.bytes_read += len(raw)
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            errors(number, f"invalid JSON: {error.msg} at column {error.colno}")
        except RecursionError:
            errors(number, f"invalid JSON: {_too_deep().msg}")
        else:
            yield number, record


def _parquet_records(reader: _Reader, batch_rows: int = 1024) -> Iterator[tuple[int, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(reader.path)
    except (pa.ArrowException, OSError) as error:
        raise DatasetError(f"{reader.path}: not a readable parquet file: {error}") from None
    names = parquet.schema_arrow.names
    columns = [name for name in TEXT_COLUMNS if name in names]
    if not columns:
        raise DatasetError(f"{reader.path}: parquet file has no text column (columns: {', '.join(names[:20])}; "
                           f"expected one of: {', '.join(TEXT_COLUMNS)})")
    total_rows = max(1, parquet.metadata.num_rows)
    size = reader.path.stat().st_size
    row = 0
    try:
        for batch in parquet.iter_batches(batch_size=batch_rows, columns=columns):
            for record in batch.to_pylist():
                yield row, record
                row += 1
            reader.bytes_read = size * row // total_rows
    except (pa.ArrowException, OSError) as error:
        raise DatasetError(f"{reader.path}: corrupt parquet data near row {row}: {error}") from None


# ----------------------------------------------------------------------------- chunking

def window_bounds(n_units: int, chunk_size: int) -> list[tuple[int, int]]:
    """Overlapping windows ``[start, end)`` over `n_units` tokens: `chunk_size` long, stepping by
    ``chunk_size - chunk_size // 8``, the last one ending exactly at `n_units`. Together they
    cover every unit; consecutive windows share ``chunk_size // 8`` units."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    step = chunk_size - chunk_size // 8
    bounds = []
    start = 0
    while True:
        end = min(start + chunk_size, n_units)
        bounds.append((start, end))
        if end >= n_units:
            return bounds
        start += step


def _token_offsets(text: str, tokens: list[int], marks: list[int], tokenizer: Tokenizer) -> list[int] | None:
    """Character offset in `text` of each token index in `marks` (sorted), or None when the
    tokenizer does not reproduce `text`.

    Offsets grow by detokenizing the tokens from the last clean mark (one pass over the tokens).
    A mark that splits a character's byte-fallback tokens detokenizes to a trailing U+FFFD; it
    maps to the start of that character, so the chunks on both sides keep it whole, and the next
    span is detokenized from the last clean mark again so it never starts inside a character.
    """
    offsets, anchor_token, anchor_char = [], 0, 0
    for mark in marks:
        piece = tokenizer.detokenize(tokens[anchor_token:mark]) if mark > anchor_token else ""
        whole = piece.rstrip("\ufffd")
        if not text.startswith(whole, anchor_char):
            return None
        offsets.append(anchor_char + len(whole))
        if whole == piece:
            anchor_token, anchor_char = mark, anchor_char + len(whole)
    return offsets


def chunk_spans(text: str, tokenizer: Tokenizer | None, chunk_size: int) -> list[tuple[int, int, int]]:
    """Character spans ``(start, end, n_tokens)`` of the overlapping windows of `text`.

    With a tokenizer the windows are `window_bounds` over its tokens, mapped back to character
    offsets so every chunk is exact source text. If the tokenizer does not round-trip the text
    (normalising tokenizers), the spans are estimated proportionally to token positions. Without
    a tokenizer, whitespace-separated words stand in for tokens.
    """
    if tokenizer is None:
        words = [match.span() for match in re.finditer(r"\S+", text)]
        return [(words[start][0], words[end - 1][1], end - start)
                for start, end in window_bounds(len(words), chunk_size) if end > start]
    tokens = tokenizer.tokenize(text)
    bounds = [(start, end) for start, end in window_bounds(len(tokens), chunk_size) if end > start]
    marks = sorted({mark for bound in bounds for mark in bound})
    offsets = _token_offsets(text, tokens, marks, tokenizer)
    if offsets is None:
        offsets = [round(len(text) * mark / len(tokens)) for mark in marks]
    at = dict(zip(marks, offsets, strict=True))
    return [(at[start], at[end], end - start) for start, end in bounds]


def _chunk_stream(pieces: Iterable[str], tokenizer: Tokenizer | None, chunk_size: int) -> Iterator[tuple[int, str, int, int]]:
    """Chunk a text arriving in pieces: ``(char_start, text, n_tokens, chunk_index)``.

    Text is processed in segments of about `_SEGMENT_CHARS`, cut at a line break. The last
    window of a segment is not emitted; its text is carried into the next segment, so window
    starts keep their step and overlap across segment borders.
    """
    pending, base, index, target = "", 0, 0, _SEGMENT_CHARS
    pieces = iter(pieces)
    done = False
    while not done:
        while len(pending) < target and not done:
            piece = next(pieces, None)
            done = piece is None
            pending += piece or ""
        if done:
            segment, pending = pending, ""
        else:
            cut = pending.rfind("\n", 0, target) + 1 or pending.rfind(" ", 0, target) + 1 or target
            segment, pending = pending[:cut], pending[cut:]
        spans = chunk_spans(segment, tokenizer, chunk_size)
        carried_from = len(segment)
        if not done and spans:
            carried_from = spans.pop()[0]
            pending = segment[carried_from:] + pending
        # A segment that held no complete window must grow, or the same text would be cut again.
        target = _SEGMENT_CHARS if spans else 2 * target
        for start, end, n_tokens in spans:
            chunk = segment[start:end]
            lead = len(chunk) - len(chunk.lstrip())
            if chunk.strip():
                yield base + start + lead, chunk.strip(), n_tokens, index
                index += 1
        base += carried_from


# ----------------------------------------------------------------------------- iteration

def _records(path: Path, fmt: str, reader: _Reader, report: Callable[[str, int, str], None]) -> Iterator[tuple[str, int, Any]]:
    """(kind, number, record) for the structured formats."""
    if fmt == "parquet":
        for row, record in _parquet_records(reader):
            yield "row", row, record
        return
    with open(path, "rb") as handle:
        if fmt == "jsonl":
            for line, record in _jsonl_records(reader, handle, lambda number, message: report("line", number, message)):
                yield "line", line, record
        else:
            for item, record in _json_records(reader, handle):
                yield "item", item, record


def _markup_text(path: Path, fmt: str, reader: _Reader) -> Iterator[str]:
    with open(path, "rb") as handle:
        try:
            if fmt == "html":
                yield from html_text(reader.blocks(handle))
            elif fmt == "xml":
                yield from xml_text(reader.raw_blocks(handle))
            else:
                yield from reader.blocks(handle)
        except MarkupError as error:
            raise DatasetError(f"{path}: {error}") from None


def _iter(path: Path, tokenizer: Tokenizer | None, chunk_size: int, on_issue: Callable[[DatasetIssue], None],
          source: str | None, fmt: str | None, reader: _Reader) -> Iterator[dict]:
    fmt = fmt or sniff_format(path)
    source = source or path.name

    def report(kind: str, number: int, message: str) -> None:
        issue = DatasetIssue(str(path), kind, number, message)
        logger.warning("skipped record: %s", issue)
        on_issue(issue)

    if fmt in DOCUMENT_FORMATS:
        yield from document_records(path, fmt, reader, tokenizer, chunk_size, source)
        return
    if fmt in CHUNKED_FORMATS:
        for char_start, text, n_tokens, index in _chunk_stream(_markup_text(path, fmt, reader), tokenizer, chunk_size):
            metadata = {"source": source, "format": fmt, "record": index, "char_start": char_start,
                        "char_end": char_start + len(text), "tokens": n_tokens}
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
        yield {"id": content_id(text), "text": text, "metadata": {"source": source, "format": fmt, "record": number}}


def iter_dataset(path: str | Path, tokenizer: Tokenizer | None = None, chunk_size: int = 1024, *,
                 errors: list[DatasetIssue] | None = None, source: str | None = None,
                 format: str | None = None) -> Iterator[dict]:
    """Stream the documents of one dataset file.

    Yields ``{"id": content_id(text), "text": str, "metadata": {"source", "format", "record", ...}}``.
    ``record`` is the 1-based line (JSONL), the 0-based item (JSON list) or row (parquet), or the
    0-based chunk index (text formats, whose metadata adds ``char_start``/``char_end`` in the
    readable text, and ``tokens``: the window length, in whitespace words when no tokenizer is given). `source` defaults to
    the file name; `format` defaults to `sniff_format(path)`. Skipped records are logged and
    appended to `errors` as DatasetIssue; unreadable files raise DatasetError.
    """
    path = Path(path)
    if format is not None and format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(sorted(FORMATS))}, got {format!r}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    on_issue = errors.append if errors is not None else _ignore
    return _iter(path, tokenizer, chunk_size, on_issue, source, format, _Reader(path))


def _ignore(issue: DatasetIssue) -> None:
    """Issues are always logged; without an `errors` list there is nothing more to do."""


class _EnoughChecked(Exception):
    pass


def validate_dataset(path: str | Path, max_records_to_check: int = 1000, *, tokenizer: Tokenizer | None = None,
                     chunk_size: int = 1024) -> dict:
    """Check an uploaded file by reading up to `max_records_to_check` documents.

    Returns ``{"path", "format", "size", "records_checked", "records_valid", "record_estimate",
    "complete" (the whole file was read), "issues": first 20 issue strings, "issue_count"}``.
    Text formats count chunks of `chunk_size` tokens of `tokenizer` (the build's, for an estimate
    that matches the build; without one, whitespace words stand in). Raises DatasetError when
    the file is unreadable or none of the checked records has text.
    """
    path = Path(path)
    fmt = sniff_format(path)
    errors: list[DatasetIssue] = []
    reader = _Reader(path)
    valid = 0

    def on_issue(issue: DatasetIssue) -> None:
        errors.append(issue)
        if valid + len(errors) >= max_records_to_check:
            raise _EnoughChecked

    records = _iter(path, tokenizer, chunk_size, on_issue, None, fmt, reader)
    complete = False
    try:
        for _ in records:
            valid += 1
            if valid + len(errors) >= max_records_to_check:
                break
        else:
            complete = True
    except _EnoughChecked:
        pass
    finally:
        records.close()
    checked = valid + len(errors)
    if valid == 0:
        first = f": {errors[0]}" if errors else ""
        raise DatasetError(f"{path}: no readable records in the first {checked} checked{first}")
    size = path.stat().st_size
    if complete:
        estimate = valid
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        estimate = pq.ParquetFile(path).metadata.num_rows
    else:
        estimate = round(valid * size / max(1, reader.bytes_read))
    return {"path": str(path), "format": fmt, "size": size, "records_checked": checked, "records_valid": valid,
            "record_estimate": estimate, "complete": complete, "issues": [str(issue) for issue in errors[:20]],
            "issue_count": len(errors)}
