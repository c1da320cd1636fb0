"""engine.requantize: a GGUF's matrices re-encoded by plan, everything else copied, written atomically."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize, quantize

from engine.requantize import RequantizeError, plan_text, requantize, requantized_from

Q = gguf.GGMLQuantizationType


def _tiny_gguf(path: Path) -> dict[str, np.ndarray]:
    """A small llama-architecture GGUF: two quantized matrices, a 1-D F32 tensor and some metadata."""
    rng = np.random.default_rng(3)
    values = {"blk.0.ffn_up.weight": rng.normal(size=(8, 64)).astype(np.float32),
              "output.weight": rng.normal(size=(4, 64)).astype(np.float32),
              "blk.0.attn_norm.weight": rng.normal(size=64).astype(np.float32)}
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_string("general.name", "tiny")
    writer.add_uint32("llama.context_length", 128)
    writer.add_array("tokenizer.ggml.tokens", ["<s>", "a", "b"])
    writer.add_tensor(
        "blk.0.ffn_up.weight", quantize(values["blk.0.ffn_up.weight"], Q.Q5_0), raw_dtype=Q.Q5_0
    )
    writer.add_tensor("output.weight", quantize(values["output.weight"], Q.Q8_0), raw_dtype=Q.Q8_0)
    writer.add_tensor("blk.0.attn_norm.weight", values["blk.0.attn_norm.weight"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return values


def _tensors(path: Path) -> dict[str, gguf.ReaderTensor]:
    return {t.name: t for t in gguf.GGUFReader(str(path)).tensors}


def test_planned_matrices_are_re_encoded_and_the_rest_is_copied(tmp_path):
    _tiny_gguf(tmp_path / "tiny.gguf")
    plan = {"Q5_0": "Q4_0"}
    out = requantize(tmp_path / "tiny.gguf", tmp_path / "out.gguf", plan, source_sha256="ab" * 32)
    before, after = _tensors(tmp_path / "tiny.gguf"), _tensors(out)
    assert after["blk.0.ffn_up.weight"].tensor_type == Q.Q4_0
    assert after["output.weight"].tensor_type == Q.Q8_0  # not in the plan: the same bytes
    assert np.array_equal(after["output.weight"].data, before["output.weight"].data)
    assert np.array_equal(after["blk.0.attn_norm.weight"].data, before["blk.0.attn_norm.weight"].data)
    # The re-encoded matrix is the source's values within Q4_0's step (a block's largest |x| / 8).
    source = dequantize(before["blk.0.ffn_up.weight"].data, Q.Q5_0)
    again = dequantize(after["blk.0.ffn_up.weight"].data, Q.Q4_0)
    assert again.shape == source.shape == (8, 64)
    step = np.abs(source.reshape(-1, 32)).max(axis=1, keepdims=True) / 8
    assert (np.abs(again - source).reshape(-1, 32) <= step + 1e-6).all()
    assert not np.array_equal(again, source)
    fields = gguf.GGUFReader(str(out)).fields
    assert fields["general.name"].contents() == "tiny"
    assert fields["llama.context_length"].contents() == 128
    assert fields["tokenizer.ggml.tokens"].contents() == ["<s>", "a", "b"]
    assert requantized_from(out) == ("ab" * 32, "Q5_0>Q4_0")
    assert requantized_from(tmp_path / "tiny.gguf") is None  # not made by requantize


def test_the_recorded_plan_is_canonical():
    assert plan_text({"Q6_K": "Q4_0", "Q5_0": "Q4_0"}) == plan_text({"Q5_0": "Q4_0", "Q6_K": "Q4_0"})


def test_bad_input_is_refused_and_leaves_nothing(tmp_path):
    _tiny_gguf(tmp_path / "tiny.gguf")
    with pytest.raises(RequantizeError, match="unknown quantization type 'Q9_9'"):
        requantize(tmp_path / "tiny.gguf", tmp_path / "out" / "a.gguf", {"Q5_0": "Q9_9"}, source_sha256="0")
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(RequantizeError, match="junk.gguf is not a readable GGUF"):
        requantize(tmp_path / "junk.gguf", tmp_path / "out" / "b.gguf", {"Q5_0": "Q4_0"}, source_sha256="0")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
