"""On-disk bitmap index of ternary hypervectors, with exact progressive-pruning search.

File layout (`<name>.idx`, little-endian): a 4096-byte header (magic `HDRAGIX1`, version,
layout, dims, count, chunk_words), then the uint64 body. The body is always a sequence of
column chunks: chunk c covers words [c*cw, c*cw + wc) and is a block of shape
(count, 2*wc) whose row i is `[pos words of chunk c | neg words of chunk c]`.

- While appending (layout "interleaved") there is a single chunk of all words, so the
  body is `[pos_0, neg_0, pos_1, neg_1, ...]` and an append is one sequential write.
- `finalize()` rewrites the body with `chunk_words` (default 4) words per chunk into a new
  file and atomically renames it over the old one.

Why column-chunk-major with pos/neg interleaved per row inside a chunk, rather than the
spec's all-pos-then-all-neg: pruning scores the first chunks of *every* row, then only
the survivors. Chunk-major makes the all-rows pass a contiguous stream of
count * 2*wc*8 bytes (64 MiB per chunk at 1M rows with wc = 4) instead of a strided walk
that touches every page of the file, and keeping a row's pos and neg words of one chunk
side by side makes each survivor's chunk exactly one 64-byte cache line (wc = 4) instead
of two lines in two distant arrays. With wc = 4, at 1M x 10k the full scan streams at
~84 % of the measured read bandwidth, and a query with planted near-duplicates (3 % of
dims flipped) prunes every other row after 3 of 40 chunks (~8 % of the columns), so
pruned search reads ~8 % of the file (`bench/search.py`). A word-major layout inside the
chunk (all rows' word j, then word j+1, ...) would let the scan vectorise across rows but
spread each survivor over 2*wc cache lines; the row-major chunk already reaches the
bandwidth target, so it was kept.

Per-row side arrays live beside the index as raw little-endian int32 files,
`<name>.idx.token_counts` and `<name>.idx.source_ids`, aligned with the bitmap rows.

The searches (`search`, `search_exact`, `search_sampled`, `search_auto`, `score_rows`) are
`engine.index_search.IndexSearch`'s, mixed into `BitmapIndex`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numba
import numpy as np

from engine import bits, kernels
from engine.files import atomic_write, reserve
from engine.index_search import IndexSearch

MAGIC = b"HDRAGIX1"
VERSION = 1
HEADER_BYTES = 4096
LAYOUT_INTERLEAVED = 0
LAYOUT_CHUNKED = 1
DEFAULT_CHUNK_WORDS = 4
_HEADER = struct.Struct("<8sIIQQI")
_SIDE_ARRAYS = ("token_counts", "source_ids")
_FINALIZE_BATCH_ROWS = 16384

class IndexFileError(ValueError):
    """An index file is missing, truncated, or not an index file."""


def _side_path(path: Path, name: str) -> Path:
    return path.with_name(path.name + "." + name)


class BitmapIndex(IndexSearch):
    """Packed ternary bitmaps of `count` documents with `dims` dimensions, on one file.

    Use `BitmapIndex.create(path, dims)` to build (append, then finalize) and
    `BitmapIndex.open(path)` to search an existing file (read-only memmap; the corpus is
    never copied into RAM). The searches are `IndexSearch`'s.
    """

    def __init__(self, path: Path, *, dims: int, count: int, layout: int, chunk_words: int, writable: bool):
        self.path = path
        self.dims = dims
        self.words = bits.words(dims)
        self.count = count
        self.layout = layout
        self.chunk_words = chunk_words
        self.writable = writable
        self._data: np.ndarray | None = None
        self._sides: dict[str, np.ndarray] = {}
        # Pruned searches in a row that gave up (see `search`), and exact scans since the last probe.
        self._gave_up = 0
        self._since_probe = 0

    # ------------------------------------------------------------ files

    @classmethod
    def create(cls, path: str | Path, dims: int) -> BitmapIndex:
        """Start a new, empty index file (interleaved layout). Refuses to overwrite."""
        path = Path(path)
        n_words = bits.words(dims)
        if path.exists():
            raise FileExistsError(f"{path}: index file already exists")
        with open(path, "xb") as handle:
            handle.write(_header(dims, 0, LAYOUT_INTERLEAVED, n_words))
        for name in _SIDE_ARRAYS:
            _side_path(path, name).write_bytes(b"")
        return cls(path, dims=dims, count=0, layout=LAYOUT_INTERLEAVED, chunk_words=n_words, writable=True)

    @classmethod
    def open(cls, path: str | Path) -> BitmapIndex:
        """Open an index file read-only; raises IndexFileError naming the file when invalid."""
        path = Path(path)
        try:
            with open(path, "rb") as handle:
                raw = handle.read(_HEADER.size)
            size = path.stat().st_size
        except OSError as error:
            raise IndexFileError(f"{path}: cannot read index file ({error.strerror})") from error
        if len(raw) < _HEADER.size or not raw.startswith(MAGIC):
            raise IndexFileError(f"{path}: not an HdRAG bitmap index (bad magic or truncated header)")
        _, version, layout, dims, count, chunk_words = _HEADER.unpack(raw)
        if version != VERSION:
            raise IndexFileError(f"{path}: unsupported index version {version} (expected {VERSION})")
        if layout not in (LAYOUT_INTERLEAVED, LAYOUT_CHUNKED) or dims < 1:
            raise IndexFileError(f"{path}: corrupt header (layout {layout}, dims {dims})")
        n_words = bits.words(dims)
        if not 1 <= chunk_words <= n_words:
            raise IndexFileError(f"{path}: corrupt header (chunk_words {chunk_words} for {n_words} words)")
        expected = HEADER_BYTES + count * 2 * n_words * 8
        if size != expected:
            raise IndexFileError(
                f"{path}: file is {size} bytes, header promises {count} rows = {expected} bytes"
            )
        index = cls(path, dims=dims, count=count, layout=layout, chunk_words=chunk_words, writable=False)
        for name in _SIDE_ARRAYS:
            index._load_side(name)
        return index

    def _load_side(self, name: str) -> np.ndarray:
        side = _side_path(self.path, name)
        try:
            values = np.fromfile(side, dtype="<i4").astype(np.int32, copy=False)
        except OSError as error:
            raise IndexFileError(f"{side}: cannot read {name} ({error.strerror})") from error
        if values.shape[0] != self.count:
            raise IndexFileError(f"{side}: holds {values.shape[0]} {name}, index has {self.count} rows")
        self._sides[name] = values
        return values

    @property
    def finalized(self) -> bool:
        return self.layout == LAYOUT_CHUNKED

    @property
    def token_counts(self) -> np.ndarray:
        """int32 (count,): tokens of each document."""
        return self._side("token_counts")

    @property
    def source_ids(self) -> np.ndarray:
        """int32 (count,): small integer id of each document's source dataset."""
        return self._side("source_ids")

    def _side(self, name: str) -> np.ndarray:
        return self._sides[name] if name in self._sides else self._load_side(name)

    def _body(self) -> np.ndarray:
        """Flat uint64 (count * 2 * words,) view of the body, memory-mapped read-only."""
        if self._data is None:
            if self.count == 0:
                self._data = np.zeros(0, dtype=np.uint64)
            else:
                mapped = np.memmap(self.path, dtype="<u8", mode="r", offset=HEADER_BYTES,
                                   shape=(self.count * 2 * self.words,))
                self._data = mapped.view(np.ndarray)
        return self._data

    def _chunks(self) -> list[tuple[int, int]]:
        """(first word, width) of every column chunk."""
        return [
            (start, min(self.chunk_words, self.words - start))
            for start in range(0, self.words, self.chunk_words)
        ]

    def _block(self, start: int, width: int) -> np.ndarray:
        offset = self.count * 2 * start
        return self._body()[offset : offset + self.count * 2 * width].reshape(self.count, 2 * width)

    def close(self) -> None:
        """Drop the memory map (the object must not be used afterwards)."""
        self._data = None
        self._sides.clear()

    def __enter__(self) -> BitmapIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ building

    def append(
        self,
        pos: np.ndarray,
        neg: np.ndarray,
        *,
        token_counts: np.ndarray | Iterable[int] | None = None,
        source_ids: np.ndarray | Iterable[int] | None = None,
    ) -> None:
        """Append a batch of rows. Shapes: pos, neg (m, words) uint64; side arrays (m,) int.

        Missing side arrays are stored as zeros. Rows must keep the bitmap invariants
        (no dimension in both bitmaps, zero padding bits); a violation raises ValueError.
        """
        if not self.writable or self.finalized:
            raise ValueError(
                f"{self.path}: index is read-only (open or finalized); build a new one to add rows"
            )
        pos = bits._as_bitmap("pos", pos)
        neg = bits._as_bitmap("neg", neg)
        if pos.ndim != 2 or pos.shape != neg.shape or pos.shape[1] != self.words:
            raise ValueError(
                f"pos/neg: expected equal shapes (m, {self.words}), got {pos.shape} and {neg.shape}"
            )
        if np.any(pos & neg):
            raise ValueError("pos/neg: a dimension is set in both bitmaps")
        padding = ~bits.mask64_for_dims(self.dims, bits.bstride(self.dims))
        if np.any((pos | neg) & padding):
            raise ValueError(f"pos/neg: padding bits beyond dims={self.dims} must be zero")
        m = pos.shape[0]
        sides = {
            "token_counts": _side_values("token_counts", token_counts, m),
            "source_ids": _side_values("source_ids", source_ids, m),
        }
        if m == 0:
            return
        with open(self.path, "r+b") as handle:
            handle.seek(HEADER_BYTES + self.count * 2 * self.words * 8)
            handle.write(np.concatenate([pos, neg], axis=1).astype("<u8", copy=False).tobytes())
            for name, values in sides.items():
                with open(_side_path(self.path, name), "ab") as side:
                    side.write(values.tobytes())
            # The count is written last: a crash mid-append leaves a size mismatch that open() reports.
            handle.seek(0)
            handle.write(_header(self.dims, self.count + m, LAYOUT_INTERLEAVED, self.words))
        self.count += m
        self._data = None
        self._sides.clear()

    def finalize(self, chunk_words: int = DEFAULT_CHUNK_WORDS) -> None:
        """Rewrite into the column-chunk layout (new file + atomic rename); idempotent.

        The object becomes a read-only view of the finalized file.
        """
        if self.finalized:
            return
        if chunk_words < 1:
            raise ValueError(f"chunk_words must be >= 1, got {chunk_words}")
        chunk_words = min(chunk_words, self.words)
        source = self._body().reshape(self.count, 2 * self.words)
        with atomic_write(self.path) as staging:
            with open(staging, "wb") as handle:
                handle.write(_header(self.dims, self.count, LAYOUT_CHUNKED, chunk_words))
            reserve(staging, HEADER_BYTES + self.count * 2 * self.words * 8)
            if self.count:
                body = np.memmap(staging, dtype="<u8", mode="r+", offset=HEADER_BYTES,
                                 shape=(self.count * 2 * self.words,))
                for first in range(0, self.count, _FINALIZE_BATCH_ROWS):
                    rows = source[first : first + _FINALIZE_BATCH_ROWS]
                    last = first + rows.shape[0]
                    for start in range(0, self.words, chunk_words):
                        width = min(chunk_words, self.words - start)
                        block = body[self.count * 2 * start : self.count * 2 * (start + width)].reshape(
                            self.count, 2 * width)
                        block[first:last, :width] = rows[:, start : start + width]
                        block[first:last, width:] = rows[:, self.words + start : self.words + start + width]
                body.flush()
                del body
            del source
            self._data = None  # the interleaved file's map goes before the rename replaces it
        self.layout = LAYOUT_CHUNKED
        self.chunk_words = chunk_words
        self.writable = False

    # ------------------------------------------------------------ gathering and diagnostics

    def _check_rows(self, rows: Any) -> np.ndarray:
        rows = np.asarray(list(rows) if not isinstance(rows, np.ndarray) else rows)
        if rows.size == 0:
            return np.zeros(0, dtype=np.int64)
        if rows.dtype.kind not in "iu" or rows.ndim != 1:
            raise ValueError(f"rows: expected a 1-D integer array, got {rows.dtype} {rows.shape}")
        if rows.min() < 0 or rows.max() >= self.count:
            raise ValueError(f"rows: indices must be in [0, {self.count})")
        return np.ascontiguousarray(rows, dtype=np.int64)

    def get_bitmaps(self, rows: np.ndarray | Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
        """Shapes: rows (m,) ints in [0, count) → (pos, neg) uint64 (m, words)."""
        rows = self._check_rows(rows)
        outp = np.empty((rows.shape[0], self.words), dtype=np.uint64)
        outn = np.empty_like(outp)
        if rows.shape[0]:
            kernels.gather_rows(self._body(), self.count, self.words, self.chunk_words, rows, outp, outn)
        return outp, outn

    def sparsity(self) -> dict[str, float]:
        """Fractions of +1, 0 and -1 over all count * dims stored values (zeros when empty)."""
        if self.count == 0:
            return {"pos": 0.0, "zero": 0.0, "neg": 0.0}
        pos = neg = 0
        for start, width in self._chunks():
            chunk_pos, chunk_neg = kernels.count_block_bits(self._block(start, width), width)
            pos += int(chunk_pos)
            neg += int(chunk_neg)
        total = self.count * self.dims
        return {"pos": pos / total, "zero": (total - pos - neg) / total, "neg": neg / total}

    def sample_similarities(self, n_pairs: int = 1000, seed: int = 0) -> np.ndarray:
        """float64 (n_pairs,): ternary cosine score / sqrt(nnz_a * nnz_b) of random row pairs.

        Pairs are two distinct rows drawn uniformly; a pair with an all-zero row has
        similarity 0. Fewer than two rows give an empty array.
        """
        if n_pairs < 0:
            raise ValueError(f"n_pairs must be >= 0, got {n_pairs}")
        if self.count < 2 or n_pairs == 0:
            return np.zeros(0, dtype=np.float64)
        rng = np.random.default_rng(seed)
        first = rng.integers(0, self.count, size=n_pairs)
        second = (first + rng.integers(1, self.count, size=n_pairs)) % self.count
        ap, an = self.get_bitmaps(first)
        bp, bn = self.get_bitmaps(second)
        scores = (np.bitwise_count((ap & bp) | (an & bn)).sum(axis=1, dtype=np.int64)
                  - np.bitwise_count((ap & bn) | (an & bp)).sum(axis=1, dtype=np.int64))
        norms = np.sqrt(np.bitwise_count(ap | an).sum(axis=1, dtype=np.int64)
                        * np.bitwise_count(bp | bn).sum(axis=1, dtype=np.int64).astype(np.float64))
        return np.divide(scores, norms, out=np.zeros(n_pairs), where=norms > 0)

    def dimension_activation(self) -> tuple[np.ndarray, np.ndarray]:
        """(pos_freq, neg_freq) float64 (dims,): fraction of rows with +1 / -1 per dimension."""
        pos = np.zeros(self.words * 64, dtype=np.int64)
        neg = np.zeros(self.words * 64, dtype=np.int64)
        if self.count:
            n_threads = numba.get_num_threads()
            for start, width in self._chunks():
                counts = np.zeros((n_threads, 2 * width, 64), dtype=np.int64)
                kernels.block_bit_frequencies(self._block(start, width), counts)
                counts = counts.sum(axis=0)
                pos[start * 64 : (start + width) * 64] = counts[:width].reshape(-1)
                neg[start * 64 : (start + width) * 64] = counts[width:].reshape(-1)
        scale = 1.0 / max(self.count, 1)
        return pos[: self.dims] * scale, neg[: self.dims] * scale


# ---------------------------------------------------------------- helpers


def _header(dims: int, count: int, layout: int, chunk_words: int) -> bytes:
    return _HEADER.pack(MAGIC, VERSION, layout, dims, count, chunk_words).ljust(HEADER_BYTES, b"\0")


def _side_values(name: str, values: Any, m: int) -> np.ndarray:
    if values is None:
        return np.zeros(m, dtype="<i4")
    array = np.asarray(list(values) if not isinstance(values, np.ndarray) else values)
    if array.shape != (m,) or (m and array.dtype.kind not in "iu"):
        raise ValueError(f"{name}: expected {m} integers, got {array.dtype} {array.shape}")
    if m and (array.min() < -(2**31) or array.max() >= 2**31):
        raise ValueError(f"{name}: values must fit in int32")
    return array.astype("<i4")
