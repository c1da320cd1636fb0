"""The vocabulary index: one memory-mapped file holding everything the encoder needs at run time.

Layout (little-endian), every section aligned to 64 bytes::

    [0, 4096)   header: b"HDRVOCAB", uint32 length, UTF-8 JSON (parameters + section table)
    token_ids   int64   (v,)              corpus vocabulary, sorted global token ids
    idf         float32 (v,)              IDF weight of each vocabulary token
    unigram     float16 (v, dims)         projected, L2-normalised token embeddings (see
                                          `write_vocab_index` for the isotropy correction)
    bitmaps     uint64  (ngram, v, 2, w)  ternary bitmaps of `unigram` at tau, position j rotated
                                          by j dims; [:, :, 0] = pos, [:, :, 1] = neg

Only the corpus vocabulary is stored (special tokens excluded), so a 20k-token corpus at 10,000
dims takes ~0.4 GB of unigram vectors plus ~0.25 GB of bitmaps, not 262,144 full rows.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.bits import quantize_ternary, words

MAGIC = b"HDRVOCAB"
FORMAT_VERSION = 1
HEADER_BYTES = 4096
_ALIGN = 64
# Fraction of dimensions a document's selected n-grams should cover at least once; sets m_cap.
CAPACITY_TARGET = 0.5
# Vocabulary tokens per principal direction `isotropy_correction` may remove.
MIN_TOKENS_PER_COMPONENT = 32


class VocabIndexError(ValueError):
    """A vocabulary index file that is missing, truncated, or of another format."""


def projection_matrix(emb_dim: int, dims: int, seed: int) -> np.ndarray:
    """Seeded Gaussian projection (emb_dim, dims) float32 with unit-L2 columns.

    With unit-norm embedding rows, each projected value is ~ N(0, 1/emb_dim), so tau = emb_dim^-0.5
    is one standard deviation. NumPy's PCG64 stream makes it reproducible from the seed alone.
    """
    matrix = np.random.default_rng(seed).standard_normal((emb_dim, dims), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=0, keepdims=True)
    return matrix


@dataclass
class VocabIndex:
    """An opened (read-only, memory-mapped) vocabulary index. See the module docstring."""

    path: Path
    header: dict[str, Any]
    token_ids: np.ndarray
    idf: np.ndarray
    unigram: np.ndarray
    bitmaps: np.ndarray

    @property
    def dims(self) -> int:
        return int(self.header["dims"])

    @property
    def size(self) -> int:
        return int(self.header["vocab_size"])

    @classmethod
    def open(cls, path: str | Path) -> VocabIndex:
        path = Path(path)
        header = _read_header(path)
        arrays = {}
        file_size = path.stat().st_size
        for name, (offset, dtype, shape) in header["sections"].items():
            nbytes = int(np.dtype(dtype).itemsize * math.prod(shape))
            if offset + nbytes > file_size:
                raise VocabIndexError(f"{path}: section {name!r} runs past the end of the file (truncated?)")
            arrays[name] = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=tuple(shape)) if nbytes else \
                np.zeros(shape, dtype=dtype)
        return cls(path, header, arrays["token_ids"], arrays["idf"], arrays["unigram"], arrays["bitmaps"])


def _read_header(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            head = handle.read(HEADER_BYTES)
    except OSError as exc:
        raise VocabIndexError(f"{path}: cannot read vocabulary index: {exc}") from exc
    if len(head) < 12 or head[:8] != MAGIC:
        raise VocabIndexError(f"{path}: not a vocabulary index (bad magic)")
    (length,) = struct.unpack("<I", head[8:12])
    try:
        header = json.loads(head[12:12 + length].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise VocabIndexError(f"{path}: corrupt vocabulary index header: {exc}") from exc
    if header.get("format_version") != FORMAT_VERSION:
        raise VocabIndexError(f"{path}: format_version {header.get('format_version')!r}, expected {FORMAT_VERSION}")
    return header


def capacity(ngram_density: float, target: float = CAPACITY_TARGET) -> int:
    """m_cap = ceil(log(1 - target) / log(1 - p)): n-grams needed to cover `target` of the dims."""
    if ngram_density <= 0.0:
        return 0
    if ngram_density >= 1.0:
        return 1
    return max(1, math.ceil(math.log(1.0 - target) / math.log(1.0 - ngram_density)))


def unit_rows(rows: np.ndarray) -> np.ndarray:
    """float32 rows scaled to unit L2 norm (an all-zero row stays zero)."""
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)


def corrected_rows(rows: np.ndarray, correction: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Embedding rows (n, emb_dim) as unit rows less the `isotropy_correction` (mean, directions);
    not normalised again."""
    mean, directions = correction
    rows = unit_rows(rows) - mean
    return rows - (rows @ directions.T) @ directions


