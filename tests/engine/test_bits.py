"""engine.bits against slow, obviously-correct references on unpacked int8 vectors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine import bits

DIMS = [1, 63, 64, 65, 127, 10000]
COUNTS = [0, 1, 7, 1000]


def random_ternary(rng: np.random.Generator, n: int, dims: int) -> np.ndarray:
    return rng.integers(-1, 2, size=(n, dims)).astype(np.int8)


def padding_is_zero(bitmap: np.ndarray, dims: int) -> bool:
    mask = bits.mask64_for_dims(dims, bits.bstride(dims))
    return not np.any(bitmap & ~mask)


def reference_popcount(values: np.ndarray) -> np.ndarray:
    return np.array([int(v).bit_count() for v in values.reshape(-1)], dtype=np.int64).reshape(values.shape)


# ---------------------------------------------------------------- sizes and masks


@pytest.mark.parametrize("dims", DIMS)
def test_sizes_and_mask(dims: int) -> None:
    assert bits.words(dims) == math.ceil(dims / 64)
    assert bits.bstride(dims) == 8 * math.ceil(dims / 64)
    mask = bits.mask64_for_dims(dims, bits.bstride(dims) + 16)
    assert mask.dtype == np.uint64 and mask.shape == (bits.words(dims) + 2,)
    unpacked = np.unpackbits(mask.view(np.uint8), bitorder="little")
    assert unpacked[:dims].all() and not unpacked[dims:].any()


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "64"])
def test_words_rejects_bad_dims(bad: object) -> None:
    with pytest.raises(ValueError, match="dims"):
        bits.words(bad)  # type: ignore[arg-type]


def test_mask_rejects_short_or_unaligned_stride() -> None:
    with pytest.raises(ValueError, match="stride_bytes"):
        bits.mask64_for_dims(65, 8)
    with pytest.raises(ValueError, match="stride_bytes"):
        bits.mask64_for_dims(8, 12)


# ---------------------------------------------------------------- pack / unpack / quantize


@pytest.mark.parametrize("dims", DIMS)
@pytest.mark.parametrize("n", COUNTS)
def test_pack_unpack_round_trip(dims: int, n: int) -> None:
    rng = np.random.default_rng(dims * 31 + n)
    values = random_ternary(rng, n, dims)
    pos, neg = bits.pack_ternary(values)
    assert pos.dtype == np.uint64 and pos.shape == (n, bits.words(dims))
    assert not np.any(pos & neg)
    assert padding_is_zero(pos, dims) and padding_is_zero(neg, dims)
    for row in range(min(n, 3)):
        for d in range(0, dims, max(1, dims // 17)):
            bit = (int(pos[row, d // 64]) >> (d % 64)) & 1
            assert bit == (values[row, d] == 1)
    np.testing.assert_array_equal(bits.unpack_ternary(pos, neg, dims), values)


def test_pack_keeps_batch_axes() -> None:
    values = random_ternary(np.random.default_rng(1), 6, 70).reshape(2, 3, 70)
    pos, neg = bits.pack_ternary(values)
    assert pos.shape == (2, 3, 2)
    np.testing.assert_array_equal(bits.unpack_ternary(pos, neg, 70), values)


def test_pack_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="signed integer"):
        bits.pack_ternary(np.zeros((2, 8), dtype=np.float32))
    with pytest.raises(ValueError, match=r"\{-1, 0, 1\}"):
        bits.pack_ternary(np.full((2, 8), 2, dtype=np.int8))


def test_unpack_rejects_wrong_word_count() -> None:
    pos = np.zeros((3, 2), dtype=np.uint64)
    with pytest.raises(ValueError, match="words"):
        bits.unpack_ternary(pos, pos, 200)
    with pytest.raises(ValueError, match="uint64"):
        bits.unpack_ternary(pos.astype(np.int64), pos, 100)


@pytest.mark.parametrize("dims", DIMS)
def test_quantize_matches_sign_reference(dims: int) -> None:
    rng = np.random.default_rng(dims)
    x = rng.normal(size=(7, dims)).astype(np.float32)
    tau = 0.4
    expected = np.where(x > tau, 1, np.where(x < -tau, -1, 0)).astype(np.int8)
    pos, neg = bits.quantize_ternary(x, tau)
    np.testing.assert_array_equal(bits.unpack_ternary(pos, neg, dims), expected)
    assert padding_is_zero(pos, dims) and padding_is_zero(neg, dims)


def test_quantize_accepts_torch_and_rejects_bad_tau() -> None:
    torch = pytest.importorskip("torch")
    x = torch.tensor([[0.5, -0.5, 0.1, float("nan")]])
    pos, neg = bits.quantize_ternary(x, 0.2)
    np.testing.assert_array_equal(bits.unpack_ternary(pos, neg, 4), [[1, -1, 0, 0]])
    with pytest.raises(ValueError, match="tau"):
        bits.quantize_ternary(np.zeros((1, 4)), -0.1)
    with pytest.raises(ValueError, match="floating-point"):
        bits.quantize_ternary(np.zeros((1, 4), dtype=np.int32), 0.1)


# ---------------------------------------------------------------- popcount


@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (1000,), (3, 5, 157)])
def test_popcount_matches_references(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(shape) * 101 + shape[0])
    x = rng.integers(0, 2**64, size=shape, dtype=np.uint64, endpoint=False)
    if x.size:
        x.reshape(-1)[0] = np.uint64(0xFFFFFFFFFFFFFFFF)
    counts = bits.popcount64(x)
    assert counts.shape == x.shape
    np.testing.assert_array_equal(counts, np.bitwise_count(x))
    np.testing.assert_array_equal(counts.astype(np.int64), reference_popcount(x))


def test_popcount_rejects_other_dtypes() -> None:
    with pytest.raises(ValueError, match="uint64"):
        bits.popcount64(np.zeros(4, dtype=np.int64))


# ---------------------------------------------------------------- scoring


@pytest.mark.parametrize("dims", DIMS)
@pytest.mark.parametrize("n", COUNTS)
def test_score_matches_int8_dot_product(dims: int, n: int) -> None:
    rng = np.random.default_rng(dims * 7 + n)
    docs = random_ternary(rng, n, dims)
    query = random_ternary(rng, 1, dims)[0]
    dp, dn = bits.pack_ternary(docs)
    qp, qn = bits.pack_ternary(query)
    expected = docs.astype(np.int64) @ query.astype(np.int64)
    for scorer in (bits.score64, bits.score64_numpy):
        scores = scorer(dp, dn, qp, qn)
        assert scores.dtype == np.int32 and scores.shape == (n,)
        np.testing.assert_array_equal(scores, expected)


@pytest.mark.parametrize("dims", [1, 65, 10000])
@pytest.mark.parametrize("n", [0, 7, 1000])
def test_score_batch_matches_reference(dims: int, n: int) -> None:
    rng = np.random.default_rng(dims + n)
    docs = random_ternary(rng, n, dims)
    queries = random_ternary(rng, 4, dims)
    dp, dn = bits.pack_ternary(docs)
    qp, qn = bits.pack_ternary(queries)
    scores = bits.score64_batch(dp, dn, qp, qn)
    assert scores.dtype == np.int32 and scores.shape == (4, n)
    np.testing.assert_array_equal(scores, queries.astype(np.int64) @ docs.astype(np.int64).T)


def test_score_of_self_counts_nonzeros_and_sparse_query_attends() -> None:
    values = np.array([[1, -1, 0, 1, 0, -1]], dtype=np.int8)
    pos, neg = bits.pack_ternary(values)
    assert bits.score64(pos, neg, pos[0], neg[0])[0] == 4
    empty = np.zeros_like(pos[0])
    assert bits.score64(pos, neg, empty, empty)[0] == 0


def test_score_rejects_bad_shapes_and_dtypes() -> None:
    dp = np.zeros((3, 2), dtype=np.uint64)
    with pytest.raises(ValueError, match=r"\(words,\)"):
        bits.score64(dp, dp, np.zeros(3, dtype=np.uint64), np.zeros(3, dtype=np.uint64))
    with pytest.raises(ValueError, match="uint64"):
        bits.score64(dp.astype(np.uint32), dp, dp[0], dp[0])
    with pytest.raises(ValueError, match=r"\(n, words\)"):
        bits.score64(dp[0], dp[0], dp[0], dp[0])
    with pytest.raises(ValueError, match="shapes must match"):
        bits.score64(dp, dp[:2], dp[0], dp[0])


# ---------------------------------------------------------------- binding and permutation


@pytest.mark.parametrize("dims", DIMS)
@pytest.mark.parametrize("n", COUNTS)
def test_bind_matches_elementwise_product(dims: int, n: int) -> None:
    rng = np.random.default_rng(dims * 13 + n)
    a = random_ternary(rng, n, dims)
    b = random_ternary(rng, n, dims)
    ap, an = bits.pack_ternary(a)
    bp, bn = bits.pack_ternary(b)
    pos, neg = bits.bind_ternary_bits(ap, an, bp, bn)
    np.testing.assert_array_equal(bits.unpack_ternary(pos, neg, dims), a * b)
    assert padding_is_zero(pos, dims) and padding_is_zero(neg, dims)
    outp, outn, tmp = (np.full_like(ap, 7) for _ in range(3))
    bits.bind_ternary_bits_into(ap, an, bp, bn, outp, outn, tmp)
    np.testing.assert_array_equal(outp, pos)
    np.testing.assert_array_equal(outn, neg)


def test_bind_into_rejects_aliasing_and_shape_mismatch() -> None:
    a = np.ones((2, 3), dtype=np.uint64)
    out = np.empty_like(a)
    with pytest.raises(ValueError, match="overlap"):
        bits.bind_ternary_bits_into(a, a.copy(), a.copy(), a.copy(), a, out, None)
    with pytest.raises(ValueError, match="shapes must match"):
        bits.bind_ternary_bits_into(a, a, a, a, out[:1], out.copy(), None)


@pytest.mark.parametrize("dims", DIMS)
@pytest.mark.parametrize("n", [0, 1, 7])
def test_permute_matches_roll(dims: int, n: int) -> None:
    rng = np.random.default_rng(dims * 3 + n)
    values = random_ternary(rng, n, dims)
    pos, neg = bits.pack_ternary(values)
    for shift in sorted({0, 1, 5, 63, 64, 65, dims - 1, dims, dims + 3, -1, -70, 3 * dims + 2}):
        rp, rn = bits.permute_bits(pos, neg, dims, shift)
        np.testing.assert_array_equal(bits.unpack_ternary(rp, rn, dims), np.roll(values, shift, axis=-1))
        assert padding_is_zero(rp, dims) and padding_is_zero(rn, dims)


def test_permute_composes_and_inverts() -> None:
    dims = 10000
    values = random_ternary(np.random.default_rng(5), 2, dims)
    pos, neg = bits.pack_ternary(values)
    once = bits.permute_bits(*bits.permute_bits(pos, neg, dims, 123), dims, 4000)
    np.testing.assert_array_equal(once[0], bits.permute_bits(pos, neg, dims, 4123)[0])
    back = bits.permute_bits(*bits.permute_bits(pos, neg, dims, 777), dims, -777)
    np.testing.assert_array_equal(back[0], pos)
    np.testing.assert_array_equal(back[1], neg)


# ---------------------------------------------------------------- adaptive threshold


def reference_threshold(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    median = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2
    lower = ordered[: (n + 1) // 2]
    m = len(lower)
    if m < 2:
        return median
    # Half the mean absolute difference over all pairs equals the second L-moment.
    gini = sum(abs(x - y) for x in lower for y in lower) / (m * (m - 1))
    return median + gini / 2 * math.log(n)


@pytest.mark.parametrize("n", [3, 4, 7, 100, 501])
def test_adaptive_threshold_matches_pairwise_definition(n: int) -> None:
    values = np.random.default_rng(n).normal(size=n) * 10
    assert bits.adaptive_threshold(values) == pytest.approx(reference_threshold(values.tolist()), rel=1e-9)


def test_adaptive_threshold_degenerate_sizes_and_inputs() -> None:
    assert bits.adaptive_threshold(np.array([])) == float("-inf")
    assert bits.adaptive_threshold(np.array([3.0])) == 3.0
    assert bits.adaptive_threshold(np.array([1, 5], dtype=np.int32)) == 3.0
    assert bits.adaptive_threshold(np.full(50, 7.0)) == 7.0
    with pytest.raises(ValueError, match="NaN"):
        bits.adaptive_threshold(np.array([1.0, float("nan")]))
    torch = pytest.importorskip("torch")
    values = np.random.default_rng(0).normal(size=64)
    assert bits.adaptive_threshold(torch.tensor(values)) == pytest.approx(bits.adaptive_threshold(values))


def test_adaptive_threshold_is_tighter_for_tight_clusters() -> None:
    rng = np.random.default_rng(3)
    tight = 100 + rng.normal(size=500)
    spread = 100 + 20 * rng.normal(size=500)
    assert bits.adaptive_threshold(tight) < bits.adaptive_threshold(spread)


# ---------------------------------------------------------------- context compression


def test_compress_context_drops_words_above_median_frequency() -> None:
    text = "The cat and the dog and THE bird.\nThe end"
    assert bits.compress_context(text) == "cat dog bird. end"


def test_compress_context_keeps_equal_frequency_text_and_punctuation() -> None:
    assert bits.compress_context("alpha  beta\ngamma -- delta") == "alpha beta gamma -- delta"
    assert bits.compress_context("") == ""
    with pytest.raises(ValueError, match="str"):
        bits.compress_context(b"bytes")  # type: ignore[arg-type]
