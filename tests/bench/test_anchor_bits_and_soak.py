"""bench/anchor_rankers.py's compressed encoder columns (the real all-MiniLM-L6-v2, its vectors reduced
to sign bits or int8, or distilled into static token vectors) and bench/soak.py's turns-per-conversation
range and allocator sample."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.anchor_rankers import (
    AsymmetricBitsRanker,
    BinaryEncoderRanker,
    EncoderRanker,
    Int8EncoderRanker,
    StaticEncoderRanker,
)
from bench.soak import _heap_mb, _turn_range

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
    np.testing.assert_allclose(
        int8.codes * int8.scale, floats.vectors, atol=float(int8.scale.max()) / 2 + 1e-7
    )


def test_turns_per_conversation_range():
    assert _turn_range("5-15") == (5, 15) and _turn_range("7") == (7, 7) and _turn_range("0") == (0, 0)
    for bad in ("0-5", "9-3", "-1", "many"):
        with pytest.raises(argparse.ArgumentTypeError, match="LOW-HIGH"):
            _turn_range(bad)


@pytest.mark.slow
def test_static_vectors_distilled_from_the_encoder_rank_paraphrases(tmp_path):
    """model2vec distils the real encoder once into a table the next index reads back."""
    args = argparse.Namespace(encoder_cache=tmp_path, threads=1)
    static = StaticEncoderRanker(args)
    static.index(DOCUMENTS)
    assert static.distill_s is not None and static.vectors.shape == (3, 256)
    np.testing.assert_allclose(np.linalg.norm(static.vectors, axis=1), 1.0, rtol=1e-5)
    assert static.rank(QUERIES, 3)[:, 0].tolist() == [0, 1, 2]
    again = StaticEncoderRanker(args)
    again.index(DOCUMENTS)
    assert again.distill_s is None and "read from the cache" in again.build_rate()
    np.testing.assert_allclose(again.vectors, static.vectors, atol=1e-6)


def _in_a_fresh_interpreter(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])


# In a fresh interpreter (a long-lived one would serve the blocks from free memory already resident):
# the sample before, after a 300 MiB buffer (a mapping of its own, like a KV cache), and after 64 MiB
# in 1 MiB blocks (what malloc serves from its heap or maps one by one).
_ALLOCATOR_SAMPLES = """
import os
import numpy as np
from bench.soak import _heap_mb
samples = [_heap_mb(os.getpid())]
big = np.ones(300 << 20, dtype=np.uint8)
samples.append(_heap_mb(os.getpid()))
small = [np.ones(1 << 20, dtype=np.uint8) for _ in range(64)]
samples.append(_heap_mb(os.getpid()))
anon = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("RssAnon:")) / 1024
print(*samples, anon)
"""


def test_the_allocator_sample_counts_the_heap_and_not_a_big_buffer():
    result = _in_a_fresh_interpreter(_ALLOCATOR_SAMPLES)
    assert result.returncode == 0, result.stderr
    before, after_big, after_small, anon_mb = map(float, result.stdout.split())
    assert before > 0 and after_big < before + 50 and after_small > after_big + 50
    assert after_small <= anon_mb + 1
    assert _heap_mb(-1) is None  # no such process


_TERMINATED = """
import os, signal, time
from bench.soak import _exit_on_sigterm
_exit_on_sigterm()
try:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
finally:
    print("cleaned up", flush=True)
"""


def test_a_terminated_soak_runs_its_cleanup():
    """SIGTERM reaches main's `finally` (which stops the portal the soak started) and exits 143."""
    result = _in_a_fresh_interpreter(_TERMINATED)
    assert result.returncode == 143 and result.stdout.strip() == "cleaned up", result.stderr
