"""Writing vocabulary index files (the format `engine.vocab` reads): one writer per format version.

`write_vocab_index` checks its inputs, computes what every format starts from (the isotropy
correction, the vocabulary's embedding rows as stored), lays out the sections the version's writer
names (`FORMAT_WRITERS`), fills them, projects the vocabulary in chunks with the row definition's
projection (`ROW_DEFINITIONS`: the header's density statistics, and the full tables a build encodes
with) and writes the header last. `extend_vocab_index` adds tokens to an index that derives its rows.
"""

from __future__ import annotations

import functools
import json
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine import gguf
from engine.bits import words
from engine.files import atomic_write, reserve
from engine.vocab import (
    CAPACITY_TARGET,
    FIXED_POINT_ONE,
    FORMAT_VERSION,
    HEADER_BYTES,
    MAGIC,
    READABLE_VERSIONS,
    VocabIndex,
    VocabIndexError,
    capacity,
    integer_projection,
    isotropy_correction,
    open_shared,
    project_rows,
    project_rows_exact,
    project_rows_fixed,
    projection_matrix,
    rotated_bitmaps,
)

_ALIGN = 64
_SCRATCH = ("unigram.npy", "bitmaps.npy")

Sections = dict[str, tuple[str, list[int]]]


@dataclass(frozen=True)
class _Vocabulary:
    """What every format is written from: the vocabulary, its correction and its stored rows.

    Shapes: token_ids (v,) int64, idf (v,) float32, mean (emb_dim,) float32, directions
    (c, emb_dim) float32, raw (v, row_bytes) uint8 rows of GGUF type `rows_type`."""

    token_ids: np.ndarray
    idf: np.ndarray
    dims: int
    ngram: int
    emb_dim: int
    mean: np.ndarray
    directions: np.ndarray
    rows_type: str
    raw: np.ndarray

    @property
    def size(self) -> int:
        return int(self.token_ids.size)

    @property
    def tau(self) -> float:
        return self.emb_dim ** -0.5


@dataclass(frozen=True)
class _RowDefinition:
    """How a token's values are computed (`project`: embedding rows (n, emb_dim) float32 ->
    (n, dims) float32), and the arrays a format of this definition stores to compute them again."""

    project: Callable[[np.ndarray], np.ndarray]
    stored: dict[str, np.ndarray]


def _float64_rows(vocab: _Vocabulary, seed: int) -> _RowDefinition:
    """Row definition 2: `project_rows`, the projection rebuilt from the seed where it is used."""
    return _RowDefinition(functools.partial(project_rows, mean=vocab.mean, directions=vocab.directions,
                                            dims=vocab.dims, seed=seed), {})


def _fixed_point_rows(vocab: _Vocabulary, seed: int) -> _RowDefinition:
    """Row definition 3: `project_rows_fixed` with the int8 `integer_projection` and its column scale."""
    projection, column_scale = integer_projection(vocab.emb_dim, vocab.dims, seed)
    project = functools.partial(project_rows_fixed, mean=vocab.mean, directions=vocab.directions,
                                projection=projection, column_scale=column_scale)
    return _RowDefinition(project, {"projection": projection, "column_scale": column_scale})


def _exact_rows(vocab: _Vocabulary, seed: int) -> _RowDefinition:
    """Row definition 4: `project_rows_exact` with the float32 `projection_matrix`."""
    projection = projection_matrix(vocab.emb_dim, vocab.dims, seed)
    project = functools.partial(project_rows_exact, mean=vocab.mean, directions=vocab.directions,
                                projection=projection)
    return _RowDefinition(project, {"projection": projection})


ROW_DEFINITIONS: dict[int, Callable[[_Vocabulary, int], _RowDefinition]] = {
    2: _float64_rows, 3: _fixed_point_rows, 4: _exact_rows,
}


class _StoredTables:
    """Format 1: the derived tables themselves (float16 unigram rows, rotated n-gram bitmaps), in
    sections the projection pass fills; no embedding rows, so nothing is derived on use."""

    derives_rows = False

    def sections(self, vocab: _Vocabulary) -> Sections:
        return {"unigram": ("<f2", [vocab.size, vocab.dims]),
                "bitmaps": ("<u8", [vocab.ngram, vocab.size, 2, words(vocab.dims)])}

    def arrays(self, vocab: _Vocabulary, rows: _RowDefinition) -> dict[str, np.ndarray]:
        return {}

    def header(self, vocab: _Vocabulary) -> dict[str, Any]:
        return {}


