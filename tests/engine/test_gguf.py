"""GGUF reading: round trips per tensor type, the real model, bad files, fingerprints."""

from __future__ import annotations

import os

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from engine.gguf import GGUFError, load_token_embeddings, model_fingerprint, read_metadata

VOCAB, DIM = 48, 512  # 512: a multiple of every block size (32 and the k-quants' 256)

# Max abs error relative to the row's max abs value, per type (generous bounds for each scheme).
TOLERANCES = {
    Q.F32: 0.0, Q.F16: 1e-3, Q.BF16: 8e-3, Q.Q8_0: 0.01, Q.Q5_0: 0.07, Q.Q5_1: 0.07,
    Q.Q4_0: 0.15, Q.Q4_1: 0.15, Q.Q6_K: 0.04, Q.Q5_K: 0.07, Q.Q4_K: 0.15, Q.Q3_K: 0.3,
    Q.Q2_K: 0.6, Q.TQ1_0: 1.0, Q.TQ2_0: 1.0, Q.IQ4_NL: 0.15,
}


def _quantisable(qtype: Q) -> bool:
    try:
        gguf.quants.quantize(np.zeros((1, 256), dtype=np.float32), qtype)
    except NotImplementedError:
        return False
    return True


QTYPES = [q for q in TOLERANCES if _quantisable(q)]


