"""Low-level streaming readers of the structured formats (JSON array/object, JSONL, parquet).

Part of `engine.datasets`: a file is read as checked UTF-8 blocks (`_Reader`), so a dataset of
any size streams in bounded memory.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from engine.dataset_formats import _NUL, DatasetError, _too_deep
from engine.dataset_text import extract_text

# Keys under which a top-level JSON object commonly holds its list of records, in priority order.
RECORD_LIST_KEYS = ("data", "records", "items", "rows", "examples", "instances", "documents", "train")
# A top-level JSON *object* is parsed whole; lists and JSONL stream. Past this, ask for JSONL.
MAX_JSON_OBJECT_BYTES = 256 * 1024 * 1024
TEXT_COLUMNS = ("conversations", "messages", "instruction", "input", "output", "prompt", "response",
                "completion", "text", "content")


_BLOCK_BYTES = 1 << 20


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
    window = _JsonWindow(reader, handle)
    if not window.skip_space() or window.buffer[window.pos] != "[":
        raise window.fail("expected a top-level list '['", window.pos)
    window.pos += 1
    index = 0
    if window.skip_space() and window.buffer[window.pos] == "]":
        window.pos += 1
    else:
        while True:
            if not window.skip_space():
                raise window.fail("unexpected end of file inside the list", window.pos)
            yield index, window.item()
            index += 1
            if not window.skip_space():
                raise window.fail("unexpected end of file inside the list", window.pos)
            if window.buffer[window.pos] == "]":
                window.pos += 1
                break
            if window.buffer[window.pos] != ",":
                raise window.fail(f"expected ',' or ']' after item {index - 1}", window.pos)
            window.pos += 1
    if window.skip_space():
        raise window.fail("unexpected data after the top-level list", window.pos)


class _JsonWindow:
    """The part of a file's text a JSON array is being parsed in: `buffer` from `pos` on is still to
    be read; `lines_before` counts the lines dropped before it (for messages)."""

    def __init__(self, reader: _Reader, handle: IO[bytes]) -> None:
        self.path = reader.path
        self.blocks = reader.blocks(handle)
        self.decoder = json.JSONDecoder()
        self.buffer, self.pos, self.lines_before, self.eof = "", 0, 0, False

    def fail(self, message: str, at: int) -> DatasetError:
        line = self.lines_before + self.buffer.count("\n", 0, at) + 1
        return DatasetError(f"{self.path}: invalid JSON at line {line}: {message}")

    def fill(self, minimum: int) -> bool:
        """Drop what was read and read on until `minimum` characters are in the window (or the file
        ends) → whether any is left to read."""
        self.lines_before += self.buffer.count("\n", 0, self.pos)
        self.buffer, self.pos = self.buffer[self.pos:], 0
        while not self.eof and len(self.buffer) < minimum:
            block = next(self.blocks, None)
            if block is None:
                self.eof = True
            else:
                self.buffer += block
        return self.pos < len(self.buffer)

    def skip_space(self) -> bool:
        """Move past whitespace → whether a character follows before the end of the file."""
        while True:
            buffer, pos = self.buffer, self.pos
            while pos < len(buffer) and buffer[pos] in " \t\r\n":
                pos += 1
            self.pos = pos
            if pos < len(buffer) or not self.fill(_BLOCK_BYTES):
                return self.pos < len(self.buffer)

    def item(self) -> Any:
        """The JSON value at `pos`, which is then moved past it; the window grows until it holds the
        whole value."""
        want = _BLOCK_BYTES
        while True:
            try:
                item, end = self.decoder.raw_decode(self.buffer, self.pos)
                if end < len(self.buffer) or self.eof:
                    break
            except json.JSONDecodeError as error:
                if self.eof:
                    raise self.fail(error.msg, error.pos) from None
            except RecursionError:
                raise self.fail(_too_deep().msg, self.pos) from None
            want = max(want, 2 * (len(self.buffer) - self.pos))
            self.fill(want)
        self.pos = end
        return item


def _json_records(reader: _Reader, handle: IO[bytes]) -> Iterator[tuple[int, Any]]:
    first = next((char for block in reader.blocks(handle, 4096) for char in block if not char.isspace()), "")
    handle.seek(0)
    reader.bytes_read = 0
    if first == "[":
        yield from _iter_json_array(reader, handle)
        return
    size = reader.path.stat().st_size
    if size > MAX_JSON_OBJECT_BYTES:
        raise DatasetError(
            f"{reader.path}: a top-level JSON object is parsed whole and this one is {size} bytes "
            f"(limit {MAX_JSON_OBJECT_BYTES}); store the records as JSONL or a top-level list"
        )
    text = "".join(reader.blocks(handle))
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise DatasetError(
            f"{reader.path}: invalid JSON at line {error.lineno} column {error.colno}: {error.msg}"
        ) from None
    except RecursionError:
        raise DatasetError(f"{reader.path}: invalid JSON: {_too_deep().msg}") from None
    if not isinstance(document, dict):
        raise DatasetError(
            f"{reader.path}: top-level JSON must be a list of records or an object, got "
            f"{type(document).__name__}"
        )
    if extract_text(document):
        yield 0, document
        return
    lists = [key for key in RECORD_LIST_KEYS if isinstance(document.get(key), list)]
    lists = lists or [key for key, value in document.items() if isinstance(value, list)]
    if not lists:
        raise DatasetError(
            f"{reader.path}: JSON object has no text and no list of records (keys: "
            f"{', '.join(list(document)[:12])})"
        )
    yield from enumerate(document[lists[0]])


def _jsonl_records(
    reader: _Reader, handle: IO[bytes], errors: Callable[[int, str], None]
) -> Iterator[tuple[int, Any]]:
    for number, raw in enumerate(handle, start=1):
        if number == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[3:]
            reader.bytes_read += 3
        if _NUL in raw:
            raise DatasetError(
                f"{reader.path}: binary data (NUL byte at byte offset {reader.bytes_read + raw.index(_NUL)})"
            )
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise DatasetError(
                f"{reader.path}: invalid UTF-8 at byte offset {reader.bytes_read + error.start}"
            ) from None
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
        raise DatasetError(
            f"{reader.path}: parquet file has no text column (columns: {', '.join(names[:20])}; "
            f"expected one of: {', '.join(TEXT_COLUMNS)})"
        )
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

