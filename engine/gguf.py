"""GGUF reading: metadata, the tokenizer vocabulary, and `token_embd.weight` dequantised.

The header (key/values and tensor infos) is parsed here directly from a memory map, because
`gguf.GGUFReader` builds one numpy view per array element and takes ~10 s on a 262k-token
vocabulary. Tensor payloads are dequantised with `gguf.quants.dequantize`, so every type the
`gguf` package can dequantise is supported. The tests compare this parser with `GGUFReader`.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType
from gguf import quants as gguf_quants

from engine.files import atomic_write

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
EMBEDDING_TENSOR = "token_embd.weight"
# Bump when the cache file layout or the dequantisation changes, so old caches are ignored.
_CACHE_FORMAT = 1
# Rows dequantised per step: bounds the temporary arrays `gguf.quants` allocates.
_ROWS_PER_CHUNK = 8192

_SCALAR_FORMATS: dict[GGUFValueType, str] = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d",
}
_NUMPY_DTYPES: dict[GGUFValueType, str] = {
    GGUFValueType.UINT8: "<u1",
    GGUFValueType.INT8: "<i1",
    GGUFValueType.UINT16: "<u2",
    GGUFValueType.INT16: "<i2",
    GGUFValueType.UINT32: "<u4",
    GGUFValueType.INT32: "<i4",
    GGUFValueType.FLOAT32: "<f4",
    GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "<u8",
    GGUFValueType.INT64: "<i8",
    GGUFValueType.FLOAT64: "<f8",
}


class GGUFError(ValueError):
    """A GGUF file that cannot be read: the message names the file and the problem."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's header entry. `shape` is numpy order (slowest axis first)."""

    name: str
    shape: tuple[int, ...]
    tensor_type: GGMLQuantizationType
    offset: int  # absolute byte offset of the payload in the file
    n_bytes: int


@dataclass(frozen=True)
class GGUFMetadata:
    """Everything the engine needs from a GGUF header.

    `tokens`, `scores` and `token_types` are the tokenizer vocabulary in id order
    (`token_types` uses llama.cpp's numbering: 1 normal, 2 unknown, 3 control,
    4 user-defined, 5 unused, 6 byte). `fields` holds every key/value, arrays included.
    """

    path: Path
    version: int
    architecture: str
    fields: dict[str, Any]
    tensors: dict[str, TensorInfo]
    tokens: list[str] = field(repr=False)
    scores: np.ndarray = field(repr=False)  # (vocab,) float32
    token_types: np.ndarray = field(repr=False)  # (vocab,) int32

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    @property
    def embedding_length(self) -> int | None:
        return self.fields.get(f"{self.architecture}.embedding_length")

    @property
    def tokenizer_model(self) -> str | None:
        return self.fields.get("tokenizer.ggml.model")

    @property
    def chat_template(self) -> str | None:
        return self.fields.get("tokenizer.chat_template")

    def special_token_id(self, name: str) -> int | None:
        """`name` is one of bos, eos, unknown, padding, seperator (the GGUF key's spelling)."""
        value = self.fields.get(f"tokenizer.ggml.{name}_token_id")
        return int(value) if value is not None else None


