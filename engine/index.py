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

`search` is exact: it returns the same rows and scores as `search_exact` (ties broken by lower
row first) unless a `candidates` cap is given. `search_sampled` (approximate ranking, exact
scores) is what `search_auto`, the retriever's search, uses on large indexes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numba
import numpy as np

from engine import bits, kernels, topk
from engine.files import atomic_write, reserve

MAGIC = b"HDRAGIX1"
VERSION = 1
HEADER_BYTES = 4096
LAYOUT_INTERLEAVED = 0
LAYOUT_CHUNKED = 1
DEFAULT_CHUNK_WORDS = 4
_HEADER = struct.Struct("<8sIIQQI")
_EXCLUDED = np.int32(-(2**30))
_SIDE_ARRAYS = ("token_counts", "source_ids")
# Below this fraction of allowed or surviving rows, gathering survivors beats streaming all rows.
_SPARSE_FRACTION = 0.25
_FINISH_SURVIVORS = 256
# After this many pruned searches in a row gave up, `search` scans exactly, trying pruning again
# every _PROBE_EVERY searches (the answer is the same either way; only the time differs).
_GIVE_UP_STREAK = 4
_PROBE_EVERY = 16
_FINALIZE_BATCH_ROWS = 16384
# `search_sampled`: column chunks of the first pass (6 of 40 at 10,000 dims: 15 % of the dims),
# and rows re-ranked exactly. Chosen on real text (bench/search.py --real-text).
DEFAULT_SAMPLE_CHUNKS = 6
DEFAULT_SHORTLIST = 1000
# ... and at least this many shortlisted rows per requested result (the retriever asks for 500).
SHORTLIST_PER_RESULT = 2
# `search_auto` (the retriever's search) samples from this many rows on; below, it searches exactly
# (bench/search.py --real-text measures both at several index sizes).
SAMPLED_SEARCH_MIN_ROWS = 100_000


class IndexFileError(ValueError):
    """An index file is missing, truncated, or not an index file."""


def _side_path(path: Path, name: str) -> Path:
    return path.with_name(path.name + "." + name)


