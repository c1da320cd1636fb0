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


@njit(inline="always", cache=True)
def _row_score(dp, dn, i, qp, qn):
    """agree - disagree of doc row i of (n, w) against one query (w,)."""
    agree = np.int64(0)
    disagree = np.int64(0)
    for j in range(dp.shape[1]):
        p = dp[i, j]
        m = dn[i, j]
        agree += popcount_word((p & qp[j]) | (m & qn[j]))
        disagree += popcount_word((p & qn[j]) | (m & qp[j]))
    return agree - disagree


@njit(parallel=True, cache=True)
def score_rows(dp, dn, qp, qn, out):
    """out[i] = agree - disagree of docs (n, w) against one query (w,)."""
    for i in prange(dp.shape[0]):
        out[i] = _row_score(dp, dn, i, qp, qn)


@njit(parallel=True, cache=True)
def score_rows_batch(dp, dn, qp, qn, out):
    """out[q, i] for docs (n, w) against queries (nq, w); each doc row is loaded once."""
    for i in prange(dp.shape[0]):
        for q in range(qp.shape[0]):
            out[q, i] = _row_score(dp, dn, i, qp[q], qn[q])


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


# ---------------------------------------------------------------- index kernels
#
# The index stores column chunks: chunk c is a block of shape (count, 2 * wc) whose row i
# is [pos words of chunk c | neg words of chunk c]. `data` is the flat uint64 file body.


@njit(inline="always", cache=True)
def _chunk_score(block, i, wc, qp, qn):
    agree = np.int64(0)
    disagree = np.int64(0)
    for j in range(wc):
        p = block[i, j]
        m = block[i, wc + j]
        agree += popcount_word((p & qp[j]) | (m & qn[j]))
        disagree += popcount_word((p & qn[j]) | (m & qp[j]))
    return agree - disagree


@njit(parallel=True, cache=True)
def score_block_dense(block, wc, qp, qn, partial, mask, use_mask, hist, lo):
    """partial[i] += chunk score of every (allowed) row; hist[t, v - lo] counts new values.

    Each of the hist.shape[0] threads owns a contiguous row range and its own histogram
    row, so the histogram used for top-k selection costs no extra pass over `partial`.
    """
    n = block.shape[0]
    n_threads, n_bins = hist.shape
    step = (n + n_threads - 1) // n_threads
    for t in prange(n_threads):
        stop = min(n, (t + 1) * step)
        for i in range(t * step, stop):
            if use_mask and not mask[i]:
                continue
            value = partial[i] + _chunk_score(block, i, wc, qp, qn)
            partial[i] = value
            b = value - lo
            if b >= 0 and b < n_bins:
                hist[t, b] += 1


@njit(parallel=True, cache=True)
def score_chunks_dense(
    data, count, n_words, chunk_words, n_chunks, qp, qn, partial, mask, use_mask, hist, lo
):
    """partial[i] += the score of every (allowed) row over the column chunks 0..n_chunks - 1, in one
    launch; hist[t, v - lo] counts the rows' final values. Each of the hist.shape[0] threads owns a
    contiguous row range and reads it chunk after chunk (each chunk's rows lie one after another)."""
    n_threads, n_bins = hist.shape
    step = (count + n_threads - 1) // n_threads
    for t in prange(n_threads):
        first = t * step
        last = min(count, first + step)
        start = 0
        for _ in range(n_chunks):
            wc = min(chunk_words, n_words - start)
            block = data[count * 2 * start : count * 2 * (start + wc)].reshape((count, 2 * wc))
            cp = qp[start : start + wc]
            cn = qn[start : start + wc]
            for i in range(first, last):
                if use_mask and not mask[i]:
                    continue
                partial[i] += _chunk_score(block, i, wc, cp, cn)
            start += wc
        for i in range(first, last):
            if use_mask and not mask[i]:
                continue
            v = partial[i] - lo
            if v >= 0 and v < n_bins:
                hist[t, v] += 1


@njit(parallel=True, cache=True)
def score_block_rows(block, wc, rows, qp, qn, partial):
    """partial[j] += chunk score of row rows[j] (survivors only)."""
    for j in prange(rows.shape[0]):
        partial[j] += _chunk_score(block, rows[j], wc, qp, qn)


@njit(parallel=True, cache=True)
def score_rows_chunks(data, count, n_words, chunk_words, first_chunk, rows, qp, qn, out):
    """out[j] = score of row rows[j] over the chunks first_chunk.. (all remaining words)."""
    for j in prange(rows.shape[0]):
        row = rows[j]
        total = np.int64(0)
        start = first_chunk * chunk_words
        while start < n_words:
            wc = min(chunk_words, n_words - start)
            base = count * 2 * start + row * 2 * wc
            for w in range(wc):
                p = data[base + w]
                m = data[base + wc + w]
                a = qp[start + w]
                b = qn[start + w]
                total += popcount_word((p & a) | (m & b)) - popcount_word((p & b) | (m & a))
            start += wc
        out[j] = total


