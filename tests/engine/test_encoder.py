"""HDCEncoder against a slow, obviously-correct NumPy reference, on small seeded vocabularies."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine import kernels
from engine.bits import permute_bits, quantize_ternary, unpack_ternary
from engine.encoder import HDCEncoder, compute_idf, flatten
from engine.ngram import ngram_agreement
from engine.vocab import (
    FIXED_POINT_ONE,
    FORMAT_VERSION,
    VocabIndex,
    VocabIndexError,
    capacity,
    isotropy_correction,
    project_rows,
    project_rows_exact,
    project_rows_fixed,
    projection_matrix,
)
from engine.vocab_writer import write_vocab_index

EMB_DIM = 48
TOTAL_VOCAB = 400
SPECIALS = (0, 1, 2)


def make_encoder(
    tmp_path,
    *,
    dims=200,
    ngram=3,
    seed=7,
    idf=None,
    name="vocab.idx",
    format_version=FORMAT_VERSION,
    drop_components=0,
    row_definition=FORMAT_VERSION,
) -> HDCEncoder:
    rng = np.random.default_rng(1234)
    embeddings = rng.standard_normal((TOTAL_VOCAB, EMB_DIM)).astype(np.float32)
    token_ids = np.arange(len(SPECIALS), TOTAL_VOCAB - 50, dtype=np.int64)  # ids >= 350: out of vocabulary
    if idf is None:
        idf = compute_idf(rng.integers(1, 100, token_ids.size), 100)
    vocab = write_vocab_index(tmp_path / name, token_ids=token_ids, idf=idf, embeddings=embeddings,
                              dims=dims, ngram=ngram, seed=seed, format_version=format_version,
                              drop_components=drop_components, row_definition=row_definition)
    return HDCEncoder(vocab)


def random_docs(seed: int, lengths) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    # Small alphabet so n-grams repeat inside and across documents.
    return [[int(t) for t in rng.integers(0, 40, n)] for n in lengths]


def reference_agreement(encoder: HDCEncoder, tokens: list[int], signs: np.ndarray) -> np.ndarray:
    """The module docstring's definition, one dense int8 vector at a time."""
    vocab = encoder.vocab
    index = {int(t): i for i, t in enumerate(vocab.token_ids)}
    local = [index[t] for t in tokens if t in index]
    bitmaps = vocab.tables()[1]
    base = unpack_ternary(bitmaps[0, :, 0], bitmaps[0, :, 1], encoder.dims).astype(np.int64)
    windows = []
    for i in range(len(local) - encoder.ngram + 1):
        bound = np.ones(encoder.dims, dtype=np.int64)
        for j in range(encoder.ngram):
            bound *= np.roll(base[local[i + j]], j)
        windows.append((-int(np.count_nonzero(bound)), i, bound))
    windows.sort(key=lambda w: (w[0], w[1]))
    votes = np.zeros(encoder.dims, dtype=np.float64)
    mass = np.zeros(encoder.dims, dtype=np.float64)
    for negative_count, _, bound in windows[: encoder.m_cap]:
        if -negative_count < encoder.c_min:
            break
        votes += bound / math.sqrt(-negative_count)
        mass += np.abs(bound) / math.sqrt(-negative_count)
    net = np.divide(votes, mass, out=np.zeros_like(votes), where=mass > 0) * signs
    return np.maximum(net, 0.0)


def reference_unigram(encoder: HDCEncoder, tokens: list[int]) -> np.ndarray:
    vocab = encoder.vocab
    index = {int(t): i for i, t in enumerate(vocab.token_ids)}
    total = np.zeros(encoder.dims, dtype=np.float64)
    unigram = vocab.tables()[0]
    for t in tokens:
        if t in index:
            row = index[t]
            total += float(np.float16(vocab.idf[row])) * unigram[row].astype(np.float64)
    norm = np.linalg.norm(total)
    return total / norm * math.sqrt(encoder.dims / encoder.emb_dim) if norm > 0 else total


def test_same_seed_same_index_and_vectors_other_seed_differs(tmp_path):
    first = make_encoder(tmp_path, name="a.idx")
    second = make_encoder(tmp_path, name="b.idx")
    other = make_encoder(tmp_path, seed=8, name="c.idx")
    assert (tmp_path / "a.idx").read_bytes() == (tmp_path / "b.idx").read_bytes()
    docs = random_docs(0, [30, 7, 100])
    for got, expected in zip(first.encode(docs), second.encode(docs), strict=True):
        np.testing.assert_array_equal(got, expected)
    assert not np.array_equal(first.encode(docs)[0], other.encode(docs)[0])