class _Cursor:
    """Bounds-checked little-endian reads from a buffer; overruns become `GGUFError`."""

    def __init__(self, buffer: mmap.mmap | bytes, path: Path) -> None:
        self.buffer = buffer
        self.size = len(buffer)
        self.pos = 0
        self.path = path

    def _need(self, n_bytes: int, what: str) -> None:
        if n_bytes < 0 or self.pos + n_bytes > self.size:
            raise GGUFError(
                f"{self.path}: truncated or corrupt GGUF file: {what} needs {n_bytes} bytes at offset "
                f"{self.pos}, file has {self.size}"
            )

    def scalar(self, fmt: str, what: str) -> Any:
        n_bytes = struct.calcsize(fmt)
        self._need(n_bytes, what)
        (value,) = struct.unpack_from(fmt, self.buffer, self.pos)
        self.pos += n_bytes
        return value

    def string(self, what: str) -> str:
        length = self.scalar("<Q", what)
        self._need(length, what)
        raw = self.buffer[self.pos : self.pos + length]
        self.pos += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GGUFError(f"{self.path}: {what} is not valid UTF-8 ({exc})") from None

    def value(self, value_type: int, what: str) -> Any:
        try:
            kind = GGUFValueType(value_type)
        except ValueError:
            raise GGUFError(f"{self.path}: {what} has unknown value type {value_type}") from None
        if kind == GGUFValueType.STRING:
            return self.string(what)
        if kind == GGUFValueType.ARRAY:
            item_type = self.scalar("<I", what)
            count = self.scalar("<Q", what)
            return self.array(item_type, count, what)
        return self.scalar(_SCALAR_FORMATS[kind], what)

    def array(self, item_type: int, count: int, what: str) -> Any:
        try:
            kind = GGUFValueType(item_type)
        except ValueError:
            raise GGUFError(f"{self.path}: {what} has unknown array item type {item_type}") from None
        if kind in _NUMPY_DTYPES:
            dtype = np.dtype(_NUMPY_DTYPES[kind])
            self._need(count * dtype.itemsize, what)
            values = np.frombuffer(self.buffer, dtype=dtype, count=count, offset=self.pos).copy()
            self.pos += count * dtype.itemsize
            return values
        if kind == GGUFValueType.STRING:
            return self._string_array(count, what)
        # Nested arrays are legal but unused by any tokenizer key; read them generically.
        return [self.value(item_type, what) for _ in range(count)]

    def _string_array(self, count: int, what: str) -> list[str]:
        buffer, pos, size = self.buffer, self.pos, self.size
        unpack = struct.Struct("<Q").unpack_from
        strings: list[str] = []
        append = strings.append
        try:
            for _ in range(count):
                if pos + 8 > size:
                    raise IndexError
                (length,) = unpack(buffer, pos)
                pos += 8
                if pos + length > size:
                    raise IndexError
                append(buffer[pos : pos + length].decode("utf-8"))
                pos += length
        except IndexError:
            raise GGUFError(
                f"{self.path}: truncated or corrupt GGUF file: {what} runs past the end"
            ) from None
        except UnicodeDecodeError as exc:
            raise GGUFError(f"{self.path}: {what} holds a string that is not valid UTF-8 ({exc})") from None
        self.pos = pos
        return strings


@contextmanager
def _mapped(path: Path) -> Iterator[mmap.mmap]:
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed by the `with` below; opened apart to word the error
    except OSError as exc:
        raise GGUFError(f"{path}: cannot open GGUF file ({exc.strerror})") from None
    with handle:
        if os.fstat(handle.fileno()).st_size == 0:
            raise GGUFError(f"{path}: not a GGUF file (empty)")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            yield mapped


