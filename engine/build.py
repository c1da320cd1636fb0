"""Index build: datasets -> vocabulary index + bitmap index + manifest in one new directory.

`build_index` runs two passes:

1. tokenize (`datasets.iter_dataset`, batched `bulk_tokenize`), drop duplicate documents (same
   blake2b content id: indexed once, first occurrence wins), count document frequencies, and
   spool token ids + records into `out_dir/.spool/`;
   then extract `token_embd.weight` (`gguf.load_token_embeddings`), project the corpus
   vocabulary into `vocab.idx` and release the embedding table;
2. encode the spooled documents in batches, append bitmaps (with token counts and source ids)
   to `corpus.idx`, hand memory records to `sink` (or `memories.sqlite`), finalize the index,
   verify it (row count; a seeded sample of documents re-encoded must give the stored bitmaps;
   files consistent with the vocabulary header), and write `manifest.json` LAST, atomically.

`out_dir` must not exist or be empty; nothing outside it is written (except the optional
embedding cache in `cache_dir`). A failure or `BuildCancelled` leaves it partial and without a
manifest: the caller deletes it. `load_corpus` refuses a directory without a manifest.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from engine import gguf
from engine.batching import batched
from engine.config import Config
from engine.datasets import DatasetIssue, DocumentRefused, iter_dataset
from engine.encoder import HDCEncoder, compute_idf, load_torch
from engine.files import atomic_write
from engine.index import BitmapIndex
from engine.loaded_build import (
    INDEX_FILE,
    MANIFEST,
    MEMORIES_DB,
    VERIFY_FILE,
    VOCAB_FILE,
    SqliteMemoryStore,
    load_corpus,
    read_manifest,
)
from engine.readers import ReadOptions
from engine.tokenizer import Tokenizer
from engine.vocab import FORMAT_VERSION, VocabIndex, open_shared
from engine.vocab_writer import write_vocab_index

logger = logging.getLogger(__name__)

BATCH_DOCS = 256
VERIFY_SAMPLE = 64
_SPOOL = ".spool"

Sink = Callable[[list[dict]], None]
Progress = Callable[[str, int, int], None]


class BuildError(RuntimeError):
    """The build cannot proceed (bad out_dir, model/tokenizer mismatch, no documents)."""


class BuildCancelled(BuildError):
    """`should_cancel()` returned True; out_dir is partial and has no manifest."""


class BuildVerificationError(BuildError):
    """A build directory whose files do not match what was built."""


@dataclass
class BuildResult:
    out_dir: Path
    documents: int
    duplicates: int
    vocab_size: int
    manifest: dict[str, Any]
    skipped: list[DatasetIssue] = field(default_factory=list)


@dataclass
class _Spool:
    tokens_path: Path
    records_path: Path
    offsets: list[int] = field(default_factory=lambda: [0])


def _check_out_dir(out_dir: Path) -> None:
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise BuildError(f"{out_dir}: out_dir must be new or an empty directory")
    out_dir.mkdir(parents=True, exist_ok=True)


def _file_digest(path: Path) -> dict[str, Any]:
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return {"bytes": path.stat().st_size, "blake2b": digest.hexdigest()}


def _index_files(out_dir: Path) -> list[Path]:
    return sorted(p for p in out_dir.iterdir() if p.name.startswith((INDEX_FILE, VOCAB_FILE)) and p.is_file())


@contextmanager
def _timed(timings: dict[str, float], phase: str) -> Iterator[None]:
    """Record the wall time of the `with` body as timings[phase] (seconds)."""
    started = time.perf_counter()
    yield
    timings[phase] = time.perf_counter() - started


@dataclass
class _Tokenized:
    """What the tokenize pass learns: per-token document frequencies and per-source counts."""

    document_frequency: np.ndarray
    sources: list[dict[str, Any]]
    skipped: list[DatasetIssue]


def _tokenize_pass(datasets: list[tuple[int, str, Path]], tokenizer: Tokenizer, chunk_size: int,
                   spool: _Spool, batch_docs: int, report: Progress, checkpoint: Callable[[], None],
                   known: Callable[[list[str]], set[str]] | None = None,
                   options: ReadOptions | None = None) -> _Tokenized:
    """Pass 1: read, deduplicate and tokenize every dataset into the spool; count document frequencies.

    `known(ids)`, when given, says which of a batch's content ids are held elsewhere already (an
    append's state): those are duplicates too. A document its reader refuses part way through (a sheet
    over the row cap, the time cap, a scan on which OCR finds no text) is taken out of the spool again
    and skipped with its reason, an issue of kind "document"; the rest of the build goes on."""
    state = _Pass(tokenizer, spool)
    skipped: list[DatasetIssue] = []
    sources = []
    with (
        open(spool.tokens_path, "wb") as state.tokens_out,
        open(spool.records_path, "w", encoding="utf-8") as state.records_out,
    ):
        for source_id, name, path in datasets:
            counts = {"source_id": source_id, "name": name, "path": str(path), "documents": 0,
                      "duplicates": 0}
            items = iter_dataset(path, tokenizer, chunk_size, errors=skipped, source=name, options=options)
            mark = state.mark()
            try:
                for batch in batched(items, batch_docs):
                    checkpoint()
                    held = known([item["id"] for item in batch]) if known is not None else set()
                    state.spool_batch(batch, held, source_id, name, path, counts)
                    report("tokenize", len(spool.offsets) - 1, 0)
            except DocumentRefused as refused:
                state.forget(mark)
                counts["documents"] = counts["duplicates"] = 0
                skipped.append(DatasetIssue(str(path), "document", 0, refused.reason))
                logger.warning("skipped document %s: %s", name, refused.reason)
            sources.append(counts)
    return _Tokenized(state.document_frequency, sources, skipped)


class _Pass:
    """The tokenize pass's state: the spool files, document frequencies and content ids seen, with a
    `mark` taken before each document so that a refused one can be taken out again (`forget`)."""

    tokens_out: Any
    records_out: Any

    def __init__(self, tokenizer: Tokenizer, spool: _Spool) -> None:
        self.tokenizer, self.spool, self.vocab_total = tokenizer, spool, int(tokenizer.vocab_size)
        self.document_frequency = np.zeros(self.vocab_total, dtype=np.int64)
        self.seen: set[str] = set()
        self.added: list[str] = []

    def mark(self) -> tuple[int, int, int]:
        self.added = []
        return self.tokens_out.tell(), self.records_out.tell(), len(self.spool.offsets)

    def spool_batch(self, batch: list[dict], held: set[str], source_id: int, name: str, path: Path,
                    counts: dict[str, Any]) -> None:
        fresh = []
        for item in batch:
            if item["id"] in self.seen or item["id"] in held:
                counts["duplicates"] += 1
            else:
                self.seen.add(item["id"])
                self.added.append(item["id"])
                fresh.append(item)
        offsets = self.spool.offsets
        for item, tokens in zip(fresh, self.tokenizer.bulk_tokenize([i["text"] for i in fresh]), strict=True):
            ids = np.asarray(tokens, dtype=np.int64)
            if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_total):
                raise BuildError(f"{path}: tokenizer returned ids outside [0, {self.vocab_total})")
            self.tokens_out.write(ids.astype("<i4").tobytes())
            offsets.append(offsets[-1] + ids.size)
            self.document_frequency += np.bincount(np.unique(ids), minlength=self.vocab_total)
            record = {"id": item["id"], "text": item["text"], "source_id": source_id,
                      "metadata": {**item.get("metadata", {}), "source": name},
                      "token_count": int(ids.size)}
            self.records_out.write(json.dumps(record, ensure_ascii=False) + "\n")
        counts["documents"] += len(fresh)

    def forget(self, mark: tuple[int, int, int]) -> None:
        """Take the documents spooled since `mark` out again: their rows, frequencies and ids."""
        tokens_at, records_at, rows = mark
        offsets = self.spool.offsets
        self.tokens_out.flush()
        tokens = np.fromfile(self.spool.tokens_path, dtype="<i4", offset=tokens_at)
        for start, end in zip(offsets[rows - 1:-1], offsets[rows:], strict=True):
            piece = tokens[start - offsets[rows - 1]:end - offsets[rows - 1]]
            self.document_frequency -= np.bincount(np.unique(piece), minlength=self.vocab_total)
        for handle, at in ((self.tokens_out, tokens_at), (self.records_out, records_at)):
            handle.seek(at)
            handle.truncate()
        del offsets[rows:]
        self.seen.difference_update(self.added)


def _corpus_vocabulary(tokenizer: Tokenizer, document_frequency: np.ndarray) -> np.ndarray:
    """Sorted global ids of the tokens that occur in the corpus, special tokens excluded."""
    special = np.zeros(document_frequency.size, dtype=bool)
    special[[i for i in tokenizer.special_ids if 0 <= i < document_frequency.size]] = True
    return np.flatnonzero((document_frequency > 0) & ~special)


def _write_vocabulary(
    out_dir: Path,
    *,
    vocabulary: np.ndarray,
    idf: np.ndarray,
    gguf_path: str | Path,
    cache_dir: str | Path | None,
    config: Config,
    vocab_total: int,
    timings: dict[str, float],
    report: Progress,
    tables_dir: Path,
    format_version: int,
) -> VocabIndex:
    """Extract the model's embedding table, write `vocab.idx` for `vocabulary`, release the table.

    Formats 2 and 3 store the vocabulary's rows as the model stores them; the full derived tables
    go to `tables_dir` (in the spool, deleted with it) for the encode pass.
    """
    with _timed(timings, "embeddings"):
        report("embeddings", 0, 1)
        embeddings = gguf.load_token_embeddings(gguf_path, cache_dir)
        if embeddings.shape[0] < vocab_total:
            raise BuildError(f"{gguf_path}: embedding table has {embeddings.shape[0]} rows, "
                             f"tokenizer vocabulary {vocab_total}")
        report("embeddings", 1, 1)
    with _timed(timings, "vocabulary"):
        report("vocabulary", 0, int(vocabulary.size))
        stored_rows = gguf.token_rows(gguf_path, vocabulary) if format_version != 1 else None
        vocab = write_vocab_index(out_dir / VOCAB_FILE, token_ids=vocabulary, idf=idf, embeddings=embeddings,
                                  dims=config.hdc_dimensions, ngram=config.hdc_ngram, seed=config.hdc_seed,
                                  drop_components=config.hdc_drop_components, stored_rows=stored_rows,
                                  tables_dir=tables_dir, format_version=format_version)
        report("vocabulary", int(vocabulary.size), int(vocabulary.size))
    return vocab


def _encode_pass(
    out_dir: Path,
    *,
    encoder: HDCEncoder,
    spool: _Spool,
    tokens: np.ndarray,
    offsets: np.ndarray,
    sink: Sink | None,
    batch_docs: int,
    report: Progress,
    checkpoint: Callable[[], None],
    row_offset: int = 0,
    texts: list[str] | None = None,
) -> None:
    """Pass 2: encode the spooled documents into `corpus.idx`; hand their records to the sink.

    A record's `hdv_idx` is its row in the corpus's state: `row_offset` plus its row in this
    directory's index (an append segment's rows follow the state's earlier ones). `texts`, when
    given, receives every record's text in row order."""
    n_docs = offsets.size - 1
    store = None if sink is not None else SqliteMemoryStore(out_dir / MEMORIES_DB)
    index = BitmapIndex.create(out_dir / INDEX_FILE, encoder.dims)
    with open(spool.records_path, encoding="utf-8") as records_in:
        for start in range(0, n_docs, batch_docs):
            checkpoint()
            stop = min(start + batch_docs, n_docs)
            lo, hi = offsets[start], offsets[stop]
            pos, neg = encoder.encode_flat(tokens[lo:hi].astype(np.int64), offsets[start:stop + 1] - lo)
            records = [json.loads(next(records_in)) for _ in range(start, stop)]
            for row, record in enumerate(records, start):
                record["hdv_idx"] = row_offset + row
            if texts is not None:
                texts.extend(r["text"] for r in records)
            index.append(pos, neg, token_counts=[r["token_count"] for r in records],
                         source_ids=[r["source_id"] for r in records])
            if sink is not None:
                sink(records)
            else:
                store.insert(records)
            report("encode", stop, n_docs)
    index.finalize()