class _DerivedRows:
    """Format 2: the model's embedding rows and the isotropy correction; a token's values are
    derived on use by `project_rows`."""

    derives_rows = True

    def sections(self, vocab: _Vocabulary) -> Sections:
        return {"rows": ("|u1", list(vocab.raw.shape)), "mean": ("<f4", [vocab.emb_dim]),
                "directions": ("<f4", list(vocab.directions.shape))}

    def arrays(self, vocab: _Vocabulary, rows: _RowDefinition) -> dict[str, np.ndarray]:
        return {"rows": vocab.raw, "mean": vocab.mean, "directions": vocab.directions}

    def header(self, vocab: _Vocabulary) -> dict[str, Any]:
        return {"rows_type": vocab.rows_type}


class _FixedPointProjection(_DerivedRows):
    """Format 3: format 2 and the int8 projection with its float64 column scale (`project_rows_fixed`)."""

    def sections(self, vocab: _Vocabulary) -> Sections:
        return super().sections(vocab) | {"projection": ("|i1", [vocab.emb_dim, vocab.dims]),
                                          "column_scale": ("<f8", [vocab.dims])}

    def arrays(self, vocab: _Vocabulary, rows: _RowDefinition) -> dict[str, np.ndarray]:
        return super().arrays(vocab, rows) | rows.stored

    def header(self, vocab: _Vocabulary) -> dict[str, Any]:
        return super().header(vocab) | {"fixed_point_one": FIXED_POINT_ONE}


class _FloatProjection(_DerivedRows):
    """Format 4: format 2 and the float32 Gaussian projection (`project_rows_exact`)."""

    def sections(self, vocab: _Vocabulary) -> Sections:
        return super().sections(vocab) | {"projection": ("<f4", [vocab.emb_dim, vocab.dims])}

    def arrays(self, vocab: _Vocabulary, rows: _RowDefinition) -> dict[str, np.ndarray]:
        return super().arrays(vocab, rows) | rows.stored


FORMAT_WRITERS = {1: _StoredTables(), 2: _DerivedRows(), 3: _FixedPointProjection(), 4: _FloatProjection()}


