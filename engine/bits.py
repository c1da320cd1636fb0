"""Packed ternary hypervector math (spec "Core Math").

Conventions every caller relies on:

- A ternary hypervector of `dims` dimensions is two bitmaps `pos` and `neg`, each
  `words(dims) = ceil(dims / 64)` uint64 words. Dimension d is bit `d % 64` of word
  `d // 64` (little-endian bit order); `bstride(dims) = words(dims) * 8` bytes.
- Padding bits beyond `dims` are always zero, and no dimension is set in both bitmaps.
- Leading axes are batch axes: `(..., words)` bitmaps pair with `(..., dims)` int8 values.

Scoring and binding run on numba kernels (`engine.kernels`); `score64_numpy` is the plain
numpy formulation, kept as the benchmark baseline and as a readable reference.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

import numpy as np

from engine import kernels

_ALL_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)


# ---------------------------------------------------------------- sizes and masks


def words(dims: int) -> int:
    """Number of uint64 words holding `dims` bits (dims >= 1)."""
    if isinstance(dims, bool) or not isinstance(dims, int | np.integer) or dims < 1:
        raise ValueError(f"dims must be a positive int, got {dims!r}")
    return (int(dims) + 63) // 64


def bstride(d_hdc: int) -> int:
    """Byte stride of one packed bitmap of `d_hdc` dimensions (a multiple of 8)."""
    return words(d_hdc) * 8


def mask64_for_dims(dims: int, stride_bytes: int) -> np.ndarray:
    """uint64 (stride_bytes // 8,) mask: ones on bits 0..dims-1, zeros on padding bits."""
    if stride_bytes % 8 or stride_bytes < bstride(dims):
        raise ValueError(
            f"stride_bytes must be a multiple of 8 and >= bstride({dims}) = {bstride(dims)}, got "
            f"{stride_bytes}"
        )
    mask = np.zeros(stride_bytes // 8, dtype=np.uint64)
    full, rest = divmod(dims, 64)
    mask[:full] = _ALL_ONES
    if rest:
        mask[full] = np.uint64((1 << rest) - 1)
    return mask


# ---------------------------------------------------------------- validation helpers


def _as_bitmap(name: str, array: Any) -> np.ndarray:
    if not isinstance(array, np.ndarray):
        raise ValueError(f"{name}: expected a numpy uint64 array, got {type(array).__name__}")
    if array.dtype != np.uint64:
        raise ValueError(f"{name}: dtype {array.dtype} is not supported; bitmaps must be uint64")
    return array


def _same_shape(names: str, *arrays: np.ndarray) -> None:
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        raise ValueError(f"{names}: shapes must match, got {[a.shape for a in arrays]}")


def _pack_bool(bits: np.ndarray) -> np.ndarray:
    """bool (..., dims) → uint64 (..., words(dims)), little-endian bit order."""
    dims = bits.shape[-1]
    packed = np.packbits(bits, axis=-1, bitorder="little")
    pad = bstride(dims) - packed.shape[-1]
    if pad:
        packed = np.concatenate(
            [packed, np.zeros(packed.shape[:-1] + (pad,), dtype=np.uint8)], axis=-1
        )
    return np.ascontiguousarray(packed).view("<u8").astype(np.uint64, copy=False)


def _unpack_bool(bitmap: np.ndarray, dims: int) -> np.ndarray:
    as_bytes = np.ascontiguousarray(bitmap).astype("<u8", copy=False).view(np.uint8)
    return np.unpackbits(as_bytes, axis=-1, count=dims, bitorder="little").astype(bool)


# ---------------------------------------------------------------- pack / unpack / quantize


def pack_ternary(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 (..., dims) in {-1, 0, 1} → (pos, neg) uint64 (..., words(dims))."""
    if not isinstance(values, np.ndarray) or values.dtype.kind != "i":
        raise ValueError("values: expected a signed integer numpy array (int8 preferred) in {-1, 0, 1}")
    if values.ndim == 0:
        raise ValueError("values: expected at least one axis (..., dims)")
    words(values.shape[-1])
    if values.size and (values.min() < -1 or values.max() > 1):
        raise ValueError("values: entries must be in {-1, 0, 1}")
    return _pack_bool(values > 0), _pack_bool(values < 0)


def unpack_ternary(pos: np.ndarray, neg: np.ndarray, dims: int) -> np.ndarray:
    """(pos, neg) uint64 (..., words(dims)) → int8 (..., dims) in {-1, 0, 1}."""
    pos = _as_bitmap("pos", pos)
    neg = _as_bitmap("neg", neg)
    _same_shape("pos, neg", pos, neg)
    if pos.ndim == 0 or pos.shape[-1] != words(dims):
        raise ValueError(f"pos/neg: last axis must be words({dims}) = {words(dims)}, got shape {pos.shape}")
    return _unpack_bool(pos, dims).astype(np.int8) - _unpack_bool(neg, dims).astype(np.int8)


def quantize_ternary(x: np.ndarray, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """float (..., dims) → (pos, neg) uint64: +1 where x > tau, -1 where x < -tau, else 0.

    tau must be >= 0 (otherwise a dimension could be both signs). NaN quantises to 0.
    Torch tensors are accepted and converted to numpy.
    """
    x = _to_numpy(x)
    if not isinstance(x, np.ndarray) or x.dtype.kind != "f":
        raise ValueError("x: expected a floating-point array (float16/32/64)")
    if x.ndim == 0:
        raise ValueError("x: expected at least one axis (..., dims)")
    if not (tau >= 0 and math.isfinite(tau)):
        raise ValueError(f"tau must be a finite number >= 0, got {tau!r}")
    words(x.shape[-1])
    return _pack_bool(x > tau), _pack_bool(x < -tau)


# ---------------------------------------------------------------- popcount and scoring


def popcount64(x: np.ndarray) -> np.ndarray:
    """Per-word set-bit count of a uint64 array (any shape) → uint8 array of the same shape.

    SWAR Hamming weight with the magic constants 0x55.., 0x33.., 0x0F.., 0x01..; the result
    matches `np.bitwise_count` (also uint8).
    """
    x = _as_bitmap("x", x)
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.shape[0], dtype=np.uint8)
    if flat.shape[0]:
        kernels.popcount_array(flat, out)
    return out.reshape(x.shape)


def _check_docs_query(dp: Any, dn: Any, qp: Any, qn: Any, query_ndim: int) -> tuple[np.ndarray, ...]:
    dp, dn, qp, qn = (_as_bitmap(n, a) for n, a in (("dp", dp), ("dn", dn), ("qp", qp), ("qn", qn)))
    _same_shape("dp, dn", dp, dn)
    _same_shape("qp, qn", qp, qn)
    if dp.ndim != 2:
        raise ValueError(f"dp/dn: expected shape (n, words), got {dp.shape}")
    if qp.ndim != query_ndim or qp.shape[-1] != dp.shape[1]:
        want = "(words,)" if query_ndim == 1 else "(q, words)"
        raise ValueError(f"qp/qn: expected shape {want} with words = {dp.shape[1]}, got {qp.shape}")
    return tuple(np.ascontiguousarray(a) for a in (dp, dn, qp, qn))


def score64(dp: np.ndarray, dn: np.ndarray, qp: np.ndarray, qn: np.ndarray) -> np.ndarray:
    """Ternary similarity of docs against one query.

    Shapes: dp, dn (n, words) uint64; qp, qn (words,) uint64 → int32 (n,), equal to
    popcount((dp & qp) | (dn & qn)) - popcount((dp & qn) | (dn & qp)) summed over words,
    i.e. the dot product of the unpacked ternary vectors.
    """
    dp, dn, qp, qn = _check_docs_query(dp, dn, qp, qn, 1)
    out = np.empty(dp.shape[0], dtype=np.int32)
    if dp.shape[0]:
        kernels.score_rows(dp, dn, qp, qn, out)
    return out


def score64_batch(dp: np.ndarray, dn: np.ndarray, qp: np.ndarray, qn: np.ndarray) -> np.ndarray:
    """Shapes: dp, dn (n, words) uint64; qp, qn (q, words) uint64 → int32 (q, n)."""
    dp, dn, qp, qn = _check_docs_query(dp, dn, qp, qn, 2)
    out = np.empty((qp.shape[0], dp.shape[0]), dtype=np.int32)
    if out.size:
        kernels.score_rows_batch(dp, dn, qp, qn, out)
    return out


def score64_numpy(dp: np.ndarray, dn: np.ndarray, qp: np.ndarray, qn: np.ndarray) -> np.ndarray:
    """Same contract as `score64`, in plain numpy (`np.bitwise_count`); the baseline."""
    dp, dn, qp, qn = _check_docs_query(dp, dn, qp, qn, 1)
    agree = np.bitwise_count((dp & qp) | (dn & qn)).sum(axis=1, dtype=np.int32)
    disagree = np.bitwise_count((dp & qn) | (dn & qp)).sum(axis=1, dtype=np.int32)
    return agree - disagree


# ---------------------------------------------------------------- binding and permutation


def bind_ternary_bits_into(
    ap: np.ndarray,
    an: np.ndarray,
    bp: np.ndarray,
    bn: np.ndarray,
    outp: np.ndarray,
    outn: np.ndarray,
    tmp: np.ndarray | None = None,
) -> None:
    """Element-wise ternary product a * b written into (outp, outn); no allocation.

    All arrays: same shape, uint64, C-contiguous. The outputs must not overlap the inputs.
    `tmp` is accepted for the spec's signature; the fused kernel needs no scratch space.
    """
    arrays = [_as_bitmap(n, a) for n, a in (("ap", ap), ("an", an), ("bp", bp), ("bn", bn))]
    outs = [_as_bitmap(n, a) for n, a in (("outp", outp), ("outn", outn))]
    if tmp is not None:
        _as_bitmap("tmp", tmp)
    _same_shape("ap, an, bp, bn, outp, outn", *arrays, *outs)
    for name, out in zip(("outp", "outn"), outs, strict=True):
        if not out.flags.c_contiguous:
            raise ValueError(f"{name}: must be C-contiguous")
        if any(np.may_share_memory(out, a) for a in arrays):
            raise ValueError(f"{name}: must not overlap an input bitmap")
    if np.may_share_memory(outs[0], outs[1]):
        raise ValueError("outp, outn: must not overlap each other")
    flat = [np.ascontiguousarray(a).reshape(-1) for a in arrays]
    if flat[0].shape[0]:
        kernels.bind_flat(*flat, outs[0].reshape(-1), outs[1].reshape(-1))


def bind_ternary_bits(
    ap: np.ndarray, an: np.ndarray, bp: np.ndarray, bn: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Element-wise ternary product: (+)(+)→+, (+)(-)→-, (0)(x)→0. Same-shape uint64 in and out."""
    outp = np.empty(np.shape(ap), dtype=np.uint64)
    outn = np.empty(np.shape(ap), dtype=np.uint64)
    bind_ternary_bits_into(ap, an, bp, bn, outp, outn)
    return outp, outn


def _shift_up(bitmap: np.ndarray, shift: int) -> np.ndarray:
    """Move bit d to bit d + shift along the packed last axis; bits past the end drop."""
    n_words = bitmap.shape[-1]
    word_shift, bit_shift = divmod(shift, 64)
    out = np.zeros_like(bitmap)
    if word_shift >= n_words:
        return out
    out[..., word_shift:] = bitmap[..., : n_words - word_shift]
    if bit_shift:
        carry = np.zeros_like(out)
        carry[..., 1:] = out[..., :-1] >> np.uint64(64 - bit_shift)
        out = (out << np.uint64(bit_shift)) | carry
    return out


def _shift_down(bitmap: np.ndarray, shift: int) -> np.ndarray:
    """Move bit d to bit d - shift along the packed last axis; bits below 0 drop."""
    n_words = bitmap.shape[-1]
    word_shift, bit_shift = divmod(shift, 64)
    out = np.zeros_like(bitmap)
    if word_shift >= n_words:
        return out
    out[..., : n_words - word_shift] = bitmap[..., word_shift:]
    if bit_shift:
        carry = np.zeros_like(out)
        carry[..., :-1] = out[..., 1:] << np.uint64(64 - bit_shift)
        out = (out >> np.uint64(bit_shift)) | carry
    return out


def permute_bits(pos: np.ndarray, neg: np.ndarray, dims: int, shift: int) -> tuple[np.ndarray, np.ndarray]:
    """Cyclic rotation ρ^shift of the dims-long ternary vector, like `np.roll(v, shift)`.

    Dimension d moves to (d + shift) mod dims; negative shifts rotate the other way.
    Shapes: pos, neg (..., words(dims)) uint64 → same. Padding bits stay zero.
    """
    pos = _as_bitmap("pos", pos)
    neg = _as_bitmap("neg", neg)
    _same_shape("pos, neg", pos, neg)
    if pos.ndim == 0 or pos.shape[-1] != words(dims):
        raise ValueError(f"pos/neg: last axis must be words({dims}) = {words(dims)}, got shape {pos.shape}")
    shift = int(shift) % dims
    mask = mask64_for_dims(dims, bstride(dims))

    def rotate(bitmap: np.ndarray) -> np.ndarray:
        bitmap = bitmap & mask
        if shift == 0:
            return bitmap
        return (_shift_up(bitmap, shift) | _shift_down(bitmap, dims - shift)) & mask

    return rotate(pos), rotate(neg)


# ---------------------------------------------------------------- threshold and compression


def _to_numpy(values: Any) -> Any:
    if hasattr(values, "detach") and hasattr(values, "cpu"):
        return values.detach().cpu().numpy()
    return values


def adaptive_threshold(vals: Any) -> float:
    """L-statistic threshold `median + L2 * log(n)` over a 1-D score sample.

    L2 is the unbiased second sample L-moment (half Gini mean difference) of the lower
    half: with the scores sorted ascending, lower = sorted[: ceil(n / 2)] (the median is
    included when n is odd), m = len(lower),
    b0 = mean(lower), b1 = sum_i (i / (m - 1)) * lower[i] / m  (i = 0..m-1), L2 = 2*b1 - b0.
    Tight lower tails give small L2 (an aggressive cut near the median); spread ones
    give a permissive cut. Degenerate sizes:
    n = 0 → -inf (nothing to reject); n = 1 → that value (log 1 = 0);
    n = 2 → the median, since a one-element lower half has L2 = 0.
    Accepts numpy arrays, sequences and torch tensors; NaN raises ValueError.
    """
    sample = np.asarray(_to_numpy(vals), dtype=np.float64).reshape(-1)
    n = sample.shape[0]
    if n == 0:
        return float("-inf")
    if np.isnan(sample).any():
        raise ValueError("vals: contains NaN")
    ordered = np.sort(sample)
    median = float(np.median(ordered))
    lower = ordered[: (n + 1) // 2]
    m = lower.shape[0]
    l2 = 0.0
    if m >= 2:
        b0 = lower.mean()
        b1 = float(np.dot(np.arange(m) / (m - 1), lower)) / m
        l2 = 2.0 * b1 - b0
    return median + l2 * math.log(n)


_WORD = re.compile(r"\S+")
_STRIP = re.compile(r"^\W+|\W+$")


def compress_context(text: str) -> str:
    """Drop words that are more frequent in `text` than the median word; keep the rest in order.

    Rule: words are whitespace-separated tokens; a word's key is its lower-cased form with
    leading/trailing punctuation stripped (tokens that are only punctuation are kept as they
    are). For each distinct key, inverse frequency = 1 / count(key). Every occurrence of a
    key whose inverse frequency is strictly below the median inverse frequency over the
    distinct keys is removed. Kept words are joined by single spaces (whitespace normalised).
    A text where all keys are equally frequent is returned unchanged apart from whitespace.
    """
    if not isinstance(text, str):
        raise ValueError(f"text: expected str, got {type(text).__name__}")
    tokens = _WORD.findall(text)
    keys = [_STRIP.sub("", token).lower() for token in tokens]
    counts = Counter(key for key in keys if key)
    if not counts:
        return " ".join(tokens)
    median_inverse = float(np.median([1.0 / c for c in counts.values()]))
    return " ".join(
        token
        for token, key in zip(tokens, keys, strict=True)
        if not key or 1.0 / counts[key] >= median_inverse
    )