def _write(
    path, embeddings: np.ndarray, qtype: Q, *, tokens: list[str] | None = None, with_embedding: bool = True
):
    writer = gguf.GGUFWriter(str(path), "testarch")
    writer.add_embedding_length(embeddings.shape[1])
    writer.add_tokenizer_model("llama")
    tokens = tokens or [f"tok{i}" for i in range(embeddings.shape[0])]
    writer.add_token_list(tokens)
    writer.add_token_scores([float(-i) for i in range(len(tokens))])
    writer.add_token_types([1] * len(tokens))
    writer.add_bos_token_id(1)
    writer.add_chat_template("{{ messages }}")
    if with_embedding:
        data = embeddings if qtype == Q.F32 else gguf.quants.quantize(embeddings, qtype)
        if qtype in (Q.F32, Q.F16):
            writer.add_tensor("token_embd.weight", data)
        else:
            writer.add_tensor("token_embd.weight", data, raw_dtype=qtype)
    writer.add_tensor("output_norm.weight", np.ones(embeddings.shape[1], dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def embeddings() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((VOCAB, DIM)).astype(np.float32)


@pytest.mark.parametrize("qtype", QTYPES, ids=lambda q: q.name)
def test_round_trip_per_type(tmp_path, embeddings, qtype):
    path = _write(tmp_path / f"{qtype.name}.gguf", embeddings, qtype)
    table = load_token_embeddings(path)
    assert table.shape == (VOCAB, DIM) and table.dtype == np.float32
    # Exactly what gguf.quants reconstructs from the stored blocks...
    reference = (
        gguf.quants.dequantize(gguf.quants.quantize(embeddings, qtype), qtype)
        if qtype != Q.F32
        else embeddings
    )
    np.testing.assert_array_equal(table, np.asarray(reference, dtype=np.float32).reshape(VOCAB, DIM))
    # ...and close to the original within the type's precision.
    scale = np.abs(embeddings).max(axis=1, keepdims=True)
    assert np.max(np.abs(table - embeddings) / scale) <= TOLERANCES[qtype]


def _q6_k_reference(block: bytes) -> np.ndarray:
    """ggml's dequantize_row_q6_K for one 210-byte block, as plain loops."""
    ql, qh = block[:128], block[128:192]
    scales = np.frombuffer(block[192:208], dtype=np.int8)
    d = float(np.frombuffer(block[208:210], dtype=np.float16)[0])
    out = np.zeros(256, dtype=np.float32)
    for half in range(2):
        base, ql_off, qh_off, sc_off = 128 * half, 64 * half, 32 * half, 8 * half
        for lane in range(32):
            group = lane // 16
            low0, low32, high = ql[ql_off + lane], ql[ql_off + lane + 32], qh[qh_off + lane]
            values = [
                ((low0 & 0xF) | ((high >> 0) & 3) << 4) - 32,
                ((low32 & 0xF) | ((high >> 2) & 3) << 4) - 32,
                ((low0 >> 4) | ((high >> 4) & 3) << 4) - 32,
                ((low32 >> 4) | ((high >> 6) & 3) << 4) - 32,
            ]
            for quarter, value in enumerate(values):
                out[base + 32 * quarter + lane] = d * scales[sc_off + group + 2 * quarter] * value
    return out


def test_q6_k_blocks_match_the_ggml_reference(tmp_path):
    """gguf cannot quantise Q6_K, so write random valid Q6_K blocks and check against ggml's formula."""
    rng = np.random.default_rng(3)
    rows, blocks_per_row = 6, DIM // 256
    raw = rng.integers(0, 256, size=(rows, blocks_per_row, 210), dtype=np.uint8)
    raw[..., 208:210] = np.frombuffer(np.float16(0.01).tobytes(), dtype=np.uint8)
    path = tmp_path / "q6k.gguf"
    writer = gguf.GGUFWriter(str(path), "testarch")
    writer.add_tensor("token_embd.weight", raw.reshape(rows, -1), raw_dtype=Q.Q6_K)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    table = load_token_embeddings(path)
    assert table.shape == (rows, DIM)
    expected = np.stack([np.concatenate([_q6_k_reference(bytes(block)) for block in row]) for row in raw])
    np.testing.assert_allclose(table, expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("qtype", [Q.F32, Q.Q8_0, Q.Q4_0], ids=lambda q: q.name)
def test_metadata_matches_gguf_reader(tmp_path, embeddings, qtype):
    path = _write(tmp_path / "m.gguf", embeddings, qtype, tokens=[f"▁t{i}" for i in range(VOCAB)])
    metadata = read_metadata(path)
    reader = gguf.GGUFReader(str(path))
    assert metadata.architecture == "testarch"
    assert metadata.vocab_size == VOCAB
    assert metadata.embedding_length == DIM
    assert metadata.tokenizer_model == "llama"
    assert metadata.chat_template == "{{ messages }}"
    assert metadata.special_token_id("bos") == 1
    assert metadata.tokens == list(reader.fields["tokenizer.ggml.tokens"].contents())
    np.testing.assert_array_equal(
        metadata.scores, np.array(reader.fields["tokenizer.ggml.scores"].contents(), np.float32)
    )
    for tensor in reader.tensors:
        info = metadata.tensors[tensor.name]
        assert info.tensor_type == tensor.tensor_type
        assert info.offset == tensor.data_offset
        assert info.n_bytes == tensor.n_bytes


@pytest.mark.slow
def test_real_model_metadata_matches_gguf_reader(gemma_gguf):
    metadata = read_metadata(gemma_gguf)
    reader = gguf.GGUFReader(str(gemma_gguf))  # the slow reference: ~10 s on this vocabulary
    assert metadata.tokens == list(reader.fields["tokenizer.ggml.tokens"].contents())
    np.testing.assert_array_equal(metadata.token_types, reader.fields["tokenizer.ggml.token_type"].contents())
    assert {t.name: t.data_offset for t in reader.tensors} == {
        n: t.offset for n, t in metadata.tensors.items()
    }
    assert metadata.architecture == "gemma3"
    assert metadata.tokenizer_model == "llama"
    assert metadata.vocab_size == 262144 and metadata.embedding_length == 640
    assert metadata.chat_template is None
    assert metadata.tensors["token_embd.weight"].tensor_type == Q.Q8_0


def test_real_model_embeddings_shape_and_cache(gemma_gguf, tmp_path):
    table = load_token_embeddings(gemma_gguf, cache_dir=tmp_path)
    assert table.shape == (262144, 640) and table.dtype == np.float32
    assert isinstance(table, np.memmap)
    assert np.isfinite(table[:1000]).all() and np.abs(table[1000:2000]).mean() > 0
    cached = list(tmp_path.glob("*.npy"))
    assert len(cached) == 1
    again = load_token_embeddings(gemma_gguf, cache_dir=tmp_path)
    np.testing.assert_array_equal(again[::997], table[::997])
    assert list(tmp_path.glob("*")) == cached  # no second file, no temporary left over
    # Spot-check against gguf's own dequantisation of a few rows.
    info = read_metadata(gemma_gguf).tensors["token_embd.weight"]
    raw = np.memmap(gemma_gguf, dtype=np.uint8, mode="r", offset=info.offset, shape=(262144, 680))
    np.testing.assert_array_equal(
        table[[0, 2, 262143]], gguf.quants.dequantize(np.array(raw[[0, 2, 262143]]), Q.Q8_0)
    )


def test_cache_key_changes_when_the_file_changes(tmp_path, embeddings):
    path = _write(tmp_path / "m.gguf", embeddings, Q.F32)
    first = load_token_embeddings(path, cache_dir=tmp_path / "cache")
    _write(path, embeddings * 2, Q.F32)
    os.utime(path, ns=(1, 1))
    second = load_token_embeddings(path, cache_dir=tmp_path / "cache")
    np.testing.assert_array_equal(second, first * 2)
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 2


def test_fingerprint_is_stable_and_content_based(tmp_path, embeddings):
    a = _write(tmp_path / "a.gguf", embeddings, Q.F32)
    b = _write(tmp_path / "b.gguf", embeddings, Q.F32)
    c = _write(tmp_path / "c.gguf", embeddings + 1, Q.F32)
    assert model_fingerprint(a) == model_fingerprint(b)
    assert model_fingerprint(a) != model_fingerprint(c)
    assert model_fingerprint(a, full=True) == model_fingerprint(b, full=True) != model_fingerprint(a)
    assert model_fingerprint(a).startswith(f"{a.stat().st_size}-")


def test_not_a_gguf_file(tmp_path):
    path = tmp_path / "notes.gguf"
    path.write_text("just some text, long enough to have a header")
    with pytest.raises(GGUFError, match=r"notes\.gguf: not a GGUF file"):
        read_metadata(path)


@pytest.mark.parametrize("name", ["empty.gguf", "absent.gguf"])
def test_empty_or_missing_file(tmp_path, name):
    path = tmp_path / name
    if name == "empty.gguf":
        path.write_bytes(b"")
    with pytest.raises(GGUFError, match=name.replace(".", r"\.")):
        load_token_embeddings(path)


@pytest.mark.parametrize("keep", [6, 30, 200, 2000, -100], ids=lambda k: f"keep{k}")
def test_truncated_file(tmp_path, embeddings, keep):
    path = _write(tmp_path / "t.gguf", embeddings, Q.Q8_0)
    data = path.read_bytes()
    path.write_bytes(data[:keep])
    with pytest.raises(GGUFError, match=r"t\.gguf: (truncated|corrupt)"):
        load_token_embeddings(path)


def test_corrupt_header_counts(tmp_path, embeddings):
    path = _write(tmp_path / "c.gguf", embeddings, Q.F32)
    data = bytearray(path.read_bytes())
    data[8:16] = (2**60).to_bytes(8, "little")  # tensor count
    path.write_bytes(bytes(data))
    with pytest.raises(GGUFError, match="corrupt GGUF header"):
        read_metadata(path)


def test_unsupported_version(tmp_path, embeddings):
    path = _write(tmp_path / "v.gguf", embeddings, Q.F32)
    data = bytearray(path.read_bytes())
    data[4:8] = (99).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(GGUFError, match="unsupported GGUF version 99"):
        read_metadata(path)


def test_missing_embedding_tensor(tmp_path, embeddings):
    path = _write(tmp_path / "n.gguf", embeddings, Q.F32, with_embedding=False)
    with pytest.raises(GGUFError, match="no 'token_embd.weight' tensor"):
        load_token_embeddings(path)


def test_tensor_type_gguf_cannot_dequantise(tmp_path, embeddings):
    path = tmp_path / "i8.gguf"
    writer = gguf.GGUFWriter(str(path), "testarch")
    writer.add_tensor("token_embd.weight", np.zeros((VOCAB, DIM), dtype=np.int8))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(GGUFError, match="I8, which gguf.quants cannot dequantise"):
        load_token_embeddings(path)
