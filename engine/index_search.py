"""The searches of a `BitmapIndex` (`engine.index`): exact progressive pruning (`search`), the
full scan (`search_exact`), and a sampled first pass with an exact re-rank (`search_sampled`).

`search` is exact: it returns the same rows and scores as `search_exact` (ties broken by lower
row first) unless a `candidates` cap is given. `search_sampled` (approximate ranking, exact
scores) is what `search_auto`, the retriever's search, uses on large indexes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numba
import numpy as np

from engine import bits, kernels, topk

_EXCLUDED = np.int32(-(2**30))
# Below this fraction of allowed or surviving rows, gathering survivors beats streaming all rows.
_SPARSE_FRACTION = 0.25
_FINISH_SURVIVORS = 256
# After this many pruned searches in a row gave up, `search` scans exactly, trying pruning again
# every _PROBE_EVERY searches (the answer is the same either way; only the time differs).
_GIVE_UP_STREAK = 4
_PROBE_EVERY = 16
# `search_sampled`: column chunks of the first pass (6 of 40 at 10,000 dims: 15 % of the dims),
# and rows re-ranked exactly. Chosen on real text (bench/search.py --real-text).
DEFAULT_SAMPLE_CHUNKS = 6
DEFAULT_SHORTLIST = 1000
# ... and at least this many shortlisted rows per requested result (the retriever asks for 500).
SHORTLIST_PER_RESULT = 2
# `search_auto` (the retriever's search) samples from this many rows on; below, it searches exactly
# (bench/search.py --real-text measures both at several index sizes).
SAMPLED_SEARCH_MIN_ROWS = 100_000


class IndexSearch:
    """The searches, mixed into `engine.index.BitmapIndex`, whose rows they read through `count`,
    `dims`, `words`, `chunk_words`, `source_ids`, `_body()`, `_chunks()`, `_block()` and
    `_check_rows()`; `_gave_up` and `_since_probe` are its record of how pruning went lately."""

    count: int
    dims: int
    words: int
    chunk_words: int
    _gave_up: int
    _since_probe: int

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
        return _PrunedSearch(self, qp, qn, k, candidates, mask).run(n_allowed)

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

    def sample_scores(
        self,
        q_pos: np.ndarray,
        q_neg: np.ndarray,
        *,
        sample_chunks: int = DEFAULT_SAMPLE_CHUNKS,
        allowed_sources: Iterable[int] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, int]:
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
        kernels.score_chunks_dense(
            self._body(),
            self.count,
            self.words,
            self.chunk_words,
            len(chunks),
            qp,
            qn,
            partial,
            mask if mask is not None else np.zeros(0, dtype=np.bool_),
            mask is not None,
            hist,
            -done,
        )
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
                raise ValueError(
                    f"row_mask: expected bool array of shape ({self.count},), got {row_mask.dtype} "
                    f"{row_mask.shape}"
                )
            mask = row_mask
        if allowed_sources is not None:
            allowed = np.fromiter(allowed_sources, dtype=np.int64)
            by_source = np.isin(self.source_ids, allowed)
            mask = by_source if mask is None else (mask & by_source)
        return qp, qn, int(k), None if mask is None else np.ascontiguousarray(mask)

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
        kernels.score_rows_chunks(
            self._body(), self.count, self.words, self.chunk_words, first_chunk, rows, qp, qn, out
        )
        return out


class _PrunedSearch:
    """One run of `IndexSearch.search`'s progressive pruning: the query, its nonzeros per column
    chunk, and the lower bound on the k-th best final score.

    Every allowed row is scored chunk by chunk (`all_rows`) until few enough rows can still reach
    the top k; those survivors alone are scored on (`survivors`) until the rest is decided.
    """

    def __init__(self, index: IndexSearch, qp: np.ndarray, qn: np.ndarray, k: int, candidates: int | None,
                 mask: np.ndarray | None) -> None:
        self.index, self.qp, self.qn, self.k, self.candidates, self.mask = index, qp, qn, k, candidates, mask
        self.chunks = index._chunks()
        self.chunk_nnz = [topk.nnz(qp[s : s + w], qn[s : s + w]) for s, w in self.chunks]
        self.bound = -(2**62)
        # Rows scored exactly so far, and their final scores: the best of them are mostly the same
        # rows from chunk to chunk, so each is gathered once. The k-th best of any k distinct
        # rows' final scores is a lower bound on the k-th best result.
        self.known_rows = np.zeros(0, dtype=np.int64)
        self.known_scores = np.zeros(0, dtype=np.int64)

    def run(self, n_allowed: int) -> tuple[np.ndarray, np.ndarray]:
        if n_allowed < _SPARSE_FRACTION * self.index.count:
            rows = np.flatnonzero(self.mask).astype(np.int64)
            return self.survivors(0, rows, np.zeros(rows.shape[0], dtype=np.int64))
        return self.all_rows(n_allowed)

    def raise_bound(self, best: np.ndarray) -> int:
        new = best[~np.isin(best, self.known_rows, assume_unique=True)]
        if new.shape[0]:
            self.known_rows = np.concatenate([self.known_rows, new])
            self.known_scores = np.concatenate(
                [self.known_scores, self.index._exact_scores(new, self.qp, self.qn)]
            )
        self.bound = max(self.bound, int(np.partition(self.known_scores, -self.k)[-self.k]))
        return self.bound

    def all_rows(self, n_allowed: int) -> tuple[np.ndarray, np.ndarray]:
        """Score every allowed row, chunk by chunk, while many rows can still reach the top k."""
        index, k, candidates = self.index, self.k, self.candidates
        partial = index._new_partial(self.mask)
        done, remaining = 0, sum(self.chunk_nnz)
        for number, (start, width) in enumerate(self.chunks):
            done += self.chunk_nnz[number]
            remaining -= self.chunk_nnz[number]
            hist = index._dense_chunk(start, width, self.qp, self.qn, partial, self.mask, -done)
            if remaining == 0:
                break
            cut = self.raise_bound(topk.rows_at_least(partial, topk.kth_value(hist, -done, k), k)) - remaining
            survivors = int(hist[max(cut + done, 0) :].sum())
            if candidates is not None and survivors > candidates:
                cut = max(cut, topk.kth_value(hist, -done, candidates))
                survivors = int(hist[max(cut + done, 0) :].sum())
            if candidates is None and 8 * done >= sum(self.chunk_nnz) and survivors > n_allowed // 2:
                # An eighth of the query scored and most rows still in reach: the bound is not
                # closing in (typical of real text, whose vectors share many dims). Finish as
                # the exact scan does, without more bound work.
                index._gave_up += 1
                return self.scan_rest(number + 1, partial, hist, done)
            if survivors <= _SPARSE_FRACTION * index.count:
                index._gave_up = 0
                rows = np.flatnonzero(partial >= cut)
                if candidates is not None and rows.shape[0] > candidates:
                    rows = topk.best(rows, partial[rows], candidates)
                return self.survivors(number + 1, rows, partial[rows].astype(np.int64))
        return topk.top_k_dense(partial, hist, -done, k)

    def scan_rest(
        self, first: int, partial: np.ndarray, hist: np.ndarray, done: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every allowed row on the chunks from `first` on, as the exact scan does, then the top k."""
        for (start, width), nnz in zip(self.chunks[first:], self.chunk_nnz[first:], strict=True):
            done += nnz
            hist = self.index._dense_chunk(start, width, self.qp, self.qn, partial, self.mask, -done)
        return topk.top_k_dense(partial, hist, -done, self.k)

    def survivors(self, first: int, rows: np.ndarray, partial: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`rows` (with their `partial` scores so far) alone, on the chunks from `first` on, dropping
        each row the bound puts out of reach, until none is left to score or few enough are left to
        finish exactly in one gather."""
        index, k, candidates = self.index, self.k, self.candidates
        remaining = sum(self.chunk_nnz[first:])
        for number in range(first, len(self.chunks)):
            start, width = self.chunks[number]
            remaining -= self.chunk_nnz[number]
            kernels.score_block_rows(index._block(start, width), width, rows, self.qp[start : start + width],
                                     self.qn[start : start + width], partial)
            if remaining == 0:
                break
            if rows.shape[0] > k:
                keep = partial >= self.raise_bound(rows[np.argpartition(partial, -k)[-k:]]) - remaining
                rows, partial = rows[keep], partial[keep]
                if candidates is not None and rows.shape[0] > candidates:
                    top = np.sort(np.argpartition(partial, -candidates)[-candidates:])
                    rows, partial = rows[top], partial[top]
            if rows.shape[0] <= max(_FINISH_SURVIVORS, 4 * k):
                partial = partial + index._exact_scores(rows, self.qp, self.qn, first_chunk=number + 1)
                break
        order = np.lexsort((rows, -partial))[:k]
        return rows[order].astype(np.int64), partial[order].astype(np.int32)