def test_tau_density_and_capacity_are_as_documented(tmp_path):
    encoder = make_encoder(tmp_path, dims=2048, ngram=4)
    header = encoder.vocab.header
    assert encoder.tau == pytest.approx(EMB_DIM ** -0.5)
    # Unit rows through unit columns: projected values ~ N(0, 1/emb_dim), so P(|z| > tau) ~ 0.317.
    values = np.asarray(encoder.vocab.tables()[0], dtype=np.float32)
    assert values.std() == pytest.approx(EMB_DIM ** -0.5, rel=0.03)
    assert header["density"] == pytest.approx(0.3173, abs=0.01)
    p = header["density"] ** 4
    assert header["ngram_density"] == pytest.approx(p)
    assert encoder.m_cap == math.ceil(math.log(0.5) / math.log(1 - p))
    assert 1 - (1 - p) ** encoder.m_cap >= 0.5 > 1 - (1 - p) ** (encoder.m_cap - 1)
    assert encoder.c_min == max(1, round(p * 2048))
    assert capacity(0.0) == 0 and capacity(1.0) == 1


@pytest.mark.parametrize("dims", [64, 200, 256])
def test_position_bitmaps_are_rotations_of_the_quantised_vocabulary(tmp_path, dims):
    encoder = make_encoder(tmp_path, dims=dims, ngram=4)
    bitmaps = encoder.vocab.tables()[1]
    for j in range(1, 4):
        pos, neg = permute_bits(bitmaps[0, :, 0], bitmaps[0, :, 1], dims, j)
        np.testing.assert_array_equal(bitmaps[j, :, 0], pos)
        np.testing.assert_array_equal(bitmaps[j, :, 1], neg)
    dense = unpack_ternary(bitmaps[0, :, 0], bitmaps[0, :, 1], dims)
    values = np.asarray(encoder.vocab.tables()[0], dtype=np.float32)
    clear = np.abs(np.abs(values) - encoder.tau) > 1e-2  # float16 rounding can move values at tau
    np.testing.assert_array_equal(dense[clear], (np.sign(values) * (np.abs(values) > encoder.tau))[clear])


@pytest.mark.parametrize("ngram", [1, 3, 5])
@pytest.mark.parametrize("dims", [64, 200])
def test_ngram_kernel_matches_reference(tmp_path, ngram, dims):
    encoder = make_encoder(tmp_path, dims=dims, ngram=ngram)
    lengths = [0, 1, ngram - 1, ngram, 17, 120, 400]
    docs = random_docs(ngram * 100 + dims, lengths)
    docs[3] = [0, 1, *docs[3], 399]  # specials and an out-of-vocabulary id are skipped
    flat, offsets = flatten(docs)
    local, local_offsets = encoder.local_ids(flat, offsets)
    signs = np.random.default_rng(5).choice(np.array([-1, 0, 1], dtype=np.int8), size=(len(docs), dims))
    agree = np.zeros((len(docs), dims), dtype=np.float32)
    ngram_agreement(
        local, local_offsets, encoder.vocab.tables()[1], signs, ngram, encoder.m_cap, encoder.c_min, agree
    )
    for doc, tokens in enumerate(docs):
        np.testing.assert_allclose(agree[doc], reference_agreement(encoder, tokens, signs[doc]), atol=1e-6)
    assert agree[6].max() > 0  # the long document does boost something


def test_full_pipeline_matches_reference(tmp_path):
    encoder = make_encoder(tmp_path, dims=200, ngram=3)
    docs = random_docs(11, [5, 60, 250])
    unigram = encoder.project_flat(*flatten(docs))
    pos, neg = encoder.encode(docs)
    for doc, tokens in enumerate(docs):
        np.testing.assert_allclose(unigram[doc], reference_unigram(encoder, tokens), rtol=2e-3, atol=2e-3)
        boosted = unigram[doc] * (1 + reference_agreement(encoder, tokens, np.sign(unigram[doc])))
        expected = quantize_ternary(boosted[None, :].astype(np.float32), encoder.tau)
        np.testing.assert_array_equal(pos[doc], expected[0][0])
        np.testing.assert_array_equal(neg[doc], expected[1][0])
    norms = np.linalg.norm(unigram, axis=1)
    np.testing.assert_allclose(norms, math.sqrt(200 / EMB_DIM), rtol=1e-5)


