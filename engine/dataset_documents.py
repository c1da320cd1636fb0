"""Dataset records of a document read by a format reader (`engine.readers`): each `Part` is chunked
on its own, and its place (page, slide, sheet and rows, heading path, ...) is copied into the metadata
of every memory cut from it (a part's ``lines`` narrowed to the window's own), beside ``format`` (the
reader's name); what the reader skips while reading on becomes an issue of kind "part". A part left to
OCR at build time (`Part.ocr_pending`, an upload's validation) makes no record: it is told to `on_pending`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

from engine.dataset_chunks import _chunk_stream, window_metadata
from engine.dataset_readers import _Reader
from engine.dataset_text import content_id
from engine.places import place_label
from engine.readers import Part, Reader, ReadOptions
from engine.tokenizer import Tokenizer


def document_records(path: Path, reader: Reader, options: ReadOptions, progress: _Reader,
                     tokenizer: Tokenizer | None, chunk_size: int, source: str,
                     report: Callable[[str, int, str], None],
                     on_pending: Callable[[Part], None] | None = None) -> Iterator[dict]:
    """The records of one document (`engine.datasets.iter_dataset`'s shape), numbered from 0 across its
    parts. `progress.bytes_read` follows each part's `share`, so a partial validation can extrapolate
    a record count; `report(kind, number, message)` hears of each piece the reader skips ("part", the
    number of the part it would have been). Raises DocumentError for a document that cannot be read."""
    record, parts, size = 0, 0, path.stat().st_size

    def on_skip(place: dict, reason: str) -> None:
        report("part", parts + 1, f"{place_label(place) or 'the document'}: {reason}")

    for part in reader.read(path, dataclasses.replace(options, on_skip=on_skip)):
        parts += 1
        if part.ocr_pending:
            progress.bytes_read = round(size * part.share)
            if on_pending is not None:
                on_pending(part)
            continue
        for char_start, chunk, n_tokens, _ in _chunk_stream([part.text], tokenizer, chunk_size):
            metadata = {"source": source, "format": reader.name, "record": record,
                        **window_metadata(char_start, chunk, n_tokens),
                        **_window_place(part, char_start, chunk)}
            record += 1
            yield {"id": content_id(chunk), "text": chunk, "metadata": metadata}
        progress.bytes_read = round(size * part.share)


def _window_place(part: Part, char_start: int, chunk: str) -> dict:
    """The part's place for one window of its text: its ``lines`` narrowed to the window's own."""
    lines = part.place.get("lines")
    if not (isinstance(lines, list) and len(lines) == 2):
        return dict(part.place)
    first = lines[0] + part.text.count("\n", 0, char_start)
    return {**part.place, "lines": [first, first + chunk.count("\n")]}