def _parse(path: Path, buffer: mmap.mmap) -> tuple[int, dict[str, Any], dict[str, TensorInfo], int]:
    """Parse the header. Returns (version, fields, tensors, header_end_offset)."""
    if buffer[:4] != GGUF_MAGIC:
        raise GGUFError(f"{path}: not a GGUF file (magic {bytes(buffer[:4])!r}, expected {GGUF_MAGIC!r})")
    cursor = _Cursor(buffer, path)
    cursor.pos = 4
    version = cursor.scalar("<I", "version")
    if version not in (2, 3):
        swapped = struct.unpack("<I", struct.pack(">I", version))[0]
        detail = "big-endian GGUF files are not supported" if swapped in (2, 3) else "expected 2 or 3"
        raise GGUFError(f"{path}: unsupported GGUF version {version} ({detail})")
    n_tensors = cursor.scalar("<Q", "tensor count")
    n_fields = cursor.scalar("<Q", "key/value count")
    # Each entry needs at least a few bytes: absurd counts mean corruption, not a huge file.
    if n_tensors > cursor.size // 24 or n_fields > cursor.size // 12:
        raise GGUFError(
            f"{path}: corrupt GGUF header ({n_tensors} tensors, {n_fields} keys in {cursor.size} bytes)"
        )
    fields: dict[str, Any] = {}
    for index in range(n_fields):
        key = cursor.string(f"key #{index}")
        value_type = cursor.scalar("<I", f"type of {key!r}")
        fields[key] = cursor.value(value_type, f"value of {key!r}")

    raw_infos = []
    for index in range(n_tensors):
        name = cursor.string(f"tensor #{index} name")
        n_dims = cursor.scalar("<I", f"tensor {name!r} rank")
        if n_dims > 8:
            raise GGUFError(f"{path}: corrupt tensor info: {name!r} has {n_dims} dimensions")
        dims = [cursor.scalar("<Q", f"tensor {name!r} shape") for _ in range(n_dims)]
        type_code = cursor.scalar("<I", f"tensor {name!r} type")
        offset = cursor.scalar("<Q", f"tensor {name!r} offset")
        raw_infos.append((name, dims, type_code, offset))

    alignment = int(fields.get("general.alignment", DEFAULT_ALIGNMENT))
    if alignment <= 0 or alignment & (alignment - 1):
        raise GGUFError(f"{path}: general.alignment must be a power of two, got {alignment}")
    data_start = -(-cursor.pos // alignment) * alignment

    tensors: dict[str, TensorInfo] = {}
    for name, dims, type_code, offset in raw_infos:
        tensors[name] = _tensor_info(path, name, dims, type_code, data_start + offset, cursor.size)
    return version, fields, tensors, cursor.pos


def _tensor_info(
    path: Path, name: str, dims: list[int], type_code: int, offset: int, file_size: int
) -> TensorInfo:
    try:
        tensor_type = GGMLQuantizationType(type_code)
    except ValueError:
        raise GGUFError(f"{path}: tensor {name!r} has unknown ggml type {type_code}") from None
    shape = tuple(reversed(dims))  # GGUF stores ne0 (fastest) first
    n_elements = int(np.prod(shape, dtype=np.int64)) if shape else 1
    block_size, type_size = GGML_QUANT_SIZES[tensor_type]
    if shape and shape[-1] % block_size:
        raise GGUFError(
            f"{path}: tensor {name!r} row length {shape[-1]} is not a multiple of {tensor_type.name}'s block "
            f"{block_size}"
        )
    n_bytes = n_elements // block_size * type_size
    if offset + n_bytes > file_size:
        raise GGUFError(
            f"{path}: truncated GGUF file: tensor {name!r} needs bytes {offset}..{offset + n_bytes}, file "
            f"has {file_size}"
        )
    return TensorInfo(name=name, shape=shape, tensor_type=tensor_type, offset=offset, n_bytes=n_bytes)


def read_metadata(gguf_path: str | Path) -> GGUFMetadata:
    """Read a GGUF file's header: key/values, tensor infos and the tokenizer vocabulary."""
    path = Path(gguf_path)
    with _mapped(path) as buffer:
        version, fields, tensors, _ = _parse(path, buffer)
    architecture = fields.get("general.architecture")
    if not isinstance(architecture, str):
        raise GGUFError(f"{path}: missing general.architecture")
    tokens = fields.get("tokenizer.ggml.tokens", [])
    if not isinstance(tokens, list):
        raise GGUFError(f"{path}: tokenizer.ggml.tokens must be an array of strings")
    scores = np.asarray(fields.get("tokenizer.ggml.scores", np.zeros(len(tokens))), dtype=np.float32)
    token_types = np.asarray(fields.get("tokenizer.ggml.token_type", np.ones(len(tokens))), dtype=np.int32)
    for key, values in (("tokenizer.ggml.scores", scores), ("tokenizer.ggml.token_type", token_types)):
        if values.shape != (len(tokens),):
            raise GGUFError(
                f"{path}: {key} has {values.shape[0]} entries, tokenizer.ggml.tokens has {len(tokens)}"
            )
    return GGUFMetadata(
        path=path,
        version=version,
        architecture=architecture,
        fields=fields,
        tensors=tensors,
        tokens=tokens,
        scores=scores,
        token_types=token_types,
    )


def model_fingerprint(gguf_path: str | Path, full: bool = False) -> str:
    """A stable content fingerprint for build manifests: `"<size>-<sha256 hex>"`.

    By default the hash covers the file size, the whole header (metadata and tensor table)
    and 64 evenly spaced 64 KiB samples of the tensor data: milliseconds even for large
    models, and identical for byte-identical copies. `full=True` hashes every byte.
    """
    path = Path(gguf_path)
    digest = hashlib.sha256()
    with _mapped(path) as buffer:
        size = len(buffer)
        digest.update(size.to_bytes(8, "little"))
        if full:
            digest.update(buffer)
        else:
            _, _, _, header_end = _parse(path, buffer)
            digest.update(buffer[:header_end])
            sample = 64 * 1024
            span = max(size - header_end - sample, 0)
            for index in range(64):
                start = header_end + span * index // 63
                digest.update(buffer[start : start + sample])
    return f"{size}-{digest.hexdigest()}"


def _dequantize_rows(raw: np.ndarray, tensor: TensorInfo, path: Path) -> np.ndarray:
    """raw (rows, bytes_per_row) uint8 → (rows, row_len) float32."""
    try:
        values = gguf_quants.dequantize(raw, tensor.tensor_type)
    except NotImplementedError:
        raise GGUFError(
            f"{path}: tensor {tensor.name!r} has type {tensor.tensor_type.name}, which gguf.quants cannot "
            "dequantise"
        ) from None
    return np.asarray(values, dtype=np.float32)


def _extract(path: Path, tensor: TensorInfo, out: np.ndarray) -> None:
    rows, row_len = tensor.shape
    block_size, type_size = GGML_QUANT_SIZES[tensor.tensor_type]
    bytes_per_row = row_len // block_size * type_size
    raw = np.memmap(path, dtype=np.uint8, mode="r", offset=tensor.offset, shape=(rows, bytes_per_row))
    try:
        for start in range(0, rows, _ROWS_PER_CHUNK):
            stop = min(start + _ROWS_PER_CHUNK, rows)
            chunk = _dequantize_rows(np.array(raw[start:stop]), tensor, path)
            out[start:stop] = chunk.reshape(stop - start, row_len)
    finally:
        del raw


def embedding_tensor_info(gguf_path: str | Path) -> TensorInfo:
    """The `token_embd.weight` header entry, checked to be a 2-D (vocab, emb_dim) tensor."""
    path = Path(gguf_path)
    with _mapped(path) as buffer:
        _, _, tensors, _ = _parse(path, buffer)
    tensor = tensors.get(EMBEDDING_TENSOR)
    if tensor is None:
        raise GGUFError(f"{path}: no {EMBEDDING_TENSOR!r} tensor (found {len(tensors)} others)")
    if len(tensor.shape) != 2:
        raise GGUFError(
            f"{path}: {EMBEDDING_TENSOR!r} must be 2-D (vocab, emb_dim), got shape {tensor.shape}"
        )
    return tensor


def load_token_embeddings(gguf_path: str | Path, cache_dir: str | Path | None = None) -> np.ndarray:
    """The token embedding table, dequantised. Shape (vocab, emb_dim), float32.

    With `cache_dir`, the table is written once as `.npy` keyed by the file's fingerprint,
    size, mtime and tensor type (so an edited or replaced model never hits a stale cache),
    and returned memory-mapped read-only. Extraction works in row chunks straight into the
    output (a memmap when caching), so peak memory is about one chunk beyond the output.
    """
    path = Path(gguf_path)
    tensor = embedding_tensor_info(path)
    if cache_dir is None:
        out = np.empty(tensor.shape, dtype=np.float32)
        _extract(path, tensor, out)
        return out

    stat = path.stat()
    key_source = (
        f"{_CACHE_FORMAT}:{model_fingerprint(path)}:{stat.st_size}:{stat.st_mtime_ns}"
        f":{tensor.tensor_type.name}"
    )
    key = hashlib.sha256(key_source.encode()).hexdigest()[:24]
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / f"{path.stem}.token_embd.{key}.npy"
    if target.exists():
        cached = np.load(target, mmap_mode="r")
        if cached.shape == tensor.shape and cached.dtype == np.float32:
            return cached
    # Write under a temporary name and rename, so a crash or a concurrent build never
    # leaves a half-written file under the final name.
    with atomic_write(target, durable=False) as temporary:
        out = np.lib.format.open_memmap(temporary, mode="w+", dtype=np.float32, shape=tensor.shape)
        _extract(path, tensor, out)
        out.flush()
        del out
    return np.load(target, mmap_mode="r")


def dequantize_rows(raw: np.ndarray, type_name: str) -> np.ndarray:
    """Rows in a GGUF tensor encoding -> float32. Shapes: raw (n, row_bytes) uint8 -> (n, row_len).

    `type_name` is a `GGMLQuantizationType` name ("F32", "F16", "Q8_0", ...): the same
    dequantisation `load_token_embeddings` applies, so the values are bit-identical to its rows.
    """
    try:
        tensor_type = GGMLQuantizationType[type_name]
    except KeyError:
        raise GGUFError(f"unknown GGUF tensor type {type_name!r}") from None
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    if raw.ndim != 2:
        raise ValueError(f"raw rows must be 2-D (n, row_bytes), got shape {raw.shape}")
    block_size, type_size = GGML_QUANT_SIZES[tensor_type]
    if raw.shape[1] % type_size:
        raise ValueError(
            f"{type_name}: row of {raw.shape[1]} bytes is not a whole number of {type_size}-byte blocks"
        )
    row_len = raw.shape[1] // type_size * block_size
    if raw.shape[0] == 0:
        return np.zeros((0, row_len), dtype=np.float32)
    values = gguf_quants.dequantize(raw, tensor_type)
    return np.asarray(values, dtype=np.float32).reshape(raw.shape[0], row_len)


def token_rows(gguf_path: str | Path, token_ids: np.ndarray) -> tuple[str, np.ndarray]:
    """The rows `token_ids` of `token_embd.weight` as stored: (type name, raw uint8 (n, row_bytes))."""
    path = Path(gguf_path)
    tensor = embedding_tensor_info(path)
    rows, row_len = tensor.shape
    block_size, type_size = GGML_QUANT_SIZES[tensor.tensor_type]
    raw = np.memmap(
        path, dtype=np.uint8, mode="r", offset=tensor.offset, shape=(rows, row_len // block_size * type_size)
    )
    try:
        return tensor.tensor_type.name, np.array(raw[np.asarray(token_ids, dtype=np.int64)])
    finally:
        del raw
