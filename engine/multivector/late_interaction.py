"""Late-interaction (MaxSim) scoring of candidate multi-vector sequences.

score(query, doc) = sum over query rows i of max over doc rows j of <query_i, doc_j>.

Candidates arrive concatenated into one (total_rows, dim) matrix with segment offsets, so
scoring n candidates is one matmul plus one segmented max (`np.maximum.reduceat`) instead
of a Python loop per candidate or per vector.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def concatenate_sequences(sequences: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Stack sequences (len_k, dim) into (sum len_k, dim) float32 and offsets (n + 1,) int64.

    Candidate k occupies rows offsets[k]:offsets[k + 1]. Every sequence must be non-empty.
    """
    if not sequences:
        return np.empty((0, 0), dtype=np.float32), np.zeros(1, dtype=np.int64)
    lengths = np.array([len(sequence) for sequence in sequences], dtype=np.int64)
    if (lengths == 0).any():
        raise ValueError(f"candidate {int(np.argmin(lengths))} has an empty sequence; MaxSim needs >= 1 row")
    offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return np.concatenate(sequences, axis=0).astype(np.float32, copy=False), offsets


def maxsim_scores(query: np.ndarray, concatenated: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """MaxSim of one query against n concatenated candidates.

    Shapes: query (q, dim) float, concatenated (total, dim) float, offsets (n + 1,) int
    with offsets[0] == 0, offsets[-1] == total and strictly increasing → scores (n,) float32.
    """
    query = np.asarray(query, dtype=np.float32)
    concatenated = np.asarray(concatenated, dtype=np.float32)
    offsets = np.asarray(offsets, dtype=np.int64)
    if query.ndim != 2 or query.shape[0] == 0:
        raise ValueError(f"query must have shape (q >= 1, dim), got {query.shape}")
    n = len(offsets) - 1
    if n <= 0:
        return np.empty(0, dtype=np.float32)
    if concatenated.ndim != 2 or concatenated.shape[1] != query.shape[1]:
        raise ValueError(f"candidates must have shape (total, {query.shape[1]}), got {concatenated.shape}")
    if offsets[0] != 0 or offsets[-1] != concatenated.shape[0] or (np.diff(offsets) <= 0).any():
        raise ValueError(
            f"offsets must rise strictly from 0 to {concatenated.shape[0]}, got "
            f"{offsets[:3]}...{offsets[-1:]}"
        )
    similarities = query @ concatenated.T
    return np.maximum.reduceat(similarities, offsets[:-1], axis=1).sum(axis=0, dtype=np.float32)


def maxsim_many(query: np.ndarray, sequences: Sequence[np.ndarray]) -> np.ndarray:
    """MaxSim of one query (q, dim) against each sequence (len_k, dim) → (n,) float32."""
    concatenated, offsets = concatenate_sequences(sequences)
    return maxsim_scores(query, concatenated, offsets)
