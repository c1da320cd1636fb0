"""Top-k selection over the index's integer partial scores (helpers of `engine.index`).

`partial` holds one int32 score per row; a histogram of its values from `lo` upward (built by the
scoring kernels as they go) finds the k-th best value without sorting the rows.
"""

from __future__ import annotations

import numpy as np


def nnz(qp: np.ndarray, qn: np.ndarray) -> int:
    return int(np.bitwise_count(qp | qn).sum())


def empty_result() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)


def kth_value(hist: np.ndarray, lo: int, k: int) -> int:
    """Largest value v with at least k counted rows >= v (lo - 1 when fewer than k rows)."""
    at_least = np.cumsum(hist[::-1])
    position = int(np.searchsorted(at_least, k))
    if position >= hist.shape[0]:
        return lo - 1
    return lo + hist.shape[0] - 1 - position


def rows_at_least(partial: np.ndarray, value: int, k: int) -> np.ndarray:
    """Exactly k rows (fewer if not available) with the best partial scores, lower rows first on ties."""
    above = np.flatnonzero(partial > value)
    ties = np.flatnonzero(partial == value)[: max(k - above.shape[0], 0)]
    return np.concatenate([above, ties]).astype(np.int64)


def top_k_dense(partial: np.ndarray, hist: np.ndarray, lo: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    rows = rows_at_least(partial, max(kth_value(hist, lo, k), lo), k)
    scores = partial[rows]
    order = np.lexsort((rows, -scores))
    return rows[order], scores[order].astype(np.int32)


def best(rows: np.ndarray, scores: np.ndarray, n: int) -> np.ndarray:
    top = np.argpartition(scores, -n)[-n:]
    return np.sort(rows[top])