def write_vocab_index(path: str | Path, *, token_ids: np.ndarray, idf: np.ndarray, embeddings: np.ndarray,
                      dims: int, ngram: int, seed: int, drop_components: int = 0,
                      stored_rows: tuple[str, np.ndarray] | None = None, tables_dir: str | Path | None = None,
                      format_version: int = FORMAT_VERSION, row_definition: int = FORMAT_VERSION,
                      chunk_rows: int = 2048) -> VocabIndex:
    """Project the corpus vocabulary and write the vocabulary index file; returns it opened.

    Shapes: token_ids (v,) int sorted unique global ids; idf (v,) float; embeddings
    (vocab_total, emb_dim) float32, the model's full token embedding table (rows indexed by
    global id). With `drop_components` > 0 the vocabulary's mean and top principal directions
    are removed first (`isotropy_correction`); 0 is the reference's plain projection.

    Formats 2, 3 and 4 store the vocabulary's embedding rows as `stored_rows` = (GGUF type name, raw
    uint8 (v, row_bytes)), the model's own bytes (`gguf.token_rows`), which must dequantise to
    `embeddings[token_ids]` exactly; without it, as float32 ("F32"). With `tables_dir`, the full
    derived tables are also written there (`unigram.npy`, `bitmaps.npy`) and attached to the
    returned index, for a build to encode with. `format_version=1` writes the stored-table format,
    its rows derived as format `row_definition` (2: `project_rows`, 3: `project_rows_fixed`, 4:
    `project_rows_exact`) does; formats 2, 3 and 4 always use their own definition.
    """
    path = Path(path)
    token_ids = np.ascontiguousarray(token_ids, dtype=np.int64)
    idf = np.ascontiguousarray(idf, dtype=np.float32)
    writer, row_definition = _format_writer(format_version, row_definition)
    _check_vocabulary(token_ids, idf, embeddings)
    vocab = _vocabulary(token_ids, idf, embeddings, dims=dims, ngram=ngram, drop_components=drop_components,
                        stored_rows=stored_rows, chunk_rows=chunk_rows)
    if writer.derives_rows and vocab.raw.shape[0] != vocab.size:
        raise ValueError(f"stored_rows hold {vocab.raw.shape[0]} rows for {vocab.size} tokens")
    rows = ROW_DEFINITIONS[row_definition](vocab, seed)
    sections, length = _section_table({"token_ids": ("<i8", [vocab.size]), "idf": ("<f4", [vocab.size]),
                                       **writer.sections(vocab)})
    with atomic_write(path) as tmp:
        with open(tmp, "wb"):
            pass
        reserve(tmp, max(length, HEADER_BYTES))
        scratch = _scratch_tables(tables_dir, vocab.size, dims, ngram) if tables_dir is not None else None
        tables = scratch if writer.derives_rows else (_section(tmp, sections, "unigram"),
                                                      _section(tmp, sections, "bitmaps"))
        nonzero = 0
        if vocab.size:
            arrays = {"token_ids": vocab.token_ids, "idf": vocab.idf, **writer.arrays(vocab, rows)}
            for name, array in arrays.items():
                if array.size:
                    _section(tmp, sections, name)[:] = array
            nonzero = _project_vocabulary(
                vocab, embeddings, rows.project, tables, check_rows=writer.derives_rows, chunk_rows=chunk_rows
            )
        header = _header(vocab, format_version=format_version, row_definition=row_definition, seed=seed,
                         drop_components=drop_components, nonzero=nonzero, sections=sections)
        with open(tmp, "r+b") as handle:
            handle.write(_header_bytes(header | writer.header(vocab)))
    opened = VocabIndex.open(path)
    if writer.derives_rows and scratch is not None:
        opened = opened.with_tables(*_open_scratch_tables(tables_dir))
    return opened


def _format_writer(format_version: int, row_definition: int) -> tuple[_StoredTables | _DerivedRows, int]:
    """The writer of `format_version`, and the row definition it writes with (a format's own, but
    format 1's is chosen)."""
    if format_version not in READABLE_VERSIONS:
        raise ValueError(f"format_version must be one of {READABLE_VERSIONS}, got {format_version!r}")
    if format_version != 1:
        row_definition = format_version
    if row_definition not in ROW_DEFINITIONS:
        raise ValueError(f"row_definition must be 2, 3 or 4, got {row_definition!r}")
    return FORMAT_WRITERS[format_version], row_definition


def _check_vocabulary(token_ids: np.ndarray, idf: np.ndarray, embeddings: np.ndarray) -> None:
    if token_ids.ndim != 1 or idf.shape != token_ids.shape:
        raise ValueError(f"token_ids {token_ids.shape} and idf {idf.shape} must be matching 1-D arrays")
    if token_ids.size and (np.any(np.diff(token_ids) <= 0) or token_ids[0] < 0):
        raise ValueError("token_ids must be sorted, unique and non-negative")
    if embeddings.ndim != 2:
        raise ValueError(f"embeddings must be 2-D (vocab, emb_dim), got shape {embeddings.shape}")
    if token_ids.size and token_ids[-1] >= embeddings.shape[0]:
        raise ValueError(
            f"token id {int(token_ids[-1])} is outside the embedding table ({embeddings.shape[0]} rows)"
        )


def _vocabulary(
    token_ids: np.ndarray,
    idf: np.ndarray,
    embeddings: np.ndarray,
    *,
    dims: int,
    ngram: int,
    drop_components: int,
    stored_rows: tuple[str, np.ndarray] | None,
    chunk_rows: int,
) -> _Vocabulary:
    """The checked vocabulary with its isotropy correction and its rows as stored (float32 without
    `stored_rows`)."""
    emb_dim, vocab_size = int(embeddings.shape[1]), int(token_ids.size)
    if drop_components and vocab_size:
        mean, directions = isotropy_correction(token_ids, embeddings, drop_components, chunk_rows)
    else:
        mean, directions = np.zeros(emb_dim, np.float32), np.zeros((0, emb_dim), np.float32)
    rows_type, raw = (
        stored_rows
        if stored_rows is not None
        else (
            "F32",
            np.ascontiguousarray(embeddings[token_ids], dtype="<f4").view(np.uint8).reshape(vocab_size, -1),
        )
    )
    return _Vocabulary(token_ids, idf, dims, ngram, emb_dim, mean, directions, rows_type, raw)