class BitmapIndex:
    """Packed ternary bitmaps of `count` documents with `dims` dimensions, on one file.

    Use `BitmapIndex.create(path, dims)` to build (append, then finalize) and
    `BitmapIndex.open(path)` to search an existing file (read-only memmap; the corpus is
    never copied into RAM).
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
            raise IndexFileError(f"{path}: file is {size} bytes, header promises {count} rows = {expected} bytes")
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
        return [(start, min(self.chunk_words, self.words - start)) for start in range(0, self.words, self.chunk_words)]

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
            raise ValueError(f"{self.path}: index is read-only (open or finalized); build a new one to add rows")
        pos = bits._as_bitmap("pos", pos)
        neg = bits._as_bitmap("neg", neg)
        if pos.ndim != 2 or pos.shape != neg.shape or pos.shape[1] != self.words:
            raise ValueError(f"pos/neg: expected equal shapes (m, {self.words}), got {pos.shape} and {neg.shape}")
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

    # ------------------------------------------------------------ search

    def search(
        self,
        q_pos: np.ndarray,
        q_neg: np.ndarray,
        k: int,
        *,
        candidates: int | None = None,
        allowed_sources: Iterable[int] | None = None,
        row_mask: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k rows by ternary score, by progressive pruning over column chunks.

        Shapes: q_pos, q_neg (words,) uint64 → rows int64 (m,), scores int32 (m,), m = min(k,
        allowed rows), sorted by score descending then row ascending.

        Rows outside `allowed_sources` / `row_mask` (bool (count,); both given → both must
        hold) are excluded before any scoring. After each chunk, with R the query's nonzeros
        in the chunks not yet scored, a row's final score lies in [partial - R, partial + R].
        The k rows with the best partial scores are scored exactly; the k-th best of those
        exact scores, LB, is a lower bound on the final k-th best score, so every row with
        partial + R < LB is dropped for good. Dropped rows score strictly below the k-th
        result, hence the result equals `search_exact`. Scanning stops as soon as R = 0, or
        the survivors are few enough to finish exactly in one gather.

        `candidates` (>= k) turns on the spec's bounded-cost tournament: after each chunk at
        most `candidates` survivors (best partial scores) are kept. This is an
        approximation: a row whose early chunks score low can be dropped although it would
        reach the top-k; leave it None for exact results.
        """
        qp, qn, k, mask = self._check_query(q_pos, q_neg, k, allowed_sources, row_mask)
        if candidates is not None and candidates < k:
            raise ValueError(f"candidates must be >= k ({k}), got {candidates}")
        n_allowed = self.count if mask is None else int(np.count_nonzero(mask))
        if k == 0 or n_allowed == 0:
            return topk.empty_result()
        if n_allowed <= k:
            return self._exact(qp, qn, k, mask)
        if candidates is None and self._gave_up >= _GIVE_UP_STREAK:
            # Pruning has not paid off on this index lately (real text: vectors share many dims,
            # so the bound rarely closes in); scan, and probe pruning again now and then.
            self._since_probe += 1
            if self._since_probe % _PROBE_EVERY:
                return self._exact(qp, qn, k, mask)
        return self._prune(qp, qn, k, candidates, mask, n_allowed)

    def search_sampled(
        self,
        q_pos: np.ndarray,
        q_neg: np.ndarray,
        k: int,
        *,
        sample_chunks: int = DEFAULT_SAMPLE_CHUNKS,
        shortlist: int | None = None,
        allowed_sources: Iterable[int] | None = None,
        row_mask: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Approximate top-k with exact scores: a first pass scores every allowed row on the first
        `sample_chunks` column chunks only, the `shortlist` best are re-ranked on all dimensions
        (default: max(DEFAULT_SHORTLIST, SHORTLIST_PER_RESULT * k)).

        Same shapes and order as `search`. The dimensions of a random projection are exchangeable,
        so a chunk subset's score is an unbiased estimate of the full score (scaled); on real
        text, where pruning cannot close its bound and `search` ends as a full scan, this reads
        `sample_chunks / chunks` of the file plus `shortlist` gathered rows. Results can differ
        from `search_exact` only where a true top-k row scored below the shortlist on the sample;
        `bench/search.py --real-text` measures recall@10 against the exact scan.
        """
        qp, qn, k, mask = self._check_query(q_pos, q_neg, k, allowed_sources, row_mask)
        if shortlist is None:
            shortlist = max(DEFAULT_SHORTLIST, SHORTLIST_PER_RESULT * k)
        if shortlist < k:
            raise ValueError(f"shortlist must be >= k ({k}), got {shortlist}")
        n_allowed = self.count if mask is None else int(np.count_nonzero(mask))
        if k == 0 or n_allowed == 0:
            return topk.empty_result()
        chunks = self._chunks()
        if sample_chunks >= len(chunks) or n_allowed <= shortlist:
            return self._exact(qp, qn, k, mask)
        partial, hist, lo = self._sample_pass(qp, qn, mask, sample_chunks)
        rows = topk.rows_at_least(partial, max(topk.kth_value(hist, lo, shortlist), lo), shortlist)
        scores = partial[rows].astype(np.int64) + self._exact_scores(rows, qp, qn, first_chunk=sample_chunks)
        order = np.lexsort((rows, -scores))[:k]
        return rows[order], scores[order].astype(np.int32)

    def sample_scores(self, q_pos: np.ndarray, q_neg: np.ndarray, *, sample_chunks: int = DEFAULT_SAMPLE_CHUNKS,
                      allowed_sources: Iterable[int] | None = None) -> tuple[np.ndarray, np.ndarray, int]:
        """`search_sampled`'s first pass alone: each row's score on the first `sample_chunks` column
        chunks, and their histogram. Shapes: q (words,) uint64 → partial int32 (count,), hist int64
        (2 * -lo + 1,) counting the allowed rows' values lo..-lo, and lo; a row outside
        `allowed_sources` holds a value below any score. Several indexes of one dims and chunk width
        give comparable values and histograms of the same bins (`engine.segments.SegmentedIndex.
        search_sampled` picks one shortlist across them)."""
        qp, qn, _, mask = self._check_query(q_pos, q_neg, 0, allowed_sources, None)
        return self._sample_pass(qp, qn, mask, sample_chunks)

    def _sample_pass(self, qp, qn, mask, sample_chunks: int) -> tuple[np.ndarray, np.ndarray, int]:
        chunks = self._chunks()[:sample_chunks]
        done = sum(topk.nnz(qp[start : start + width], qn[start : start + width]) for start, width in chunks)
        partial = self._new_partial(mask)
        hist = np.zeros((numba.get_num_threads(), 2 * done + 1), dtype=np.int64)
        # One kernel launch for all the sampled chunks, not one per chunk (each waits for every
        # thread: a state of ten segments made ten times the launches of one index).
        kernels.score_chunks_dense(self._body(), self.count, self.words, self.chunk_words, len(chunks), qp, qn,
                                   partial, mask if mask is not None else np.zeros(0, dtype=np.bool_),
                                   mask is not None, hist, -done)
        return partial, hist.sum(axis=0), -done

    def search_auto(self, q_pos: np.ndarray, q_neg: np.ndarray, k: int, *,
                    allowed_sources: Iterable[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The retriever's search: `search_sampled` from SAMPLED_SEARCH_MIN_ROWS rows on (a fraction
        of the file read; recall against the exact scan measured on real text by bench/search.py),
        the exact `search` below, where a full scan costs little. Same shapes and order as `search`."""
        if self.count >= SAMPLED_SEARCH_MIN_ROWS:
            return self.search_sampled(q_pos, q_neg, k, allowed_sources=allowed_sources)
        return self.search(q_pos, q_neg, k, allowed_sources=allowed_sources)

    def score_rows(self, rows: np.ndarray | Iterable[int], q_pos: np.ndarray, q_neg: np.ndarray, *,
                   first_chunk: int = 0) -> np.ndarray:
        """Exact ternary scores int64 (m,) of the given rows (row indices (m,)) for the query; from
        column chunk `first_chunk` on (what a first pass over the chunks before it leaves)."""
        rows = self._check_rows(rows)
        qp, qn, _, _ = self._check_query(q_pos, q_neg, 0, None, None)
        if rows.shape[0] == 0:
            return np.zeros(0, dtype=np.int64)
        return self._exact_scores(rows, qp, qn, first_chunk=first_chunk)

    def search_exact(
        self,
        q_pos: np.ndarray,
        q_neg: np.ndarray,
        k: int,
        *,
        allowed_sources: Iterable[int] | None = None,
        row_mask: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Plain full scan with the same contract as `search`; the correctness reference."""
        qp, qn, k, mask = self._check_query(q_pos, q_neg, k, allowed_sources, row_mask)
        if k == 0 or self.count == 0:
            return topk.empty_result()
        return self._exact(qp, qn, k, mask)

    def _check_query(self, q_pos: Any, q_neg: Any, k: int, allowed_sources: Any, row_mask: Any) -> tuple:
        qp = bits._as_bitmap("q_pos", q_pos)
        qn = bits._as_bitmap("q_neg", q_neg)
        if qp.shape != (self.words,) or qn.shape != (self.words,):
            raise ValueError(f"q_pos/q_neg: expected shape ({self.words},), got {qp.shape} and {qn.shape}")
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 0:
            raise ValueError(f"k must be an int >= 0, got {k!r}")
        # Padding bits would only loosen the pruning bound; drop them.
        pad_mask = bits.mask64_for_dims(self.dims, bits.bstride(self.dims))
        qp = np.ascontiguousarray(qp & pad_mask)
        qn = np.ascontiguousarray(qn & pad_mask)
        mask = None
        if row_mask is not None:
            row_mask = np.asarray(row_mask)
            if row_mask.dtype != np.bool_ or row_mask.shape != (self.count,):
                raise ValueError(f"row_mask: expected bool array of shape ({self.count},), got {row_mask.dtype} {row_mask.shape}")
            mask = row_mask
        if allowed_sources is not None:
            allowed = np.fromiter(allowed_sources, dtype=np.int64)
            by_source = np.isin(self.source_ids, allowed)
            mask = by_source if mask is None else (mask & by_source)
        return qp, qn, int(k), None if mask is None else np.ascontiguousarray(mask)

    def _check_rows(self, rows: Any) -> np.ndarray:
        rows = np.asarray(list(rows) if not isinstance(rows, np.ndarray) else rows)
        if rows.size == 0:
            return np.zeros(0, dtype=np.int64)
        if rows.dtype.kind not in "iu" or rows.ndim != 1:
            raise ValueError(f"rows: expected a 1-D integer array, got {rows.dtype} {rows.shape}")
        if rows.min() < 0 or rows.max() >= self.count:
            raise ValueError(f"rows: indices must be in [0, {self.count})")
        return np.ascontiguousarray(rows, dtype=np.int64)

    def _dense_chunk(self, c_start: int, width: int, qp, qn, partial, mask, lo: int) -> np.ndarray:
        hist = np.zeros((numba.get_num_threads(), 2 * -lo + 1), dtype=np.int64)
        kernels.score_block_dense(
            self._block(c_start, width), width, qp[c_start : c_start + width], qn[c_start : c_start + width],
            partial, mask if mask is not None else np.zeros(0, dtype=np.bool_), mask is not None, hist, lo,
        )
        return hist.sum(axis=0)

    def _exact(self, qp, qn, k, mask) -> tuple[np.ndarray, np.ndarray]:
        partial = self._new_partial(mask)
        done = 0
        hist = np.zeros(1, dtype=np.int64)
        for start, width in self._chunks():
            done += topk.nnz(qp[start : start + width], qn[start : start + width])
            hist = self._dense_chunk(start, width, qp, qn, partial, mask, -done)
        return topk.top_k_dense(partial, hist, -done, k)

    def _new_partial(self, mask) -> np.ndarray:
        partial = np.zeros(self.count, dtype=np.int32)
        if mask is not None:
            partial[~mask] = _EXCLUDED
        return partial

    def _exact_scores(self, rows: np.ndarray, qp, qn, first_chunk: int = 0) -> np.ndarray:
        out = np.empty(rows.shape[0], dtype=np.int64)
        kernels.score_rows_chunks(self._body(), self.count, self.words, self.chunk_words, first_chunk, rows, qp, qn, out)
        return out

    def _prune(self, qp, qn, k, candidates, mask, n_allowed) -> tuple[np.ndarray, np.ndarray]:
        chunks = self._chunks()
        chunk_nnz = [topk.nnz(qp[s : s + w], qn[s : s + w]) for s, w in chunks]
        remaining = sum(chunk_nnz)
        bound = -(2**62)
        done = 0
        rows = None
        # Rows scored exactly so far, and their final scores: the best of them are mostly the same
        # rows from chunk to chunk, so each is gathered once. The k-th best of any k distinct
        # rows' final scores is a lower bound on the k-th best result.
        known_rows = np.zeros(0, dtype=np.int64)
        known_scores = np.zeros(0, dtype=np.int64)

        def raise_bound(best: np.ndarray) -> int:
            nonlocal known_rows, known_scores
            new = best[~np.isin(best, known_rows, assume_unique=True)]
            if new.shape[0]:
                known_rows = np.concatenate([known_rows, new])
                known_scores = np.concatenate([known_scores, self._exact_scores(new, qp, qn)])
            return max(bound, int(np.partition(known_scores, -k)[-k]))

        if n_allowed < _SPARSE_FRACTION * self.count:
            rows = np.flatnonzero(mask).astype(np.int64)
            partial = np.zeros(rows.shape[0], dtype=np.int64)
        else:
            partial = self._new_partial(mask)
        for index, (start, width) in enumerate(chunks):
            done += chunk_nnz[index]
            remaining -= chunk_nnz[index]
            if rows is None:
                hist = self._dense_chunk(start, width, qp, qn, partial, mask, -done)
                if remaining == 0:
                    return topk.top_k_dense(partial, hist, -done, k)
                best_value = topk.kth_value(hist, -done, k)
                bound = raise_bound(topk.rows_at_least(partial, best_value, k))
                cut = bound - remaining
                survivors = int(hist[max(cut + done, 0) :].sum())
                if candidates is not None and survivors > candidates:
                    cut = max(cut, topk.kth_value(hist, -done, candidates))
                    survivors = int(hist[max(cut + done, 0) :].sum())
                if candidates is None and 8 * done >= sum(chunk_nnz) and survivors > n_allowed // 2:
                    # An eighth of the query scored and most rows still in reach: the bound is not
                    # closing in (typical of real text, whose vectors share many dims). Finish as
                    # the exact scan does, without more bound work.
                    self._gave_up += 1
                    for (rest, rest_width), nnz in zip(chunks[index + 1 :], chunk_nnz[index + 1 :], strict=True):
                        done += nnz
                        hist = self._dense_chunk(rest, rest_width, qp, qn, partial, mask, -done)
                    return topk.top_k_dense(partial, hist, -done, k)
                if survivors <= _SPARSE_FRACTION * self.count:
                    self._gave_up = 0
                    rows = np.flatnonzero(partial >= cut)
                    if candidates is not None and rows.shape[0] > candidates:
                        rows = topk.best(rows, partial[rows], candidates)
                    partial = partial[rows].astype(np.int64)
                continue
            kernels.score_block_rows(self._block(start, width), width, rows, qp[start : start + width],
                                     qn[start : start + width], partial)
            if remaining == 0:
                break
            if rows.shape[0] > k:
                bound = raise_bound(rows[np.argpartition(partial, -k)[-k:]])
                keep = partial >= bound - remaining
                rows, partial = rows[keep], partial[keep]
                if candidates is not None and rows.shape[0] > candidates:
                    top = np.sort(np.argpartition(partial, -candidates)[-candidates:])
                    rows, partial = rows[top], partial[top]
            if rows.shape[0] <= max(_FINISH_SURVIVORS, 4 * k):
                partial = partial + self._exact_scores(rows, qp, qn, first_chunk=index + 1)
                break
        order = np.lexsort((rows, -partial))[:k]
        return rows[order].astype(np.int64), partial[order].astype(np.int32)


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