def test_batch_and_single_encodings_are_identical(tmp_path):
    encoder = make_encoder(tmp_path, dims=256, ngram=5)
    docs = random_docs(3, [300, 0, 4, 5, 77, 1])
    pos, neg = encoder.encode(docs)
    for doc, tokens in enumerate(docs):
        single_pos, single_neg = encoder.encode([tokens])
        np.testing.assert_array_equal(single_pos[0], pos[doc])
        np.testing.assert_array_equal(single_neg[0], neg[doc])


@pytest.mark.parametrize("docs", [[[]], [[0, 1, 2]], [[0, 2], [], [360, 399]]])
def test_empty_special_only_and_unknown_tokens_give_zero_vectors(tmp_path, docs):
    encoder = make_encoder(tmp_path)
    pos, neg = encoder.encode(docs)
    assert pos.shape == neg.shape == (len(docs), encoder.words)
    assert not pos.any() and not neg.any()
    assert encoder.content_count([0, 1, 2, 5, 399]) == 1


def test_ngram_channel_cannot_overwhelm_the_unigram(tmp_path):
    # Tokens 3..12 occur in every document (idf ~ 0); token 20 is rare. A document that repeats
    # one common trigram has full n-gram agreement on the trigram's dims, yet its vector must
    # follow the rare token's unigram: nothing below tau/2 in the unigram may become nonzero.
    n_vocab = TOTAL_VOCAB - 50 - len(SPECIALS)
    df = np.full(n_vocab, 5)
    df[:10] = 1000
    encoder = make_encoder(tmp_path, dims=512, ngram=3, idf=compute_idf(df, 1000))
    doc = [3, 4, 5] * 60 + [20]
    unigram, agree = encoder.encode_values_flat(*flatten([doc]))
    assert agree.max() == pytest.approx(1.0)
    dense = unpack_ternary(*encoder.encode([doc]), encoder.dims)[0]
    suppressed = np.abs(unigram[0]) <= encoder.tau / 2
    assert suppressed.sum() > 100
    assert not dense[suppressed].any()
    nonzero = dense != 0
    np.testing.assert_array_equal(dense[nonzero], np.sign(unigram[0][nonzero]))
    # And the channel does act: some dims below tau in the unigram alone are boosted over it.
    assert np.any(nonzero & (np.abs(unigram[0]) <= encoder.tau))


def test_idf_suppresses_ubiquitous_tokens():
    idf = compute_idf(np.array([1, 10, 500, 1000]), 1000)
    assert np.all(np.diff(idf) < 0)
    assert idf[-1] < 1e-3
    with pytest.raises(ValueError, match="document frequencies"):
        compute_idf(np.array([1001]), 1000)


def test_bad_input_raises_clear_errors(tmp_path):
    encoder = make_encoder(tmp_path)
    with pytest.raises(ValueError, match="offsets"):
        encoder.encode_flat(np.array([5, 6]), np.array([0, 3]))
    garbage = tmp_path / "garbage.idx"
    garbage.write_bytes(b"not an index at all")
    with pytest.raises(VocabIndexError, match="garbage.idx"):
        VocabIndex.open(garbage)
    with pytest.raises(ValueError, match="sorted"):
        write_vocab_index(tmp_path / "x.idx", token_ids=np.array([5, 3]), idf=np.ones(2),
                          embeddings=np.zeros((10, 4), np.float32), dims=64, ngram=2, seed=0)


