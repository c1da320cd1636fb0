"""TokenVectorEncoder: determinism, shapes, summary row, dedupe, weighting, payload cap, bad input.

Most tests use a seeded random embedding table (the encoder is a pure function of it); one runs
on the real Gemma 3 270M table.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine.multivector import MAX_PAYLOAD_BYTES
from engine.multivector.late_interaction import maxsim_many
from engine.multivector.records import build_record
from engine.multivector.token_vectors import EmptySequenceError, TokenVectorEncoder, idf_table

VOCAB, EMB_DIM = 500, 48
SPECIAL = (0, 1, 2)


def table(seed: int = 0, vocab: int = VOCAB, emb_dim: int = EMB_DIM) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((vocab, emb_dim)).astype(np.float32)


def idf(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.1, 8.0, VOCAB).astype(np.float32)


def encoder(**options) -> TokenVectorEncoder:
    options = {"dim": 64, "idf": idf(), "special_ids": SPECIAL, **options}
    return TokenVectorEncoder(table(), **options)


@pytest.mark.parametrize("dim", [16, 64, 768])
@pytest.mark.parametrize("weighting", ["none", "idf", "sqrt_idf"])
def test_shapes_row_norms_and_summary(dim, weighting):
    enc = encoder(dim=dim, weighting=weighting)
    tokens = [10, 11, 12, 13, 14]
    rows = enc.encode(tokens)
    assert rows.shape == (6, dim) and rows.dtype == np.float32
    weights = {"none": np.ones(5), "idf": idf()[tokens], "sqrt_idf": np.sqrt(idf()[tokens])}[weighting]
    np.testing.assert_allclose(np.linalg.norm(rows[1:], axis=1), weights, rtol=1e-5)
    summary = rows[1:].sum(axis=0)
    np.testing.assert_allclose(rows[0], summary / np.linalg.norm(summary), rtol=1e-5, atol=1e-6)
    assert np.linalg.norm(rows[0]) == pytest.approx(1.0, abs=1e-5)


def test_same_seed_same_vectors_other_seed_other_vectors():
    first, again = encoder().encode([5, 9, 40]), encoder().encode([5, 9, 40])
    np.testing.assert_array_equal(first, again)
    other = encoder(seed=7).encode([5, 9, 40])
    assert not np.allclose(first, other)
    # A token's vector does not depend on its neighbours.
    np.testing.assert_array_equal(encoder().encode([9, 40])[1:], first[2:])


def test_projection_preserves_angles_roughly():
    emb = table()
    enc = TokenVectorEncoder(emb, dim=768)
    unit = emb[:40] / np.linalg.norm(emb[:40], axis=1, keepdims=True)
    rows = enc.token_rows(np.arange(40))
    np.testing.assert_allclose(rows @ rows.T, unit @ unit.T, atol=0.2)


def test_repeated_ids_keep_one_row_in_first_occurrence_order_and_maxsim_is_unchanged():
    enc = encoder()
    repeated = [30, 31, 30, 32, 31, 30]
    rows = enc.encode(repeated)
    np.testing.assert_array_equal(rows, enc.encode([30, 31, 32]))
    np.testing.assert_array_equal(enc.content_ids(repeated), [30, 31, 32])
    materialised = np.vstack([rows[0], enc.token_rows(repeated)])  # one row per occurrence
    query = enc.encode([31, 77, 5])
    np.testing.assert_allclose(maxsim_many(query, [rows]), maxsim_many(query, [materialised]), rtol=1e-6)


def test_special_tokens_are_dropped():
    enc = encoder()
    np.testing.assert_array_equal(enc.encode([0, 20, 1, 21, 2]), enc.encode([20, 21]))
    with pytest.raises(EmptySequenceError, match="no content tokens"):
        enc.encode([0, 1, 2, 2])


@pytest.mark.parametrize("tokens", [[], np.zeros(0, dtype=np.int64)])
def test_empty_input_is_a_clear_error(tokens):
    with pytest.raises(EmptySequenceError, match="no content tokens among 0 token ids"):
        encoder().encode(tokens)


@pytest.mark.parametrize("tokens, message", [
    ([5, VOCAB], "outside the embedding table"),
    ([-1], "outside the embedding table"),
    ([[1, 2]], "1-D sequence of ints"),
    ([1.5, 2.0], "1-D sequence of ints"),
])
def test_bad_token_ids_are_refused(tokens, message):
    with pytest.raises(ValueError, match=message):
        encoder().encode(tokens)


def test_sqrt_idf_exact_match_scores_the_token_idf():
    enc = encoder(weighting="sqrt_idf")
    document = enc.encode([50, 60, 70])
    for token in (50, 60, 70):
        single = enc.token_rows([token])
        assert float(maxsim_many(single, [document[1:]])[0]) == pytest.approx(float(idf()[token]), rel=1e-5)


def test_min_idf_drops_frequent_tokens():
    weights = idf()
    frequent, rare = int(np.argmin(weights[3:])) + 3, int(np.argmax(weights))
    enc = encoder(min_idf=float(weights[frequent]) + 1e-3)
    np.testing.assert_array_equal(enc.content_ids([frequent, rare]), [rare])
    with pytest.raises(EmptySequenceError):
        enc.encode([frequent])


def test_row_cap_keeps_the_highest_weighted_tokens_in_order():
    weights = idf()
    enc = encoder(max_rows=5)
    tokens = list(range(10, 60))
    kept = enc.content_ids(tokens)
    expected = np.sort(np.array(tokens)[np.argsort(-weights[tokens], kind="stable")[:4]])
    np.testing.assert_array_equal(kept, expected)
    assert enc.encode(tokens).shape == (5, 64)


@pytest.mark.parametrize("storage_version", ["1.0", "1.1"])
def test_a_full_sequence_fits_the_store_payload(storage_version):
    enc = TokenVectorEncoder(table(vocab=2000), dim=768, max_rows=506)
    rows = enc.encode(np.arange(2000))
    assert rows.shape == (506, 768)
    _, _, metadata = build_record("text", "doc", 0, rows, {"filename": "f", "source_path": "", "text": "t"},
                                  dim=768, storage_version=storage_version)
    assert len(metadata["full_embeddings"]) <= MAX_PAYLOAD_BYTES


def test_a_cap_that_could_exceed_the_payload_limit_is_refused():
    with pytest.raises(ValueError, match="payload limit; at most 506"):
        TokenVectorEncoder(table(), dim=768, max_rows=507)


@pytest.mark.parametrize("options, message", [
    ({"dim": 0}, "dim must be"),
    ({"weighting": "bm25"}, "weighting must be one of"),
    ({"max_rows": 1}, "max_rows must be"),
    ({"idf": np.ones(3)}, "idf must be"),
    ({"idf": np.full(VOCAB, np.nan)}, "idf must be"),
])
def test_bad_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        TokenVectorEncoder(table(), **options)


def test_idf_table_fills_unseen_tokens_with_the_highest_idf():
    full = idf_table(10, np.array([2, 5]), np.array([0.5, 1.5]), n_documents=4)
    assert full[2] == pytest.approx(0.5) and full[5] == pytest.approx(1.5)
    assert full[0] == pytest.approx(np.log1p(4.5 / 0.5)) and full[0] > full[5]
    with pytest.raises(ValueError, match="token ids must lie"):
        idf_table(10, np.array([10]), np.array([1.0]), n_documents=4)
    with pytest.raises(ValueError, match="matching 1-D"):
        idf_table(10, np.array([1, 2]), np.array([1.0]), n_documents=4)


def test_real_gemma_table_identical_words_match_and_others_do_not(gemma_gguf):
    from pathlib import Path

    from engine import gguf
    from engine.spm import GGUFTokenizer

    tokenizer = GGUFTokenizer.from_gguf(gemma_gguf)
    embeddings = gguf.load_token_embeddings(gemma_gguf, Path(gemma_gguf).parent.parent / "embeddings")
    enc = TokenVectorEncoder(embeddings, special_ids=tokenizer.special_ids)
    document = enc.encode(tokenizer.tokenize("Mitochondria produce most of the cell's ATP."))
    assert document.shape[1] == 768 and np.isfinite(document).all()
    near = maxsim_many(enc.encode(tokenizer.tokenize("cell ATP")), [document])[0]
    far = maxsim_many(enc.encode(tokenizer.tokenize("tulips windmills")), [document])[0]
    assert near > far
    q = enc.encode(tokenizer.tokenize("Mitochondria"))
    assert float(np.max(q[1:] @ document[1:].T)) == pytest.approx(1.0, abs=1e-5)


def test_isotropy_correction_removes_the_shared_direction():
    shared = np.random.default_rng(5).standard_normal(EMB_DIM).astype(np.float32) * 3
    emb = table() + shared  # every token leans the same way
    mean = (emb / np.linalg.norm(emb, axis=1, keepdims=True)).mean(axis=0)
    plain = TokenVectorEncoder(emb, dim=256).token_rows(np.arange(100))
    corrected = TokenVectorEncoder(emb, dim=256, isotropy=(mean, np.zeros((0, EMB_DIM)))).token_rows(
        np.arange(100)
    )
    off_diagonal = ~np.eye(100, dtype=bool)
    assert (plain @ plain.T)[off_diagonal].mean() > 0.5
    assert abs((corrected @ corrected.T)[off_diagonal].mean()) < 0.05
    np.testing.assert_allclose(np.linalg.norm(corrected, axis=1), 1.0, rtol=1e-5)
    with pytest.raises(ValueError, match="isotropy must be"):
        TokenVectorEncoder(emb, isotropy=(mean[:-1], np.zeros((0, EMB_DIM))))