def _write_verify_sample(out_dir: Path, tokens: np.ndarray, offsets: np.ndarray, seed: int) -> None:
    """A seeded sample of rows and their token ids, for `_verify` to re-encode."""
    n_docs = offsets.size - 1
    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(n_docs, size=min(VERIFY_SAMPLE, n_docs), replace=False))
    sample_tokens = [np.array(tokens[offsets[r]:offsets[r + 1]]) for r in sample]
    sample_offsets = np.concatenate([[0], np.cumsum([len(t) for t in sample_tokens])]).astype(np.int64)
    np.savez(out_dir / VERIFY_FILE, rows=sample, tokens=np.concatenate(sample_tokens).astype(np.int32),
             offsets=sample_offsets)


def _manifest(*, config: Config, gguf_path: str | Path, vocab: VocabIndex, offsets: np.ndarray,
              sources: list[dict[str, Any]], skipped: int, sink: Sink | None) -> dict[str, Any]:
    return {
        "format_version": vocab.format_version,
        "created": _created(),
        "dims": config.hdc_dimensions,
        "seed": config.hdc_seed,
        "ngram": config.hdc_ngram,
        "drop_components": config.hdc_drop_components,
        "chunk_size": config.chunk_size,
        "model": {"path": str(gguf_path), "fingerprint": gguf.model_fingerprint(gguf_path)},
        "documents": int(offsets.size - 1),
        "duplicates": sum(s["duplicates"] for s in sources),
        "skipped_records": skipped,
        "vocab_size": vocab.size,
        "median_doc_length": float(np.median(np.diff(offsets))),
        "encoder": {
            k: vocab.header[k]
            for k in ("emb_dim", "tau", "density", "ngram_density", "m_cap", "c_min", "capacity_target")
        },
        "sources": sources,
        "memories": "sink" if sink is not None else MEMORIES_DB,
    }


