"""Encoding of full multi-vector sequences into Chroma metadata strings.

Two storage versions, chosen per record by its `storage_version` metadata field:

- "1.0" (the contract): base64(gzip(float32 little-endian)). gzip buys little on float
  data: the mantissa bits are noise, so random-normal or model embeddings shrink ~1.08x,
  not the 4x the contract hoped for (bench/multivector.py measures it). A record without
  `storage_version` predates versioning and is read as "1.0".
- "1.1": base64(float16 little-endian), no gzip. Half the bytes of 1.0 and no
  compression time; values round to float16 (relative error <= 2**-11, |x| <= 65504).

Decoding always returns a writable float32 (seq_length, dim) array.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import re
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from engine.multivector.errors import DecompressionError, EmbeddingValidationError

STORAGE_VERSIONS = ("1.0", "1.1")
LEGACY_VERSION = "1.0"
_DTYPES = {"1.0": np.dtype("<f4"), "1.1": np.dtype("<f2")}
_FLOAT16_MAX = float(np.finfo(np.float16).max)
_SHAPE = re.compile(r"^\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


def compress_embeddings(embeddings: np.ndarray) -> str:
    """Contract v1.0 encoding: (seq_length, dim) float → base64(gzip(float32 bytes)).

    gzip's header timestamp is fixed at 0 so equal arrays encode to equal strings.
    """
    raw = np.ascontiguousarray(embeddings, dtype=_DTYPES["1.0"]).tobytes()
    return base64.b64encode(gzip.compress(raw, compresslevel=6, mtime=0)).decode("ascii")


def decompress_embeddings(encoded: str, shape: tuple[int, int]) -> np.ndarray:
    """Contract v1.0 decoding → float32 array of `shape`. Raises DecompressionError."""
    return decode_embeddings(encoded, shape, "1.0")


def check_version(storage_version: str) -> str:
    """Return `storage_version` if supported, else raise ValueError naming the supported ones."""
    if storage_version not in STORAGE_VERSIONS:
        raise ValueError(f"storage_version must be one of {STORAGE_VERSIONS}, got {storage_version!r}")
    return storage_version


def encode_embeddings(embeddings: np.ndarray, storage_version: str) -> str:
    """Encode validated (seq_length, dim) float32 embeddings in `storage_version`'s format."""
    check_version(storage_version)
    if storage_version == "1.0":
        return compress_embeddings(embeddings)
    peak = float(np.abs(embeddings).max()) if embeddings.size else 0.0
    if peak > _FLOAT16_MAX:
        raise EmbeddingValidationError(
            f"storage_version 1.1 stores float16: |value| {peak:g} exceeds its maximum {_FLOAT16_MAX:g}"
        )
    raw = np.ascontiguousarray(embeddings, dtype=_DTYPES["1.1"]).tobytes()
    return base64.b64encode(raw).decode("ascii")


def decode_embeddings(encoded: str, shape: tuple[int, int], storage_version: str) -> np.ndarray:
    """Decode a payload written by `encode_embeddings` → writable float32 `shape` array.

    Raises DecompressionError when the payload is not valid base64 (or gzip for 1.0), or
    its size does not match `shape`.
    """
    check_version(storage_version)
    if not isinstance(encoded, str):
        raise DecompressionError(f"payload must be a str, got {type(encoded).__name__}")
    try:
        # strict_mode: the alphabet check of b64decode(validate=True) without its copy and regex
        raw = binascii.a2b_base64(encoded, strict_mode=True)
        if storage_version == "1.0":
            raw = gzip.decompress(raw)
    except (ValueError, OSError, EOFError, zlib.error) as error:  # ValueError: bad base64, non-ASCII
        raise DecompressionError(f"corrupt v{storage_version} payload: {error}") from None
    dtype = _DTYPES[storage_version]
    expected = shape[0] * shape[1] * dtype.itemsize
    if len(raw) != expected:
        raise DecompressionError(
            f"v{storage_version} payload holds {len(raw)} bytes, shape {shape} needs {expected}"
        )
    return np.frombuffer(raw, dtype=dtype).reshape(shape).astype(np.float32)


def format_shape(shape: tuple[int, ...]) -> str:
    """(100, 768) → "(100, 768)", the contract's `embedding_shape` text."""
    return f"({shape[0]}, {shape[1]})"


def parse_shape(text: Any) -> tuple[int, int]:
    """ "(100, 768)" → (100, 768). Raises DecompressionError on anything else."""
    match = _SHAPE.match(text) if isinstance(text, str) else None
    if match is None:
        raise DecompressionError(f"embedding_shape must look like '(seq_length, dim)', got {text!r}")
    return int(match.group(1)), int(match.group(2))


def record_version(metadata: Mapping[str, Any]) -> str:
    """The record's storage version ("1.0" when absent). Raises DecompressionError if unknown."""
    version = metadata.get("storage_version", LEGACY_VERSION)
    if version not in STORAGE_VERSIONS:
        raise DecompressionError(f"unknown storage_version {version!r} (supported: {STORAGE_VERSIONS})")
    return version


def decode_metadata(metadata: Mapping[str, Any]) -> np.ndarray:
    """Full (seq_length, dim) float32 sequence of a stored record's metadata.

    Reads `full_embeddings`, `embedding_shape` and `storage_version`; raises
    DecompressionError when one is missing or they disagree.
    """
    if "full_embeddings" not in metadata:
        raise DecompressionError("metadata has no 'full_embeddings' field")
    shape = parse_shape(metadata.get("embedding_shape"))
    return decode_embeddings(metadata["full_embeddings"], shape, record_version(metadata))