def test_isotropy_correction_removes_the_shared_direction(tmp_path) -> None:
    rng = np.random.default_rng(99)
    shared = rng.standard_normal(EMB_DIM).astype(np.float32) * 3
    spread = rng.standard_normal((8, EMB_DIM)).astype(np.float32) * 1.5  # a few dominant directions
    embeddings = (rng.standard_normal((TOTAL_VOCAB, EMB_DIM)) + shared
                  + rng.standard_normal((TOTAL_VOCAB, 8)) @ spread).astype(np.float32)
    token_ids = np.arange(len(SPECIALS), TOTAL_VOCAB, dtype=np.int64)
    idf = np.ones(token_ids.size, dtype=np.float32)

    def mean_cosine(drop: int, name: str) -> float:
        vocab = write_vocab_index(tmp_path / name, token_ids=token_ids, idf=idf, embeddings=embeddings,
                                  dims=512, ngram=2, seed=3, drop_components=drop)
        assert vocab.header["drop_components"] == drop
        unit = np.asarray(vocab.tables()[0], dtype=np.float64)
        unit /= np.linalg.norm(unit, axis=1, keepdims=True)
        cosines = unit @ unit.T
        return float((cosines.sum() - len(unit)) / (len(unit) ** 2 - len(unit)))

    plain, corrected = mean_cosine(0, "plain.idx"), mean_cosine(8, "corrected.idx")
    assert plain > 0.25  # the shared vector is in every token (Gemma 3: 0.21)
    assert abs(corrected) < 0.02
    mean, directions = isotropy_correction(token_ids, embeddings, 8)
    assert directions.shape == (8, EMB_DIM)
    np.testing.assert_allclose(directions @ directions.T, np.eye(8), atol=1e-5)
    unit = embeddings[token_ids] / np.linalg.norm(embeddings[token_ids], axis=1, keepdims=True)
    np.testing.assert_allclose(mean, unit.mean(axis=0), atol=1e-5)
    # Deterministic: the same corpus vocabulary gives the same file contents.
    again = write_vocab_index(tmp_path / "again.idx", token_ids=token_ids, idf=idf, embeddings=embeddings,
                              dims=512, ngram=2, seed=3, drop_components=8)
    np.testing.assert_array_equal(again.tables()[0], VocabIndex.open(tmp_path / "corrected.idx").tables()[0])


@pytest.mark.parametrize("version", [2, 3, 4])
@pytest.mark.parametrize(("dims", "ngram", "drop"), [(64, 1, 0), (200, 3, 4), (1000, 5, 8)])
def test_derived_rows_encode_exactly_like_stored_tables(tmp_path, dims, ngram, drop, version):
    # Formats 2, 3 and 4 derive what format 1 stores (with the same row definition): the same documents
    # must give the same bitmaps, whether the rows come from the stored tables, from a batch's
    # derived rows, or one by one.
    stored = make_encoder(
        tmp_path,
        dims=dims,
        ngram=ngram,
        drop_components=drop,
        name="v1.idx",
        format_version=1,
        row_definition=version,
    )
    derived = make_encoder(tmp_path, dims=dims, ngram=ngram, drop_components=drop, name="v2.idx",
                           format_version=version)
    assert stored.vocab.unigram is not None and derived.vocab.unigram is None
    assert stored.vocab.format_version == 1 and derived.vocab.format_version == version
    assert (stored.m_cap, stored.c_min) == (derived.m_cap, derived.c_min)
    docs = random_docs(dims + ngram, [0, 1, 5, 17, 60, 300])
    expected = stored.encode(docs)
    np.testing.assert_array_equal(derived.encode(docs)[0], expected[0])
    np.testing.assert_array_equal(derived.encode(docs)[1], expected[1])  # now from the row cache
    for doc, tokens in enumerate(docs):
        pos, neg = make_encoder(
            tmp_path,
            dims=dims,
            ngram=ngram,
            drop_components=drop,
            name=f"fresh{doc}.idx",
            format_version=version,
        ).encode([tokens])
        np.testing.assert_array_equal(pos[0], expected[0][doc])
        np.testing.assert_array_equal(neg[0], expected[1][doc])
    for got, want in zip(derived.vocab.tables(), stored.vocab.tables(), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("version", [2, 3, 4])
def test_derived_rows_do_not_depend_on_the_batch(tmp_path, version):
    # The query side projects a few rows at a time, the build thousands: the values must agree.
    encoder = make_encoder(tmp_path, dims=4096, ngram=2, drop_components=4, format_version=version)
    vocab = encoder.vocab
    everything = vocab.project(np.arange(vocab.size))
    for size in (1, 2, 7, 64):
        for start in range(0, 140, size):
            rows = np.arange(start, min(start + size, vocab.size))
            np.testing.assert_array_equal(vocab.project(rows), everything[rows])


def test_fixed_point_projection_is_exact_integer_arithmetic(tmp_path):
    # Format 3's values: integer rows times the int8 projection, summed exactly, scaled once.
    vocab = make_encoder(tmp_path, dims=1000, ngram=2, drop_components=4, format_version=3).vocab
    embeddings = np.random.default_rng(1234).standard_normal((TOTAL_VOCAB, EMB_DIM)).astype(np.float32)
    rows = embeddings[vocab.token_ids[:50]]
    x = np.empty(rows.shape, dtype=np.int32)
    kernels.fixed_point_rows(rows, vocab.mean, vocab.directions, float(FIXED_POINT_ONE), x)
    unit = rows / np.linalg.norm(rows.astype(np.float64), axis=1, keepdims=True) - vocab.mean
    unit -= (unit @ vocab.directions.T.astype(np.float64)) @ vocab.directions.astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    assert np.abs(x - unit * FIXED_POINT_ONE).max() <= 0.5 + 1e-3  # the corrected unit rows, rounded
    exact = x.astype(np.int64) @ np.asarray(vocab.projection).astype(np.int64)  # integer sums, no rounding
    want = (exact.astype(np.float64) * vocab.column_scale).astype(np.float32)
    got = project_rows_fixed(rows, mean=vocab.mean, directions=vocab.directions, projection=vocab.projection,
                             column_scale=vocab.column_scale)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(vocab.projection) * vocab.column_scale, axis=0),
                               1.0 / FIXED_POINT_ONE, rtol=1e-12)  # unit columns once x's scale is undone


