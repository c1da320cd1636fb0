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
`engine.vocab_writer` writes these files, one writer per format version.
Format 1 stored both tables: 1.19 GB for a 36,562-token vocabulary at 10,000 dims, against
~25 MB of Q8_0 rows in format 2 (docs/index-format.md says why and what it costs).

Format 4's values are format 2's, and format 1's as this code writes it (the float32 Gaussian,
products and sums in float64, rounded once to float32), computed by one kernel in one fixed order
(`kernels.project_float`), so they are exact on any machine and batch. Format 2 is format 4 without the
projection section: its rows are `project_rows` (a float64 BLAS product with `projection_matrix` built in each
process), exact only up to BLAS rounding, reading a 51 MB matrix per cold query. Format 3 stores an int8
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


def project_rows(
    rows: np.ndarray, *, mean: np.ndarray, directions: np.ndarray, dims: int, seed: int
) -> np.ndarray:
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
        kernels.fixed_point_rows(
            rows,
            np.ascontiguousarray(mean, dtype=np.float32),
            np.ascontiguousarray(directions, dtype=np.float32),
            float(FIXED_POINT_ONE),
            x,
        )
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
            arrays[name] = (
                np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=tuple(shape))
                if nbytes
                else np.zeros(shape, dtype=dtype)
            )
        if header["format_version"] == 1:
            return cls(path, header, arrays["token_ids"], arrays["idf"], arrays["unigram"], arrays["bitmaps"])
        fixed = {}
        if header["format_version"] == 3:
            fixed = {"projection": arrays["projection"], "column_scale": np.array(arrays["column_scale"])}
        elif header["format_version"] == 4:
            fixed = {"projection": arrays["projection"]}
        return cls(
            path,
            header,
            arrays["token_ids"],
            arrays["idf"],
            None,
            None,
            embedding_rows=arrays["rows"],
            mean=np.array(arrays["mean"]),
            directions=np.array(arrays["directions"]),
            **fixed,
        )

    def with_tables(self, unigram: np.ndarray, bitmaps: np.ndarray) -> VocabIndex:
        """This index with full tables attached (what a build encodes with)."""
        return dataclasses.replace(
            self,
            unigram=unigram,
            bitmaps=bitmaps,
            _cache=LRUCache(maxsize=CACHED_ROWS),
            _lock=threading.Lock(),
        )

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
            with self._lock:
                for k, i in enumerate(missing):
                    # A row of its own (astype copies): a view into a batch array would keep the whole
                    # batch alive while any one of its rows stays cached (the web grew so, bench.soak).
                    cached[i] = (projected[k].astype(np.float16), np.stack([pos[k], neg[k]]))
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
        return projected.astype(np.float16), rotated_bitmaps(projected, float(self.header["tau"]),
                                                              int(self.header["ngram"]))


def rotated_bitmaps(projected: np.ndarray, tau: float, ngram: int) -> np.ndarray:
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
