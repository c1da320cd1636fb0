"""bench/anchor_rankers.py's compressed encoder columns (the real all-MiniLM-L6-v2, its vectors reduced
to sign bits or int8) and bench/soak.py's turns-per-conversation range."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from bench.anchor_rankers import AsymmetricBitsRanker, BinaryEncoderRanker, EncoderRanker, Int8EncoderRanker
from bench.soak import _turn_range

DOCUMENTS = ["The cat sat on the warm mat by the kitchen fire.",
             "Interest rates rose again as the central bank fought inflation.",
             "A violin has four strings and is played with a bow."]
QUERIES = ["a pet resting near the stove", "monetary policy and rising prices", "a bowed string instrument"]


def test_sign_bits_rank_paraphrases_like_the_float_vectors(tmp_path):
    args = argparse.Namespace(encoder_cache=tmp_path, threads=1)
    floats, bits = EncoderRanker(args), BinaryEncoderRanker(args)
    floats.index(DOCUMENTS)
    bits.index(DOCUMENTS)  # reads the windows' vectors from the cache the float column wrote
    assert bits.encode_s is None and bits.bits.shape == (3, 48) and bits.bits.dtype == np.uint8
    expected = np.unpackbits(bits.bits, axis=1)[:, :384].astype(bool)
    np.testing.assert_array_equal(expected, floats.vectors > 0)
    ranked = bits.rank(QUERIES, 3)
    assert ranked[:, 0].tolist() == [0, 1, 2] == floats.rank(QUERIES, 3)[:, 0].tolist()
    assert sorted(ranked[0].tolist()) == [0, 1, 2]  # every document ranked, none twice
    int8 = Int8EncoderRanker(args)
    for column in (AsymmetricBitsRanker(args), int8):
        column.index(DOCUMENTS)
        assert column.rank(QUERIES, 3)[:, 0].tolist() == [0, 1, 2]
    assert int8.codes.dtype == np.int8 and np.abs(int8.codes).max() == 127
    np.testing.assert_allclose(int8.codes * int8.scale, floats.vectors, atol=float(int8.scale.max()) / 2 + 1e-7)


def test_turns_per_conversation_range():
    assert _turn_range("5-15") == (5, 15) and _turn_range("7") == (7, 7) and _turn_range("0") == (0, 0)
    for bad in ("0-5", "9-3", "-1", "many"):
        with pytest.raises(argparse.ArgumentTypeError, match="LOW-HIGH"):
            _turn_range(bad)