def isotropy_correction(token_ids: np.ndarray, embeddings: np.ndarray, components: int,
                        chunk_rows: int = 2048, sample_rows: int = 20000) -> tuple[np.ndarray, np.ndarray]:
    """(mean (emb_dim,), directions (c, emb_dim)) to remove from the unit embedding rows.

    LLM token embeddings are anisotropic: Gemma 3's unit rows share a mean of norm 0.45 (mean
    cosine 0.21 between random tokens), and a document's bag of tokens piles that shared part
    up until every document looks alike (mean |cos| ~0.6 between hypervectors). Removing the
    mean and the top principal directions of the corpus vocabulary ("all-but-the-top", Mu &
    Viswanath 2018) before projection leaves the parts that tell tokens apart. The directions
    come from an evenly strided sample of at most `sample_rows` vocabulary rows, so the result
    depends on the corpus vocabulary alone. At most one direction per
    `MIN_TOKENS_PER_COMPONENT` vocabulary tokens is removed: the top directions of a small
    vocabulary are its own content words, not a shared bias (16 of an 80-token corpus's
    directions erase what tells its texts apart).
    """
    emb_dim = int(embeddings.shape[1])
    mean = np.zeros(emb_dim, dtype=np.float64)
    for start in range(0, token_ids.size, chunk_rows):
        mean += unit_rows(embeddings[token_ids[start:start + chunk_rows]]).sum(axis=0)
    mean = (mean / max(token_ids.size, 1)).astype(np.float32)
    components = min(components, emb_dim, token_ids.size // MIN_TOKENS_PER_COMPONENT)
    if components <= 0:
        return mean, np.zeros((0, emb_dim), dtype=np.float32)
    sample = unit_rows(embeddings[token_ids[:: max(1, token_ids.size // sample_rows)]]) - mean
    directions = np.linalg.svd(sample, full_matrices=False)[2][:components]
    return mean, np.ascontiguousarray(directions, dtype=np.float32)


def write_vocab_index(path: str | Path, *, token_ids: np.ndarray, idf: np.ndarray, embeddings: np.ndarray,
                      dims: int, ngram: int, seed: int, drop_components: int = 0,
                      chunk_rows: int = 2048) -> VocabIndex:
    """Project the corpus vocabulary and write the vocabulary index file; returns it opened.

    Shapes: token_ids (v,) int sorted unique global ids; idf (v,) float; embeddings
    (vocab_total, emb_dim) float32, the model's full token embedding table (rows indexed by
    global id). Rows are L2-normalised before projection (an all-zero row stays zero). With
    `drop_components` > 0, the vocabulary's mean and its top `drop_components` principal
    directions are first removed from the unit rows, which are then normalised again
    (`isotropy_correction`); 0 is the reference's plain projection.
    """
    path = Path(path)
    token_ids = np.ascontiguousarray(token_ids, dtype=np.int64)
    idf = np.ascontiguousarray(idf, dtype=np.float32)
    if token_ids.ndim != 1 or idf.shape != token_ids.shape:
        raise ValueError(f"token_ids {token_ids.shape} and idf {idf.shape} must be matching 1-D arrays")
    if token_ids.size and (np.any(np.diff(token_ids) <= 0) or token_ids[0] < 0):
        raise ValueError("token_ids must be sorted, unique and non-negative")
    if embeddings.ndim != 2:
        raise ValueError(f"embeddings must be 2-D (vocab, emb_dim), got shape {embeddings.shape}")
    if token_ids.size and token_ids[-1] >= embeddings.shape[0]:
        raise ValueError(f"token id {int(token_ids[-1])} is outside the embedding table ({embeddings.shape[0]} rows)")
    emb_dim = int(embeddings.shape[1])
    tau = emb_dim ** -0.5
    vocab_size, n_words = int(token_ids.size), words(dims)
    shapes = {"token_ids": ("<i8", [vocab_size]), "idf": ("<f4", [vocab_size]),
              "unigram": ("<f2", [vocab_size, dims]), "bitmaps": ("<u8", [ngram, vocab_size, 2, n_words])}
    sections, offset = {}, HEADER_BYTES
    for name, (dtype, shape) in shapes.items():
        sections[name] = [offset, dtype, shape]
        offset += -(-np.dtype(dtype).itemsize * math.prod(shape) // _ALIGN) * _ALIGN
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        handle.truncate(max(offset, HEADER_BYTES))

    def section(name: str) -> np.ndarray:
        start, dtype, shape = sections[name]
        return np.memmap(tmp, dtype=dtype, mode="r+", offset=start, shape=tuple(shape))

    nonzero = 0
    if vocab_size:
        section("token_ids")[:] = token_ids
        section("idf")[:] = idf
        unigram, bitmaps = section("unigram"), section("bitmaps")
        projection = projection_matrix(emb_dim, dims, seed)
        correction = isotropy_correction(token_ids, embeddings, drop_components, chunk_rows) if drop_components else None
        for start in range(0, vocab_size, chunk_rows):
            rows = embeddings[token_ids[start:start + chunk_rows]]
            rows = unit_rows(rows if correction is None else corrected_rows(rows, correction))
            projected = rows @ projection
            unigram[start:start + len(rows)] = projected
            for j in range(ngram):
                pos, neg = quantize_ternary(np.roll(projected, j, axis=1), tau)
                bitmaps[j, start:start + len(rows), 0] = pos
                bitmaps[j, start:start + len(rows), 1] = neg
                if j == 0:
                    nonzero += int(np.count_nonzero(np.abs(projected) > tau))
        for array in (unigram, bitmaps):
            array.flush()
    density = nonzero / (vocab_size * dims) if vocab_size else 0.0
    ngram_density = density ** ngram
    header = {"format_version": FORMAT_VERSION, "dims": dims, "words": n_words, "emb_dim": emb_dim, "tau": tau,
              "ngram": ngram, "seed": seed, "drop_components": drop_components, "vocab_size": vocab_size,
              "density": density,
              "ngram_density": ngram_density, "capacity_target": CAPACITY_TARGET,
              "m_cap": capacity(ngram_density), "c_min": max(1, round(ngram_density * dims)),
              "sections": sections}
    blob = json.dumps(header, sort_keys=True).encode("utf-8")
    if 12 + len(blob) > HEADER_BYTES:
        raise ValueError("vocabulary index header does not fit in 4096 bytes")
    with open(tmp, "r+b") as handle:
        handle.write(MAGIC + struct.pack("<I", len(blob)) + blob)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return VocabIndex.open(path)
