"""Model-like multi-vector sequences for tests and benchmarks.

Random-normal floats are the worst case for compression and unlike real token vectors, so
the compression figures are also measured on sequences built from a real model: each row
is a token's embedding from the GGUF's `token_embd.weight` table (rows dequantised on
demand, never the whole table), projected to `dim` by a seeded Gaussian matrix and
L2-normalised, as late-interaction encoders normalise their token vectors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import quants as gguf_quants

from engine.gguf import embedding_tensor_info


def gguf_token_sequences(
    gguf_path: str | Path, count: int, seq_length: int, dim: int = 768, seed: int = 0
) -> np.ndarray:
    """(count, seq_length, dim) float32 unit rows: runs of consecutive token ids' embeddings."""
    tensor = embedding_tensor_info(gguf_path)
    vocab, width = tensor.shape
    block_size, type_size = GGML_QUANT_SIZES[tensor.tensor_type]
    bytes_per_row = width // block_size * type_size
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, vocab - seq_length, size=count)
    token_ids = (starts[:, None] + np.arange(seq_length)[None, :]).reshape(-1)
    raw = np.memmap(gguf_path, dtype=np.uint8, mode="r", offset=tensor.offset, shape=(vocab, bytes_per_row))
    rows = np.asarray(gguf_quants.dequantize(np.array(raw[token_ids]), tensor.tensor_type), dtype=np.float32)
    projection = rng.standard_normal((width, dim), dtype=np.float32) / np.float32(np.sqrt(width))
    projected = rows.reshape(-1, width) @ projection
    projected /= np.linalg.norm(projected, axis=1, keepdims=True)
    return projected.reshape(count, seq_length, dim)