def _created() -> str:
    """A manifest's creation time: UTC, to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def _write_manifest(out_dir: Path, manifest: dict[str, Any]) -> None:
    """Write manifest.json atomically and durably: its presence marks the build complete."""
    with atomic_write(out_dir / MANIFEST) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=2, sort_keys=True)


def build_index(*, datasets: Iterable[tuple[int, str, str | Path]], out_dir: str | Path,
                gguf_path: str | Path, tokenizer: Tokenizer, config: Config, sink: Sink | None = None,
                progress: Progress | None = None, should_cancel: Callable[[], bool] | None = None,
                cache_dir: str | Path | None = None, batch_docs: int = BATCH_DOCS,
                format_version: int = FORMAT_VERSION) -> BuildResult:
    """Build a complete, verified index in `out_dir` from `datasets` = [(source_id, name, path)].

    `sink(records)` receives batches of {"id", "hdv_idx", "text", "source_id", "metadata",
    "token_count"} in row order (without a sink they go to `out_dir/memories.sqlite`).
    `progress(phase, done, total)` is called once per batch; phases: "tokenize" (documents,
    total 0 = unknown), "embeddings", "vocabulary", "encode" and "verify" (documents of total).
    `should_cancel()` is polled between batches and raises `BuildCancelled`. `format_version=1`
    writes the format that stores the derived tables, 2 the previous derived one (for comparisons;
    see `engine.vocab`).
    """
    load_torch()  # before the first numba kernel: see its docstring
    out_dir = Path(out_dir)
    datasets = [(int(source_id), str(name), Path(path)) for source_id, name, path in datasets]
    if not datasets:
        raise BuildError("no datasets given")
    if len({d[0] for d in datasets}) != len(datasets):
        raise BuildError(f"source ids must be unique, got {[d[0] for d in datasets]}")
    _check_out_dir(out_dir)
    report = progress or (lambda phase, done, total: None)

    def checkpoint() -> None:
        if should_cancel is not None and should_cancel():
            raise BuildCancelled(f"build of {out_dir} cancelled")

    timings: dict[str, float] = {}
    spool_dir = out_dir / _SPOOL
    spool_dir.mkdir()
    spool = _Spool(spool_dir / "tokens.i32", spool_dir / "records.jsonl")
    with _timed(timings, "tokenize"):
        tokenized = _tokenize_pass(datasets, tokenizer, config.chunk_size, spool, batch_docs, report,
                                   checkpoint, options=ReadOptions(ocr=config.ocr))
    offsets = np.asarray(spool.offsets, dtype=np.int64)
    n_docs = offsets.size - 1
    if n_docs == 0:
        raise BuildError(f"no documents found in {[str(d[2]) for d in datasets]}")
    checkpoint()
    vocabulary = _corpus_vocabulary(tokenizer, tokenized.document_frequency)
    idf = compute_idf(tokenized.document_frequency[vocabulary], n_docs)
    vocab = _write_vocabulary(out_dir, vocabulary=vocabulary, idf=idf, gguf_path=gguf_path,
                              cache_dir=cache_dir, config=config, vocab_total=int(tokenizer.vocab_size),
                              timings=timings, report=report, tables_dir=spool_dir / "tables",
                              format_version=format_version)
    # Memory-mapped: a large corpus's token ids never need to fit in RAM at once.
    tokens = np.memmap(spool.tokens_path, dtype="<i4", mode="r") if offsets[-1] else np.zeros(0, np.int32)
    with _timed(timings, "encode"):
        _encode_pass(out_dir, encoder=HDCEncoder(vocab), spool=spool, tokens=tokens, offsets=offsets,
                     sink=sink, batch_docs=batch_docs, report=report, checkpoint=checkpoint)
    with _timed(timings, "verify"):
        _write_verify_sample(out_dir, tokens, offsets, config.hdc_seed)
        del tokens
        shutil.rmtree(spool_dir)
        manifest = _manifest(config=config, gguf_path=gguf_path, vocab=vocab, offsets=offsets,
                             sources=tokenized.sources, skipped=len(tokenized.skipped), sink=sink)
        _seal(out_dir, manifest, report)
    return _complete(out_dir, manifest, timings, tokenized.skipped)


def _seal(out_dir: Path, manifest: dict[str, Any], report: Progress) -> None:
    """Record the index files' digests in the manifest and verify the directory against it."""
    manifest["files"] = {p.name: _file_digest(p) for p in _index_files(out_dir)}
    _verify(out_dir, manifest, check_hashes=False)
    report("verify", manifest["documents"], manifest["documents"])


