"""The vocabulary index: one memory-mapped file holding what the encoder needs at run time.

Format 4 (written by default), little-endian, every section aligned to 64 bytes::

    [0, 4096)   header: b"HDRVOCAB", uint32 length, UTF-8 JSON (parameters + section table)
    token_ids   int64   (v,)              corpus vocabulary, sorted global token ids
    idf         float32 (v,)              IDF weight of each vocabulary token
    rows        uint8   (v, row_bytes)    the vocabulary's rows of the model's `token_embd.weight`,
                                          in the model's own encoding (`rows_type`, e.g. Q8_0)
    mean        float32 (emb_dim,)        `isotropy_correction` mean (zeros without correction)
    directions  float32 (c, emb_dim)      `isotropy_correction` directions
    projection  float32 (emb_dim, dims)   the seeded Gaussian projection (`projection_matrix`)

The encoder's unigram rows (float16, (v, dims)) and n-gram bitmaps ((ngram, v, 2, w), position j
rotated by j dims) are a pure function of these (`project_rows_exact`) and are derived on use, for the
tokens a batch holds, with a small per-index cache (`CACHED_ROWS`). A build derives them once for
the whole vocabulary into a scratch file (`write_vocab_index(tables_dir=...)`) and deletes it.
Format 1 stored both tables: 1.19 GB for a 36,562-token vocabulary at 10,000 dims, against
~25 MB of Q8_0 rows in format 2 (docs/index-format.md says why and what it costs).

Format 4's values are format 2's, and format 1's as this code writes it (the float32 Gaussian,
products and sums in float64, rounded once to float32), computed by one kernel in one fixed order
(`kernels.project_float`), so they are exact on any machine and batch. Format 2 is format 4 without the projection section: its
rows are `project_rows` (a float64 BLAS product with `projection_matrix` built in each process),
exact only up to BLAS rounding, reading a 51 MB matrix per cold query. Format 3 stores an int8
projection (`integer_projection`, a slightly different matrix) and a float64 `column_scale`
section: integer sums exact in any order (`project_rows_fixed`). Formats 1, 2 and 3 are still read
and used as written; `write_vocab_index(format_version=1, 2 or 3)` still writes them, for
comparisons (format 1 with the rows of `row_definition` 2, 3 or 4).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from cachetools import LRUCache

from engine import gguf, kernels
from engine.bits import permute_bits, quantize_ternary, words
from engine.files import atomic_write, reserve

MAGIC = b"HDRVOCAB"
FORMAT_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
# Format 3: a corrected unit row is rounded to multiples of 1 / FIXED_POINT_ONE, the projection's
# Gaussian entries to multiples of 1 / PROJECTION_STEPS_PER_SD standard deviations in int8.
FIXED_POINT_ONE = 2**30
PROJECTION_STEPS_PER_SD = 32
# Derived rows kept per opened index: ~22 KB each at 10,000 dims (float16 row + position-0 bitmaps),
# so 1,024 rows hold a query stream's frequent tokens in ~23 MB.
CACHED_ROWS = 1024
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


@functools.lru_cache(maxsize=1)
def _projection64(emb_dim: int, dims: int, seed: int) -> np.ndarray:
    """`projection_matrix` as float64, built once per process and parameter set (~0.2 s at 640 x 10,000;
    51 MB there, so one is kept: format 2 indexes, which use it, are a legacy; `clear_caches`)."""
    matrix = projection_matrix(emb_dim, dims, seed).astype(np.float64)
    matrix.setflags(write=False)
    return matrix


def project_rows(rows: np.ndarray, *, mean: np.ndarray, directions: np.ndarray, dims: int, seed: int) -> np.ndarray:
    """Embedding rows (n, emb_dim) float32 -> projected rows (n, dims) float32: the one definition
    of a token's hypervector values, used by the build and on use alike.

    Unit rows less the correction (`mean`, `directions`, see `isotropy_correction`), unit again,
    times `projection_matrix`. Computed in float64 and rounded once to float32 because the query
    side must reproduce the build's values exactly while projecting other batches of rows: float32
    BLAS results depend on the batch (the same row projected alone, or with 6 or 2,047 others,
    differs in ~10 % of its values in the last bit); float64's batch-dependent error is ~2^-29 of a
    float32 step, so the rounded values agree (the tests and every build's verify step check it).
    """
    rows = np.asarray(rows, dtype=np.float64)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    rows = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0) - mean.astype(np.float64)
    if directions.size:
        directions = directions.astype(np.float64)
        rows -= (rows @ directions.T) @ directions
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    rows = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)
    return (rows @ _projection64(rows.shape[1], dims, seed)).astype(np.float32)


def integer_projection(emb_dim: int, dims: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Format 3's random projection: (g int8 (emb_dim, dims), column_scale float64 (dims,)).

    g is the seeded Gaussian of `projection_matrix` in steps of 1 / PROJECTION_STEPS_PER_SD
    standard deviations (clipped at +-127 steps, ~4 sd), and column_scale[d] = 1 / (FIXED_POINT_ONE
    * ||g[:, d]||), so `project_rows_fixed` has unit columns like `projection_matrix`. Stored in
    each format 3 file: reading it costs nothing, and the file does not depend on NumPy's stream.
    """
    if 127 * emb_dim * FIXED_POINT_ONE >= 2**53:
        raise ValueError(f"emb_dim {emb_dim} too large for exact fixed-point projection sums")
    gaussian = np.random.default_rng(seed).standard_normal((emb_dim, dims), dtype=np.float32)
    g = np.clip(np.rint(gaussian * np.float32(PROJECTION_STEPS_PER_SD)), -127, 127).astype(np.int8)
    norms = np.sqrt(np.einsum("ij,ij->j", g, g, dtype=np.int64).astype(np.float64))
    column_scale = np.divide(1.0, norms * FIXED_POINT_ONE, out=np.zeros(dims), where=norms > 0)
    return g, column_scale


def project_rows_fixed(rows: np.ndarray, *, mean: np.ndarray, directions: np.ndarray, projection: np.ndarray,
                       column_scale: np.ndarray) -> np.ndarray:
    """Embedding rows (n, emb_dim) float32 -> projected rows (n, dims) float32: format 3's one
    definition of a token's hypervector values, used by the build and on use alike.

    The row made unit, less the correction, unit again (`kernels.fixed_point_rows`, float64 in a
    fixed order), is rounded to integers x = rint(FIXED_POINT_ONE * row); x @ projection is then
    a sum of integers below 2^53, exact in float64 in any order (`kernels.project_fixed_point`),
    times the column scale and rounded once to float32. So a row's values never depend on the
    batch, the thread count, the BLAS or the machine: the query reproduces the build bit for bit.
    """
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    x = np.empty(rows.shape, dtype=np.int32)
    out = np.empty((rows.shape[0], projection.shape[1]), dtype=np.float32)
    if rows.shape[0]:
        kernels.fixed_point_rows(rows, np.ascontiguousarray(mean, dtype=np.float32),
                                 np.ascontiguousarray(directions, dtype=np.float32), float(FIXED_POINT_ONE), x)
        kernels.project_fixed_point(x, projection, column_scale, out)
    return out


def project_rows_exact(rows: np.ndarray, *, mean: np.ndarray, directions: np.ndarray,
                       projection: np.ndarray) -> np.ndarray:
    """Embedding rows (n, emb_dim) float32 -> projected rows (n, dims) float32: format 4's one
    definition of a token's hypervector values, used by the build and on use alike.

    The values of `project_rows` (the row made unit, less the correction, unit again, times the
    float32 Gaussian `projection`, all in float64, rounded once to float32), each computed in one
    fixed order by `kernels.corrected_unit_rows` and `kernels.project_float`: a row's values never
    depend on the batch, the thread count, the BLAS or the machine, so the query reproduces the
    build bit for bit.
    """
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    x = np.empty(rows.shape, dtype=np.float64)
    out = np.empty((rows.shape[0], projection.shape[1]), dtype=np.float32)
    if rows.shape[0]:
        kernels.corrected_unit_rows(rows, np.ascontiguousarray(mean, dtype=np.float32),
                                    np.ascontiguousarray(directions, dtype=np.float32), x)
        kernels.project_float(x, projection, out)
    return out


@dataclass
class VocabIndex:
    """An opened (read-only, memory-mapped) vocabulary index. See the module docstring.

    `unigram` and `bitmaps` are the full stored tables (format 1, or a build's scratch tables);
    None for a format 2 index, whose rows `rows()` derives on use.
    """

    path: Path
    header: dict[str, Any]
    token_ids: np.ndarray
    idf: np.ndarray
    unigram: np.ndarray | None
    bitmaps: np.ndarray | None
    embedding_rows: np.ndarray | None = None
    mean: np.ndarray | None = None
    directions: np.ndarray | None = None
    projection: np.ndarray | None = None
    column_scale: np.ndarray | None = None
    _cache: LRUCache = dataclasses.field(default_factory=lambda: LRUCache(maxsize=CACHED_ROWS), repr=False)
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    @property
    def dims(self) -> int:
        return int(self.header["dims"])

    @property
    def size(self) -> int:
        return int(self.header["vocab_size"])

    @property
    def format_version(self) -> int:
        return int(self.header["format_version"])

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
        if header["format_version"] == 1:
            return cls(path, header, arrays["token_ids"], arrays["idf"], arrays["unigram"], arrays["bitmaps"])
        fixed = {}
        if header["format_version"] == 3:
            fixed = {"projection": arrays["projection"], "column_scale": np.array(arrays["column_scale"])}
        elif header["format_version"] == 4:
            fixed = {"projection": arrays["projection"]}
        return cls(path, header, arrays["token_ids"], arrays["idf"], None, None, embedding_rows=arrays["rows"],
                   mean=np.array(arrays["mean"]), directions=np.array(arrays["directions"]), **fixed)

    def with_tables(self, unigram: np.ndarray, bitmaps: np.ndarray) -> VocabIndex:
        """This index with full tables attached (what a build encodes with)."""
        return dataclasses.replace(self, unigram=unigram, bitmaps=bitmaps, _cache=LRUCache(maxsize=CACHED_ROWS),
                                   _lock=threading.Lock())

    def project(self, local: np.ndarray) -> np.ndarray:
        """Projected float32 rows (u, dims) of vocabulary rows `local` (formats 2, 3 and 4)."""
        if self.embedding_rows is None:
            raise VocabIndexError(f"{self.path}: a format {self.format_version} index stores its rows, "
                                  f"it cannot derive them")
        embeddings = gguf.dequantize_rows(np.asarray(self.embedding_rows[local]), self.header["rows_type"])
        if self.column_scale is not None:
            return project_rows_fixed(embeddings, mean=self.mean, directions=self.directions,
                                      projection=self.projection, column_scale=self.column_scale)
        if self.projection is not None:
            return project_rows_exact(embeddings, mean=self.mean, directions=self.directions,
                                      projection=self.projection)
        return project_rows(embeddings, mean=self.mean, directions=self.directions, dims=self.dims,
                            seed=int(self.header["seed"]))

    def rows(self, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Encoder rows of vocabulary rows `local` (u,) int64.

        Shapes: -> unigram (u, dims) float16, bitmaps (ngram, u, 2, words) uint64 (position j
        rotated by j dims). Stored tables are indexed; otherwise rows are derived (and cached).
        """
        local = np.asarray(local, dtype=np.int64)
        if self.unigram is not None:
            return np.asarray(self.unigram[local]), np.ascontiguousarray(self.bitmaps[:, local])
        n_words, tau, ngram = int(self.header["words"]), float(self.header["tau"]), int(self.header["ngram"])
        unigram = np.empty((local.size, self.dims), dtype=np.float16)
        base = np.empty((local.size, 2, n_words), dtype=np.uint64)
        with self._lock:  # a read of an LRU cache reorders it
            cached = [self._cache.get(int(row)) for row in local]
        missing = [i for i, hit in enumerate(cached) if hit is None]
        if missing:
            projected = self.project(local[missing])
            pos, neg = quantize_ternary(projected, tau)
            fresh = projected.astype(np.float16)
            with self._lock:
                for k, i in enumerate(missing):
                    cached[i] = (fresh[k], np.stack([pos[k], neg[k]]))
                    self._cache[int(local[i])] = cached[i]
        for i, (row, bits) in enumerate(cached):
            unigram[i], base[i] = row, bits
        bitmaps = np.empty((ngram, local.size, 2, n_words), dtype=np.uint64)
        for j in range(ngram):
            bitmaps[j, :, 0], bitmaps[j, :, 1] = permute_bits(base[:, 0], base[:, 1], self.dims, j)
        return unigram, bitmaps

    def tables(self) -> tuple[np.ndarray, np.ndarray]:
        """The full tables (unigram (v, dims) float16, bitmaps (ngram, v, 2, words)): stored, or
        derived in memory (for small vocabularies: tests and benchmarks)."""
        if self.unigram is not None:
            return np.asarray(self.unigram), np.asarray(self.bitmaps)
        projected = self.project(np.arange(self.size))
        return projected.astype(np.float16), _rotated_bitmaps(projected, float(self.header["tau"]),
                                                               int(self.header["ngram"]))


def _rotated_bitmaps(projected: np.ndarray, tau: float, ngram: int) -> np.ndarray:
    """(u, dims) float -> (ngram, u, 2, words) uint64: position j's bitmaps are rotated by j dims."""
    out = np.empty((ngram, projected.shape[0], 2, words(projected.shape[1])), dtype=np.uint64)
    for j in range(ngram):
        out[j, :, 0], out[j, :, 1] = quantize_ternary(np.roll(projected, j, axis=1), tau)
    return out

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
    check_format_version(header, path, VocabIndexError)
    return header


def check_format_version(header: dict[str, Any], path: Path, error: type[Exception]) -> None:
    """Raise `error`, naming `path`, when the `format_version` of a vocab.idx header (or of a build
    manifest, which records its vocab.idx's) is not one this code reads."""
    version = header.get("format_version")
    if version not in READABLE_VERSIONS:
        raise error(f"{path}: format_version {version!r}, expected one of {READABLE_VERSIONS}")


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
                      stored_rows: tuple[str, np.ndarray] | None = None, tables_dir: str | Path | None = None,
                      format_version: int = FORMAT_VERSION, row_definition: int = FORMAT_VERSION,
                      chunk_rows: int = 2048) -> VocabIndex:
    """Project the corpus vocabulary and write the vocabulary index file; returns it opened.

    Shapes: token_ids (v,) int sorted unique global ids; idf (v,) float; embeddings
    (vocab_total, emb_dim) float32, the model's full token embedding table (rows indexed by
    global id). With `drop_components` > 0 the vocabulary's mean and top principal directions
    are removed first (`isotropy_correction`); 0 is the reference's plain projection.

    Formats 2 and 3 store the vocabulary's embedding rows as `stored_rows` = (GGUF type name, raw
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
    if format_version not in READABLE_VERSIONS:
        raise ValueError(f"format_version must be one of {READABLE_VERSIONS}, got {format_version!r}")
    if format_version != 1:
        row_definition = format_version
    if row_definition not in (2, 3, 4):
        raise ValueError(f"row_definition must be 2, 3 or 4, got {row_definition!r}")
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
    if drop_components and vocab_size:
        mean, directions = isotropy_correction(token_ids, embeddings, drop_components, chunk_rows)
    else:
        mean, directions = np.zeros(emb_dim, np.float32), np.zeros((0, emb_dim), np.float32)
    rows_type, raw = stored_rows if stored_rows is not None else \
        ("F32", np.ascontiguousarray(embeddings[token_ids], dtype="<f4").view(np.uint8).reshape(vocab_size, -1))
    derived = format_version != 1
    if derived and raw.shape[0] != vocab_size:
        raise ValueError(f"stored_rows hold {raw.shape[0]} rows for {vocab_size} tokens")
    shapes = {"token_ids": ("<i8", [vocab_size]), "idf": ("<f4", [vocab_size])}
    if format_version == 1:
        shapes |= {"unigram": ("<f2", [vocab_size, dims]), "bitmaps": ("<u8", [ngram, vocab_size, 2, n_words])}
    else:
        shapes |= {"rows": ("|u1", list(raw.shape)), "mean": ("<f4", [emb_dim]),
                   "directions": ("<f4", list(directions.shape))}
    if format_version == 3:
        shapes |= {"projection": ("|i1", [emb_dim, dims]), "column_scale": ("<f8", [dims])}
    elif format_version == 4:
        shapes |= {"projection": ("<f4", [emb_dim, dims])}
    if row_definition == 3:
        projection, column_scale = integer_projection(emb_dim, dims, seed)

        def project(rows: np.ndarray) -> np.ndarray:
            return project_rows_fixed(rows, mean=mean, directions=directions, projection=projection,
                                      column_scale=column_scale)
    elif row_definition == 4:
        projection = projection_matrix(emb_dim, dims, seed)

        def project(rows: np.ndarray) -> np.ndarray:
            return project_rows_exact(rows, mean=mean, directions=directions, projection=projection)
    else:
        def project(rows: np.ndarray) -> np.ndarray:
            return project_rows(rows, mean=mean, directions=directions, dims=dims, seed=seed)
    sections, offset = _section_table(shapes)
    with atomic_write(path) as tmp:
        with open(tmp, "wb"):
            pass
        reserve(tmp, max(offset, HEADER_BYTES))

        def section(name: str) -> np.ndarray:
            start, dtype, shape = sections[name]
            return np.memmap(tmp, dtype=dtype, mode="r+", offset=start, shape=tuple(shape))

        tables = _scratch_tables(tables_dir, vocab_size, dims, ngram) if tables_dir is not None else None
        if format_version == 1:
            tables = (section("unigram"), section("bitmaps"))
        nonzero = 0
        if vocab_size:
            section("token_ids")[:] = token_ids
            section("idf")[:] = idf
            if derived:
                section("rows")[:] = raw
                section("mean")[:] = mean
                if directions.size:
                    section("directions")[:] = directions
            if format_version == 3:
                section("projection")[:] = projection
                section("column_scale")[:] = column_scale
            elif format_version == 4:
                section("projection")[:] = projection
            for start in range(0, vocab_size, chunk_rows):
                stop = min(start + chunk_rows, vocab_size)
                rows = embeddings[token_ids[start:stop]]
                if derived and not np.array_equal(gguf.dequantize_rows(raw[start:stop], rows_type), rows):
                    raise ValueError(f"stored_rows ({rows_type}) do not dequantise to the embedding rows {start}..{stop}")
                projected = project(rows)
                nonzero += int(np.count_nonzero(np.abs(projected) > tau))
                if tables is not None:
                    tables[0][start:stop] = projected
                    tables[1][:, start:stop] = _rotated_bitmaps(projected, tau, ngram)
            if tables is not None:
                for array in tables:
                    array.flush()
        density = nonzero / (vocab_size * dims) if vocab_size else 0.0
        ngram_density = density ** ngram
        header = {"format_version": format_version, "dims": dims, "words": n_words, "emb_dim": emb_dim, "tau": tau,
                  "ngram": ngram, "seed": seed, "drop_components": drop_components, "vocab_size": vocab_size,
                  "density": density, "ngram_density": ngram_density, "capacity_target": CAPACITY_TARGET,
                  "m_cap": capacity(ngram_density), "c_min": max(1, round(ngram_density * dims)),
                  "row_definition": row_definition, "sections": sections}
        if derived:
            header["rows_type"] = rows_type
        if format_version == 3:
            header["fixed_point_one"] = FIXED_POINT_ONE
        with open(tmp, "r+b") as handle:
            handle.write(_header_bytes(header))
    vocab = VocabIndex.open(path)
    if derived and tables is not None:
        vocab = vocab.with_tables(*_open_scratch_tables(tables_dir))
    return vocab


_SCRATCH = ("unigram.npy", "bitmaps.npy")


def _scratch_tables(tables_dir: str | Path, vocab_size: int, dims: int, ngram: int) -> tuple[np.ndarray, np.ndarray]:
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
    if rows_type != base.header["rows_type"] or (token_ids.size and raw.shape[1] != base.embedding_rows.shape[1]):
        raise ValueError(f"new rows are {rows_type} {raw.shape[1:]}, the index holds {base.header['rows_type']} "
                         f"{base.embedding_rows.shape[1:]}")
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


@functools.lru_cache(maxsize=4)
def _shared(path: str, inode: int, mtime_ns: int, size: int) -> VocabIndex:
    return VocabIndex.open(path)


def open_shared(path: str | Path) -> VocabIndex:
    """The opened index of a file, one per file version in this process, so that whoever opens it
    shares its derived rows: an append encodes, verifies and is checked before its switch with one
    projection of its new tokens instead of three (~1.7 ms a token). A rewritten file (another
    inode, time or size) is opened anew."""
    path = Path(path).resolve()
    stat = path.stat()
    return _shared(str(path), stat.st_ino, stat.st_mtime_ns, stat.st_size)


def clear_caches() -> None:
    """Forget the module's own caches (the float64 projection of format 2 indexes, the shared
    opened indexes)."""
    _projection64.cache_clear()
    _shared.cache_clear()
