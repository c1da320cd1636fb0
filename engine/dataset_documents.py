"""Dataset records of a document read by a format reader (`engine.readers`): each `Part` is chunked
on its own, and its place (page, slide, sheet and rows, heading path, ...) is copied into the metadata
of every memory cut from it, beside ``format`` (the reader's name)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from engine.dataset_chunks import _chunk_stream, window_metadata
from engine.dataset_readers import _Reader
from engine.dataset_text import content_id
from engine.readers import Reader, ReadOptions
from engine.tokenizer import Tokenizer


def document_records(path: Path, reader: Reader, options: ReadOptions, progress: _Reader,
                     tokenizer: Tokenizer | None, chunk_size: int, source: str) -> Iterator[dict]:
    """The records of one document (`engine.datasets.iter_dataset`'s shape), numbered from 0 across its
    parts. `progress.bytes_read` follows each part's `share`, so a partial validation can extrapolate
    a record count. Raises DocumentError for a document that cannot be read."""
    record, size = 0, path.stat().st_size
    for part in reader.read(path, options):
        for char_start, chunk, n_tokens, _ in _chunk_stream([part.text], tokenizer, chunk_size):
            metadata = {"source": source, "format": reader.name, "record": record,
                        **window_metadata(char_start, chunk, n_tokens), **part.place}
            record += 1
            yield {"id": content_id(chunk), "text": chunk, "metadata": metadata}
        progress.bytes_read = round(size * part.share)