@njit(parallel=True, cache=True)
def gather_rows(data, count, n_words, chunk_words, rows, outp, outn):
    """outp[j], outn[j] = the full (n_words,) bitmaps of row rows[j]."""
    for j in prange(rows.shape[0]):
        row = rows[j]
        start = 0
        while start < n_words:
            wc = min(chunk_words, n_words - start)
            base = count * 2 * start + row * 2 * wc
            for w in range(wc):
                outp[j, start + w] = data[base + w]
                outn[j, start + w] = data[base + wc + w]
            start += wc


@njit(parallel=True, cache=True)
def count_block_bits(block, wc):
    """(set bits in the pos halves, set bits in the neg halves) of a chunk block."""
    pos = np.int64(0)
    neg = np.int64(0)
    for i in prange(block.shape[0]):
        row_pos = np.int64(0)
        row_neg = np.int64(0)
        for j in range(wc):
            row_pos += popcount_word(block[i, j])
            row_neg += popcount_word(block[i, wc + j])
        pos += row_pos
        neg += row_neg
    return pos, neg


@njit(parallel=True, cache=True)
def block_bit_frequencies(block, out):
    """out[t, j, b] += number of rows (in thread t's range) with bit b of column j set.

    Byte-lane counters: `(x >> s) & 0x0101..` adds bits s, s+8, ..., s+56 of x into eight
    8-bit lanes at once; lanes are flushed to int64 every 255 rows, before they overflow.
    """
    n, n_cols = block.shape
    n_threads = out.shape[0]
    step = (n + n_threads - 1) // n_threads
    for t in prange(n_threads):
        lanes = np.zeros((n_cols, 8), dtype=np.uint64)
        start = t * step
        stop = min(n, start + step)
        while start < stop:
            end = min(stop, start + 255)
            for i in range(start, end):
                for j in range(n_cols):
                    x = block[i, j]
                    for s in range(8):
                        lanes[j, s] += (x >> np.uint64(s)) & _H01
            for j in range(n_cols):
                for s in range(8):
                    packed = lanes[j, s]
                    for byte in range(8):
                        out[t, j, byte * 8 + s] += (packed >> np.uint64(8 * byte)) & np.uint64(0xFF)
                    lanes[j, s] = 0
            start = end


# ---------------------------------------------------------------- vocabulary projection (formats 3, 4)
#
# Every value is computed in a fixed order, one row at a time, with IEEE operations that LLVM may
# not reorder or fuse (no fastmath): a row's result is the same whatever batch it is in, on any
# x86-64 or ARM machine. Format 3's projection is integer arithmetic, exact in any order; format
# 4's is float64 in one fixed order.

_PROJECTION_TILE = 1024


@njit(inline="always", cache=True)
def _corrected_row(rows, t, mean, directions, v):
    """v = row t made unit, less `mean` and its components along `directions`; returns the norm of
    v (the caller makes it unit again). rows (n, e) float32, v (e,) float64."""
    e = rows.shape[1]
    c = directions.shape[0]
    total = 0.0
    for i in range(e):
        a = np.float64(rows[t, i])
        total += a * a
    norm = np.sqrt(total)
    for i in range(e):
        a = np.float64(rows[t, i]) / norm if norm > 0.0 else 0.0
        v[i] = a - np.float64(mean[i])
    coefficients = np.empty(c, dtype=np.float64)
    for k in range(c):
        dot = 0.0
        for i in range(e):
            dot += v[i] * np.float64(directions[k, i])
        coefficients[k] = dot
    for k in range(c):
        for i in range(e):
            v[i] -= coefficients[k] * np.float64(directions[k, i])
    total = 0.0
    for i in range(e):
        total += v[i] * v[i]
    return np.sqrt(total)


@njit(cache=True)
def fixed_point_rows(rows, mean, directions, one, out):
    """out[t] = rint(one * u_t) int32, u_t the unit row t less `mean` and its components along
    `directions`, unit again (a row that becomes zero stays zero). rows (n, e) float32."""
    n, e = rows.shape
    v = np.empty(e, dtype=np.float64)
    for t in range(n):
        norm = _corrected_row(rows, t, mean, directions, v)
        for i in range(e):
            out[t, i] = np.int32(np.rint(v[i] / norm * one)) if norm > 0.0 else np.int32(0)


@njit(cache=True)
def corrected_unit_rows(rows, mean, directions, out):
    """out[t] = u_t float64, as `fixed_point_rows` computes it before rounding. rows (n, e) float32."""
    n, e = rows.shape
    v = np.empty(e, dtype=np.float64)
    for t in range(n):
        norm = _corrected_row(rows, t, mean, directions, v)
        for i in range(e):
            out[t, i] = v[i] / norm if norm > 0.0 else 0.0


