"""Numba kernels behind `engine.bits` and `engine.index`.

These functions trust their callers: shapes, dtypes (uint64 bitmaps, C-contiguous) and
index ranges are checked once at the public boundary in `bits.py` / `index.py`, never here.

Popcount is written as the SWAR Hamming weight. LLVM's AggressiveInstCombine recognises
that exact idiom and turns it into `llvm.ctpop`, which the loop vectoriser then lowers to
`vpopcntq` (AVX-512 VPOPCNTDQ) or `popcnt`; `bench/search.py` checks the resulting speed
against the machine's measured read bandwidth. `fastmath` stays off: all work is integer,
and integer reductions vectorise without it.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)
_S1 = np.uint64(1)
_S2 = np.uint64(2)
_S4 = np.uint64(4)
_S56 = np.uint64(56)


@njit(inline="always", cache=True)
def popcount_word(x):
    x = x - ((x >> _S1) & _M1)
    x = (x & _M2) + ((x >> _S2) & _M2)
    x = (x + (x >> _S4)) & _M4
    return (x * _H01) >> _S56


@njit(parallel=True, cache=True)
def popcount_array(flat, out):
    for i in prange(flat.shape[0]):
        out[i] = popcount_word(flat[i])


@njit(parallel=True, cache=True)
def score_rows(dp, dn, qp, qn, out):
    """out[i] = agree - disagree of docs (n, w) against one query (w,)."""
    n, w = dp.shape
    for i in prange(n):
        agree = np.int64(0)
        disagree = np.int64(0)
        for j in range(w):
            p = dp[i, j]
            m = dn[i, j]
            agree += popcount_word((p & qp[j]) | (m & qn[j]))
            disagree += popcount_word((p & qn[j]) | (m & qp[j]))
        out[i] = agree - disagree


@njit(parallel=True, cache=True)
def score_rows_batch(dp, dn, qp, qn, out):
    """out[q, i] for docs (n, w) against queries (nq, w); each doc row is loaded once."""
    n, w = dp.shape
    nq = qp.shape[0]
    for i in prange(n):
        for q in range(nq):
            agree = np.int64(0)
            disagree = np.int64(0)
            for j in range(w):
                p = dp[i, j]
                m = dn[i, j]
                agree += popcount_word((p & qp[q, j]) | (m & qn[q, j]))
                disagree += popcount_word((p & qn[q, j]) | (m & qp[q, j]))
            out[q, i] = agree - disagree


@njit(parallel=True, cache=True)
def bind_flat(ap, an, bp, bn, outp, outn):
    """Ternary product of flat (m,) bitmaps; one pass, outputs must not alias inputs."""
    for i in prange(ap.shape[0]):
        a_pos = ap[i]
        a_neg = an[i]
        b_pos = bp[i]
        b_neg = bn[i]
        outp[i] = (a_pos & b_pos) | (a_neg & b_neg)
        outn[i] = (a_pos & b_neg) | (a_neg & b_pos)