def test_exact_float_projection_is_format_2s_values_in_one_fixed_order(tmp_path):
    # Format 4's values: the corrected unit rows times the float32 Gaussian, each product and sum a
    # float64 operation in ascending order, rounded once to float32. A plain NumPy loop in that order
    # gives the same bits; format 2's BLAS product of the same matrix agrees to a float32 step.
    vocab = make_encoder(tmp_path, dims=1000, ngram=2, drop_components=4, format_version=4).vocab
    assert vocab.projection.dtype == np.float32 and vocab.column_scale is None
    np.testing.assert_array_equal(vocab.projection, projection_matrix(EMB_DIM, 1000, 7))
    embeddings = np.random.default_rng(1234).standard_normal((TOTAL_VOCAB, EMB_DIM)).astype(np.float32)
    rows = embeddings[vocab.token_ids[:50]]
    unit = np.empty(rows.shape, dtype=np.float64)
    kernels.corrected_unit_rows(rows, vocab.mean, vocab.directions, unit)
    reference = rows / np.linalg.norm(rows.astype(np.float64), axis=1, keepdims=True) - vocab.mean
    reference -= (reference @ vocab.directions.T.astype(np.float64)) @ vocab.directions.astype(np.float64)
    reference /= np.linalg.norm(reference, axis=1, keepdims=True)
    np.testing.assert_allclose(unit, reference, rtol=0, atol=1e-13)
    projection = np.asarray(vocab.projection).astype(np.float64)
    total = np.zeros((rows.shape[0], 1000))
    for i in range(EMB_DIM):
        total = total + unit[:, i:i + 1] * projection[i]
    got = project_rows_exact(rows, mean=vocab.mean, directions=vocab.directions, projection=vocab.projection)
    np.testing.assert_array_equal(got, total.astype(np.float32))
    blas = project_rows(rows, mean=vocab.mean, directions=vocab.directions, dims=1000, seed=7)
    assert np.abs(got.view(np.int32) - blas.view(np.int32)).max() <= 1


@pytest.mark.parametrize("version", [2, 3, 4])
def test_derived_formats_are_small_and_row_cache_is_bounded(tmp_path, monkeypatch, version):
    from engine import vocab as vocab_module

    make_encoder(tmp_path, dims=4096, ngram=5, name="v1.idx", format_version=1)
    monkeypatch.setattr(vocab_module, "CACHED_ROWS", 8)  # the row cache is sized when the index opens
    derived = make_encoder(tmp_path, dims=4096, ngram=5, name="v2.idx", format_version=version)
    v1_bytes, v2_bytes = (tmp_path / "v1.idx").stat().st_size, (tmp_path / "v2.idx").stat().st_size
    # Format 1: v * (2 * dims + ngram * 2 * dims / 8) bytes; format 2: v * emb_dim * 4 bytes (F32 rows
    # here); format 3 adds the int8 projection (emb_dim * dims bytes) and its float64 column scales,
    # format 4 the float32 projection.
    projection_bytes = {2: 0, 3: EMB_DIM * 4096 + 8 * 4096, 4: EMB_DIM * 4096 * 4}[version]
    assert v1_bytes > 20 * (v2_bytes - projection_bytes)
    derived.encode(random_docs(3, [50, 50]))
    assert len(derived.vocab._cache) == 8


def test_stored_rows_must_match_the_embeddings(tmp_path):
    embeddings = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    wrong = ("F32", np.zeros((3, 16), np.uint8))
    with pytest.raises(ValueError, match="dequantise"):
        write_vocab_index(
            tmp_path / "x.idx",
            token_ids=np.array([1, 2, 3]),
            idf=np.ones(3),
            embeddings=embeddings,
            dims=64,
            ngram=2,
            seed=0,
            stored_rows=wrong,
        )