_FLOAT_TILE = 1024
_FLOAT_ROWS = 4


@njit(parallel=True, cache=True)
def project_float(x, p, out):
    """out[t, d] = float32(sum_i x[t, i] * float64(p[i, d])), x (n, e) float64, p (e, dims) float32.

    Format 4's projection: each product and each sum is one float64 operation, the sum taken in
    ascending i (four terms per pass, still in that order), with no reassociation and no fused
    multiply-add (no fastmath), so out[t] depends on row t alone, never on the batch, the tile or
    the thread. Columns go in tiles of p that stay in L2 across a block of rows.
    """
    n, e = x.shape
    dims = p.shape[1]
    n_tiles = (dims + _FLOAT_TILE - 1) // _FLOAT_TILE
    for tile in prange(n_tiles):
        lo = tile * _FLOAT_TILE
        hi = min(dims, lo + _FLOAT_TILE)
        width = hi - lo
        acc = np.empty((_FLOAT_ROWS, width), dtype=np.float64)
        for t0 in range(0, n, _FLOAT_ROWS):
            t1 = min(n, t0 + _FLOAT_ROWS)
            acc[:] = 0.0
            i = 0
            while i + 4 <= e:
                p0, p1, p2, p3 = p[i, lo:hi], p[i + 1, lo:hi], p[i + 2, lo:hi], p[i + 3, lo:hi]
                for t in range(t0, t1):
                    x0, x1, x2, x3 = x[t, i], x[t, i + 1], x[t, i + 2], x[t, i + 3]
                    a = acc[t - t0]
                    for d in range(width):
                        a[d] = (((a[d] + x0 * np.float64(p0[d])) + x1 * np.float64(p1[d]))
                                + x2 * np.float64(p2[d])) + x3 * np.float64(p3[d])
                i += 4
            while i < e:
                p_row = p[i, lo:hi]
                for t in range(t0, t1):
                    xi = x[t, i]
                    a = acc[t - t0]
                    for d in range(width):
                        a[d] += xi * np.float64(p_row[d])
                i += 1
            for t in range(t0, t1):
                for d in range(width):
                    out[t, lo + d] = np.float32(acc[t - t0, d])


@njit(parallel=True, cache=True)
def project_fixed_point(x, g, column_scale, out):
    """out[t, d] = float32(sum_i x[t, i] * g[i, d] * column_scale[d]), x (n, e) int32, g (e, dims) int8.

    The caller bounds |x| so that every partial sum is an integer below 2^53 in magnitude: the
    float64 sums are then exact in any order and grouping (so four rows of `g` are added per pass,
    and float64 lanes vectorise where int32 multiplies do not). Columns go in tiles whose rows of
    `g` stay in L2 across the rows of `x`.
    """
    n, e = x.shape
    dims = g.shape[1]
    n_tiles = (dims + _PROJECTION_TILE - 1) // _PROJECTION_TILE
    for tile in prange(n_tiles):
        lo = tile * _PROJECTION_TILE
        hi = min(dims, lo + _PROJECTION_TILE)
        acc = np.empty(hi - lo, dtype=np.float64)
        for t in range(n):
            acc[:] = 0.0
            i = 0
            while i + 4 <= e:
                x0, x1 = np.float64(x[t, i]), np.float64(x[t, i + 1])
                x2, x3 = np.float64(x[t, i + 2]), np.float64(x[t, i + 3])
                g0, g1, g2, g3 = g[i, lo:hi], g[i + 1, lo:hi], g[i + 2, lo:hi], g[i + 3, lo:hi]
                for d in range(hi - lo):
                    acc[d] += (x0 * np.float64(g0[d]) + x1 * np.float64(g1[d])) + \
                        (x2 * np.float64(g2[d]) + x3 * np.float64(g3[d]))
                i += 4
            while i < e:
                xi = np.float64(x[t, i])
                g_row = g[i, lo:hi]
                for d in range(hi - lo):
                    acc[d] += xi * np.float64(g_row[d])
                i += 1
            for d in range(hi - lo):
                out[t, lo + d] = np.float32(acc[d] * column_scale[lo + d])


@njit(parallel=True, cache=True)
def int8_dots(codes, query, out):
    """out[i] = codes[i] . query: int8 rows (n, d) against an int8 query (d,), summed in int32
    (`engine.meaning`'s scan: no float copy of the rows)."""
    for i in prange(codes.shape[0]):
        acc = np.int32(0)
        for j in range(codes.shape[1]):
            acc += np.int32(codes[i, j]) * np.int32(query[j])
        out[i] = acc