def _section(tmp: Path, sections: dict[str, list], name: str) -> np.memmap:
    start, dtype, shape = sections[name]
    return np.memmap(tmp, dtype=dtype, mode="r+", offset=start, shape=tuple(shape))


def _project_vocabulary(
    vocab: _Vocabulary,
    embeddings: np.ndarray,
    project: Callable[[np.ndarray], np.ndarray],
    tables: tuple[np.ndarray, np.ndarray] | None,
    *,
    check_rows: bool,
    chunk_rows: int,
) -> int:
    """Project the vocabulary `chunk_rows` tokens at a time → how many projected values lie beyond
    tau (the header's density). Fills `tables` (unigram (v, dims), bitmaps (ngram, v, 2, words))
    when given; with `check_rows`, each chunk's stored rows must dequantise to its embedding rows."""
    nonzero = 0
    for start in range(0, vocab.size, chunk_rows):
        stop = min(start + chunk_rows, vocab.size)
        rows = embeddings[vocab.token_ids[start:stop]]
        if check_rows and not np.array_equal(
            gguf.dequantize_rows(vocab.raw[start:stop], vocab.rows_type), rows
        ):
            raise ValueError(
                f"stored_rows ({vocab.rows_type}) do not dequantise to the embedding rows {start}..{stop}"
            )
        projected = project(rows)
        nonzero += int(np.count_nonzero(np.abs(projected) > vocab.tau))
        if tables is not None:
            tables[0][start:stop] = projected
            tables[1][:, start:stop] = rotated_bitmaps(projected, vocab.tau, vocab.ngram)
    if tables is not None:
        for array in tables:
            array.flush()
    return nonzero


def _header(vocab: _Vocabulary, *, format_version: int, row_definition: int, seed: int, drop_components: int,
            nonzero: int, sections: dict[str, list]) -> dict[str, Any]:
    """The header every format has: its parameters, the encoder's statistics and the section table."""
    density = nonzero / (vocab.size * vocab.dims) if vocab.size else 0.0
    ngram_density = density ** vocab.ngram
    return {
        "format_version": format_version,
        "dims": vocab.dims,
        "words": words(vocab.dims),
        "emb_dim": vocab.emb_dim,
        "tau": vocab.tau,
        "ngram": vocab.ngram,
        "seed": seed,
        "drop_components": drop_components,
        "vocab_size": vocab.size,
        "density": density,
        "ngram_density": ngram_density,
        "capacity_target": CAPACITY_TARGET,
        "m_cap": capacity(ngram_density),
        "c_min": max(1, round(ngram_density * vocab.dims)),
        "row_definition": row_definition,
        "sections": sections,
    }


def _scratch_tables(
    tables_dir: str | Path, vocab_size: int, dims: int, ngram: int
) -> tuple[np.ndarray, np.ndarray]:
    tables_dir = Path(tables_dir)
    tables_dir.mkdir(parents=True, exist_ok=True)
    unigram = np.lib.format.open_memmap(tables_dir / _SCRATCH[0], mode="w+", dtype=np.float16,
                                        shape=(vocab_size, dims))
    bitmaps = np.lib.format.open_memmap(tables_dir / _SCRATCH[1], mode="w+", dtype=np.uint64,
                                        shape=(ngram, vocab_size, 2, words(dims)))
    for name, table in zip(_SCRATCH, (unigram, bitmaps), strict=True):
        reserve(tables_dir / name, table.offset + table.nbytes)
    return unigram, bitmaps


def _open_scratch_tables(tables_dir: str | Path) -> tuple[np.ndarray, np.ndarray]:
    return tuple(np.load(Path(tables_dir) / name, mmap_mode="r") for name in _SCRATCH)


