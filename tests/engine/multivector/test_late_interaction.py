"""Vectorised MaxSim against the slow per-vector reference."""

from __future__ import annotations

import numpy as np
import pytest

from engine.multivector import maxsim_many, maxsim_scores
from engine.multivector.late_interaction import concatenate_sequences
from tests.engine.multivector.data import maxsim_reference


@pytest.mark.parametrize(
    ("query_rows", "lengths", "dim"),
    [
        (1, [1], 4),
        (3, [1, 1, 1], 8),
        (32, [100] * 5, 64),
        (5, [1, 7, 300, 2], 16),
        (16, list(range(1, 41)), 32),
    ],
)
def test_maxsim_matches_reference(query_rows, lengths, dim):
    rng = np.random.default_rng(len(lengths) * dim)
    query = rng.standard_normal((query_rows, dim)).astype(np.float32)
    documents = [rng.standard_normal((length, dim)).astype(np.float32) for length in lengths]
    scores = maxsim_many(query, documents)
    assert scores.shape == (len(lengths),) and scores.dtype == np.float32
    expected = [maxsim_reference(query, document) for document in documents]
    np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-3)


def test_maxsim_of_a_document_containing_the_query_is_its_self_similarity():
    rng = np.random.default_rng(7)
    query = rng.standard_normal((6, 32)).astype(np.float32)
    query /= np.linalg.norm(query, axis=1, keepdims=True)
    holder = np.concatenate([rng.standard_normal((20, 32)).astype(np.float32) * 0.01, query])
    scores = maxsim_many(query, [holder, rng.standard_normal((26, 32)).astype(np.float32) * 0.01])
    assert scores[0] == pytest.approx(6.0, rel=1e-5)
    assert scores[1] < 1.0


def test_concatenate_offsets_and_empty_inputs():
    concatenated, offsets = concatenate_sequences([np.ones((2, 3)), np.zeros((4, 3))])
    assert concatenated.shape == (6, 3) and concatenated.dtype == np.float32
    assert offsets.tolist() == [0, 2, 6]
    assert maxsim_many(np.ones((1, 3)), []).shape == (0,)
    with pytest.raises(ValueError, match="empty sequence"):
        concatenate_sequences([np.ones((2, 3)), np.zeros((0, 3))])


def test_maxsim_rejects_inconsistent_inputs():
    with pytest.raises(ValueError, match="offsets"):
        maxsim_scores(np.ones((1, 3)), np.ones((4, 3)), np.array([0, 5]))
    with pytest.raises(ValueError, match="shape"):
        maxsim_scores(np.ones((1, 3)), np.ones((4, 2)), np.array([0, 4]))
    with pytest.raises(ValueError, match="query"):
        maxsim_scores(np.ones(3), np.ones((4, 3)), np.array([0, 4]))
