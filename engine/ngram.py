"""Numba kernel of the n-gram channel: binding chains, coherence filter, capacity bound, agreement.

One call handles a whole batch of documents given as flat local token ids plus offsets, so no
Python runs per token or per document. The kernel trusts its caller (`engine.encoder`), which
checks shapes and dtypes once; `tests/engine/test_encoder.py` compares it with a slow NumPy
reference of the same definition (see the `engine.encoder` module docstring for the maths).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from engine.kernels import popcount_word

_ONE = np.uint64(1)


@njit(inline="always", cache=True)
def _bind_window(bitmaps, ids, start, ngram, acc_pos, acc_neg):
    """acc <- the n-gram starting at ids[start]: ternary product of the pre-permuted bitmaps.

    Whole rows at a time (no early exit per word) so the loops vectorise.
    """
    words = acc_pos.shape[0]
    token = ids[start]
    for word in range(words):
        acc_pos[word] = bitmaps[0, token, 0, word]
        acc_neg[word] = bitmaps[0, token, 1, word]
    for j in range(1, ngram):
        token = ids[start + j]
        for word in range(words):
            pos = acc_pos[word]
            neg = acc_neg[word]
            bpos = bitmaps[j, token, 0, word]
            bneg = bitmaps[j, token, 1, word]
            acc_pos[word] = (pos & bpos) | (neg & bneg)
            acc_neg[word] = (pos & bneg) | (neg & bpos)


@njit(inline="always", cache=True)
def _vote(bits, base, weight, votes, mass):
    """Add `weight` (signed) at every set bit of one word; `mass` collects |weight|."""
    while bits != 0:
        low = bits & (~bits + _ONE)
        dim = base + np.int64(popcount_word(low - _ONE))
        votes[dim] += weight
        mass[dim] += abs(weight)
        bits ^= low


@njit(parallel=True, cache=True)
def ngram_agreement(flat_ids, offsets, bitmaps, signs, ngram, m_cap, c_min, out):
    """Per-dimension agreement in [0, 1] of the selected n-grams with the unigram polarity.

    Shapes: flat_ids (t,) int64 local ids; offsets (b+1,) int64; bitmaps (ngram, v, 2, w) uint64
    (position j's vocabulary rotated by j dims, [.., 0, :] = pos, [.., 1, :] = neg); signs (b, d)
    int8 sign of the unigram vector; out (b, d) float32, zero on entry, written in place.
    """
    n_docs = offsets.shape[0] - 1
    words = bitmaps.shape[3]
    dims = out.shape[1]
    for doc in prange(n_docs):
        lo = offsets[doc]
        n_windows = offsets[doc + 1] - lo - ngram + 1
        if n_windows <= 0:
            continue
        acc_pos = np.empty(words, np.uint64)
        acc_neg = np.empty(words, np.uint64)
        counts = np.empty(n_windows, np.int64)
        for i in range(n_windows):
            _bind_window(bitmaps, flat_ids, lo + i, ngram, acc_pos, acc_neg)
            total = np.int64(0)
            for word in range(words):
                total += np.int64(popcount_word(acc_pos[word] | acc_neg[word]))
            counts[i] = total
        # Stable sort on -count: most coherent first, ties to the earlier window.
        order = np.argsort(-counts, kind="mergesort")
        votes = np.zeros(dims, np.float32)
        mass = np.zeros(dims, np.float32)
        for rank in range(min(m_cap, n_windows)):
            i = order[rank]
            if counts[i] < c_min:
                break
            weight = np.float32(1.0 / np.sqrt(counts[i]))
            _bind_window(bitmaps, flat_ids, lo + i, ngram, acc_pos, acc_neg)
            for word in range(words):
                _vote(acc_pos[word], word * 64, weight, votes, mass)
                _vote(acc_neg[word], word * 64, -weight, votes, mass)
        for dim in range(dims):
            if mass[dim] > 0:
                net = votes[dim] / mass[dim] * signs[doc, dim]
                if net > 0:
                    out[doc, dim] = net