def extend_vocab_index(base: VocabIndex, path: str | Path, *, token_ids: np.ndarray, idf: np.ndarray,
                       stored_rows: tuple[str, np.ndarray]) -> VocabIndex:
    """`base`'s vocabulary plus new tokens, written to `path`; returns it opened.

    Everything `base` fixed stays frozen: its tokens' IDF, the isotropy correction, the projection
    and the header's encoder parameters (tau, density, m_cap, c_min). So every base token's rows,
    and the encoding of any text made of base tokens, are bit for bit those of `base`; the new
    tokens' rows follow from the same correction and projection. This is what an append segment
    encodes with (`engine.segments`). Formats 2, 3 and 4 (which derive rows on use) only.

    Shapes: token_ids (n,) int sorted unique global ids, none in `base`; idf (n,) float;
    stored_rows = (GGUF type name, raw uint8 (n, row_bytes)) in `base`'s row type.
    """
    if base.embedding_rows is None:
        raise VocabIndexError(f"{base.path}: a format {base.format_version} index stores its tables and "
                              f"cannot be extended; rebuild the corpus")
    token_ids = np.ascontiguousarray(token_ids, dtype=np.int64)
    idf = np.ascontiguousarray(idf, dtype=np.float32)
    rows_type, raw = stored_rows
    if token_ids.ndim != 1 or idf.shape != token_ids.shape or raw.shape[0] != token_ids.size:
        raise ValueError(f"token_ids {token_ids.shape}, idf {idf.shape} and rows {raw.shape} must match")
    if rows_type != base.header["rows_type"] or (
        token_ids.size and raw.shape[1] != base.embedding_rows.shape[1]
    ):
        raise ValueError(
            f"new rows are {rows_type} {raw.shape[1:]}, the index holds {base.header['rows_type']} "
            f"{base.embedding_rows.shape[1:]}"
        )
    if token_ids.size and (np.any(np.diff(token_ids) <= 0) or token_ids[0] < 0):
        raise ValueError("token_ids must be sorted, unique and non-negative")
    old_ids = np.asarray(base.token_ids)
    if np.intersect1d(old_ids, token_ids).size:
        raise ValueError("token_ids must not repeat tokens of the base vocabulary")
    merged_ids = np.concatenate([old_ids, token_ids])
    order = np.argsort(merged_ids, kind="stable")
    arrays = {"token_ids": merged_ids[order],
              "idf": np.concatenate([np.asarray(base.idf), idf])[order],
              "rows": np.concatenate([np.asarray(base.embedding_rows), raw.astype(np.uint8)])[order],
              "mean": base.mean, "directions": base.directions}
    if base.projection is not None:
        arrays["projection"] = np.asarray(base.projection)
    if base.column_scale is not None:
        arrays["column_scale"] = base.column_scale
    header = {**base.header, "vocab_size": int(merged_ids.size),
              "extends_vocab_size": int(base.header.get("extends_vocab_size", base.size))}
    sections, offset = _section_table({name: (base.header["sections"][name][1], list(array.shape))
                                       for name, array in arrays.items()})
    header["sections"] = sections
    blob = _header_bytes(header)
    with atomic_write(path) as tmp, open(tmp, "wb") as handle:
        handle.truncate(offset)
        handle.write(blob)
        for name, array in arrays.items():
            start, dtype, _ = sections[name]
            handle.seek(start)
            handle.write(np.ascontiguousarray(array, dtype=dtype).tobytes())
    return open_shared(path)


def _section_table(shapes: dict[str, tuple[str, list[int]]]) -> tuple[dict[str, list], int]:
    """{name: [offset, dtype, shape]} of sections laid out one after the other from HEADER_BYTES,
    each aligned to 64 bytes, and the file's length."""
    sections, offset = {}, HEADER_BYTES
    for name, (dtype, shape) in shapes.items():
        sections[name] = [offset, dtype, list(shape)]
        offset += -(-np.dtype(dtype).itemsize * math.prod(shape) // _ALIGN) * _ALIGN
    return sections, offset


def _header_bytes(header: dict[str, Any]) -> bytes:
    """The file's first bytes: magic, length, and the header as JSON (it must fit in HEADER_BYTES)."""
    blob = json.dumps(header, sort_keys=True).encode("utf-8")
    if 12 + len(blob) > HEADER_BYTES:
        raise ValueError("vocabulary index header does not fit in 4096 bytes")
    return MAGIC + struct.pack("<I", len(blob)) + blob