def _complete(out_dir: Path, manifest: dict[str, Any], timings: dict[str, float],
              skipped: list[DatasetIssue]) -> BuildResult:
    """Write the manifest, last: from now on the directory is a complete, verified build."""
    manifest["timings"] = {k: round(v, 3) for k, v in timings.items()}
    _write_manifest(out_dir, manifest)
    return BuildResult(out_dir=out_dir, documents=manifest["documents"], duplicates=manifest["duplicates"],
                       vocab_size=manifest["vocab_size"], manifest=manifest, skipped=skipped)


def _verify(build_dir: Path, manifest: dict[str, Any], *, check_hashes: bool) -> None:
    encoder = HDCEncoder(open_shared(build_dir / VOCAB_FILE))
    index = BitmapIndex.open(build_dir / INDEX_FILE)
    if index.count != manifest["documents"]:
        raise BuildVerificationError(
            f"{build_dir}: index holds {index.count} rows, manifest {manifest['documents']}"
        )
    header = (encoder.dims, encoder.ngram, encoder.seed, encoder.vocab.size)
    if (
        header != (manifest["dims"], manifest["ngram"], manifest["seed"], manifest["vocab_size"])
        or index.dims != encoder.dims
    ):
        raise BuildVerificationError(f"{build_dir}: vocabulary index (dims, ngram, seed, vocab) = {header} "
                                     f"disagrees with the manifest")
    if sum(s["documents"] for s in manifest["sources"]) != index.count:
        raise BuildVerificationError(f"{build_dir}: per-source counts do not add up to {index.count}")
    if check_hashes:
        for name, expected in manifest["files"].items():
            path = build_dir / name
            if not path.exists() or _file_digest(path) != expected:
                raise BuildVerificationError(
                    f"{path}: content differs from the manifest (corrupted or replaced)"
                )
    with np.load(build_dir / VERIFY_FILE) as sample:
        rows, flat, offsets = sample["rows"], sample["tokens"].astype(np.int64), sample["offsets"]
    pos, neg = encoder.encode_flat(flat, offsets)
    stored_pos, stored_neg = index.get_bitmaps(rows)
    bad = np.flatnonzero(np.any(pos != stored_pos, axis=1) | np.any(neg != stored_neg, axis=1))
    if bad.size:
        raise BuildVerificationError(
            f"{build_dir}: re-encoded rows {rows[bad][:10].tolist()} differ from the stored bitmaps"
        )


def verify_build(build_dir: str | Path, *, check_hashes: bool = True) -> dict[str, Any]:
    """Re-check a finished build (manifest, file digests, sample re-encoding); returns the manifest."""
    build_dir = Path(build_dir)
    manifest = read_manifest(build_dir)
    _verify(build_dir, manifest, check_hashes=check_hashes)
    load_corpus(build_dir)
    return manifest
