"""A finished HDC build's chunks in the multi-vector store's text collection, and their exact MaxSim scores.

`text_store_fill` encodes every memory row of a build with a `TokenVectorEncoder` (the GGUF's
token embeddings) and upserts it into a `ChromaClient`'s text collection, so the corpus can be
searched by late interaction beside HDC.

Records (storage contract ids and fields, plus ours):

    id          "build{build_id}-source{source_id}-chunk{n:04d}"; n counts the source's rows
                in this build from 0 (the contract's chunk_id)
    doc_id      "build{build_id}-source{source_id}": one document per (build, dataset), so
                `ChromaClient.delete_document` removes one dataset of one build
    row         the HDC memory row (`hdv_idx`) of the build: the key that maps a record back
    index_build str(build_id); origin "hdc_build"; source_id; memory_id; token_count;
                vector_encoder (`TokenVectorEncoder.signature`)
    filename / source_path   the dataset's name / path from the build manifest
    text        the chunk (the store keeps text_preview and word_count)

Beside the store, the fill writes `late.npz` into the build directory (`LATE_FILE`): each row's
content token ids, its summary norm and the weighted token rows of the vocabulary it uses. From it
`LateInteractionChannel` computes the exact MaxSim of any rows for a query in milliseconds, the
scores the store's second stage computes, without the store's first stage (which can miss rows)
and without a round trip to Chroma: it is the `LATE_INTERACTION` channel (`engine.channels`), which
re-scores HDC's candidates in a search's first stage (`engine.stages`).

Ids carry the build, so filling a new build never touches the records of the build that is
serving: search filters on `index_build`, and once the new build is active,
`text_store_prune(keep_build_ids=[new])` removes the older builds' records. A failed or
cancelled fill deletes what it wrote before re-raising. Records of another origin (written
through the store's own API) are never pruned.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine import gguf
from engine.build import BuildCancelled
from engine.channels import FIRST, LATE_INTERACTION, Gate, RowFilter
from engine.loaded_build import LoadedIndex, MemoryRecord, MemoryStore
from engine.multivector import ChromaClient
from engine.multivector.late_interaction import maxsim_many
from engine.multivector.token_vectors import EmptySequenceError, TokenVectorEncoder
from engine.tokenizer import Tokenizer

ORIGIN = "hdc_build"
PHASE = "text_store"
LATE_FILE = "late.npz"
BATCH_ROWS = 64
_BUILD_ID = re.compile(r"^[A-Za-z0-9_.]+$")

Progress = Callable[[str, int, int], None]


class TextStoreError(RuntimeError):
    """The build and its memory store disagree (rows missing), or a build id is unusable."""


@dataclass
class TextStoreResult:
    records: int
    skipped_rows: list[int] = field(default_factory=list)  # rows with no content token: no record
    doc_ids: list[str] = field(default_factory=list)


def _check_build_id(build_id: str | int) -> str:
    text = str(build_id)
    if not _BUILD_ID.match(text):
        raise TextStoreError(f"build_id must be letters, digits, '_' or '.', got {build_id!r}")
    return text


def text_doc_id(build_id: str | int, source_id: int) -> str:
    """The store doc_id of one dataset's chunks in one build: "build{build_id}-source{source_id}"."""
    return f"build{_check_build_id(build_id)}-source{int(source_id)}"


def text_encoder_for(
    corpus: LoadedIndex,
    *,
    gguf_path: str | Path,
    tokenizer: Tokenizer,
    cache_dir: str | Path | None = None,
    dim: int = 768,
    **options: Any,
) -> TokenVectorEncoder:
    """The `TokenVectorEncoder` of a build: its GGUF's token embeddings (memory-mapped from
    `cache_dir` when given), IDF from the build's vocabulary, the tokenizer's special ids dropped.

    Fill and search must use encoders made the same way; `dim` is the store's width.
    """
    embeddings = gguf.load_token_embeddings(gguf_path, cache_dir)
    special = getattr(tokenizer, "special_ids", ())
    return TokenVectorEncoder.for_corpus(corpus, embeddings, special_ids=special, dim=dim, **options)


def text_store_fill(
    *,
    store: ChromaClient,
    corpus: LoadedIndex,
    encoder: TokenVectorEncoder,
    tokenizer: Tokenizer,
    build_id: str | int,
    memories: MemoryStore | None = None,
    progress: Progress | None = None,
    should_cancel: Callable[[], bool] | None = None,
    batch_rows: int = BATCH_ROWS,
) -> TextStoreResult:
    """Upsert one text record per memory row of `corpus` (a finished build) into `store`.

    Texts come from `memories` (default: the build's own `corpus.store`), rows in order.
    `progress(PHASE, done_rows, total_rows)` after each batch; `should_cancel()` is polled
    between batches and raises `BuildCancelled`. On any error this build's records are deleted
    (best effort) and the error re-raised. Re-running a fill of the same build is idempotent.
    """
    build = _check_build_id(build_id)
    if encoder.dim != store.dim:
        raise TextStoreError(f"encoder dim {encoder.dim} differs from the store's {store.dim}")
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
    memories = memories if memories is not None else corpus.store
    if memories is None:
        raise TextStoreError(f"{corpus.build_dir}: the build has no memory store of its own; pass memories=")
    report = progress or (lambda phase, done, total: None)
    fill = _Fill(store=store, encoder=encoder, build=build, total=corpus.count,
                 sources={int(s["source_id"]): s for s in corpus.manifest.get("sources", [])},
                 source_ids=np.asarray(corpus.index.source_ids))
    try:
        report(PHASE, 0, fill.total)
        for start in range(0, fill.total, batch_rows):
            if should_cancel is not None and should_cancel():
                raise BuildCancelled(f"filling the text store from {corpus.build_dir} cancelled")
            rows = list(range(start, min(start + batch_rows, fill.total)))
            fill.upsert(fill.records(rows, memories, tokenizer))
            report(PHASE, rows[-1] + 1, fill.total)
        if corpus.build_dir is not None:
            _write_late_file(Path(corpus.build_dir) / LATE_FILE, encoder=encoder, row_ids=fill.row_ids,
                             norms=fill.norms)
    except BaseException as error:
        try:
            text_store_delete_build(store=store, build_id=build)
        except Exception as cleanup:  # the original error matters more; keep both visible
            error.add_note(f"deleting the partial records of build {build} failed too: {cleanup}")
        raise
    return fill.result


# One store document's records of a batch: (chunk ids, token vector sequences, metadata).
_DocRecords = tuple[list[int], list[np.ndarray], list[dict]]


class _Fill:
    """One fill's progress: each source's next chunk number, each row's content token ids and
    summary norm (for `LATE_FILE`), and the result so far."""

    def __init__(self, *, store: ChromaClient, encoder: TokenVectorEncoder, build: str, total: int,
                 sources: dict[int, dict], source_ids: np.ndarray) -> None:
        self.store, self.encoder, self.build, self.total = store, encoder, build, total
        self.sources, self.source_ids = sources, source_ids
        self.ordinals: dict[int, int] = {}
        self.result = TextStoreResult(records=0)
        self.row_ids: list[np.ndarray] = [np.zeros(0, np.int64)] * total
        self.norms = np.zeros(total, dtype=np.float32)

    def records(self, rows: list[int], memories: MemoryStore, tokenizer: Tokenizer) -> dict[str, _DocRecords]:
        """The records of `rows` (a row without a content token has none: it is skipped), by store
        document; a row the memory store lacks is a TextStoreError."""
        found = memories.get_memories(rows)
        missing = [row for row in rows if row not in found]
        if missing:
            raise TextStoreError(f"the memory store lacks rows {missing[:10]} of build {self.build}")
        texts = [found[row].text for row in rows]
        by_doc: dict[str, _DocRecords] = {}
        for row, text, tokens in zip(rows, texts, tokenizer.bulk_tokenize(texts), strict=True):
            try:
                sequence = self.encoder.encode(tokens)
            except EmptySequenceError:
                self.result.skipped_rows.append(row)
                continue
            self.row_ids[row] = self.encoder.content_ids(tokens)
            self.norms[row] = np.linalg.norm(sequence[1:].sum(axis=0))
            source_id = int(self.source_ids[row])
            chunk_id = self.ordinals.get(source_id, 0)
            self.ordinals[source_id] = chunk_id + 1
            chunk_ids, sequences, fields = by_doc.setdefault(text_doc_id(self.build, source_id), ([], [], []))
            chunk_ids.append(chunk_id)
            sequences.append(sequence)
            fields.append(self.metadata(row, text, found[row], source_id))
        return by_doc

    def metadata(self, row: int, text: str, memory: MemoryRecord, source_id: int) -> dict[str, Any]:
        source = self.sources.get(source_id, {})
        return {
            "filename": str(source.get("name") or f"source {source_id}"),
            "source_path": str(source.get("path", "")),
            "text": text, "row": row, "source_id": source_id, "index_build": self.build, "origin": ORIGIN,
            "memory_id": memory.content_hash, "token_count": memory.token_count,
            "vector_encoder": self.encoder.signature,
        }

    def upsert(self, by_doc: dict[str, _DocRecords]) -> None:
        for doc_id, (chunk_ids, sequences, fields) in by_doc.items():
            self.store.add_batch_text(doc_id, chunk_ids, sequences, fields)
            self.result.records += len(chunk_ids)
            if doc_id not in self.result.doc_ids:
                self.result.doc_ids.append(doc_id)


def _delete_where(store: ChromaClient, where: dict[str, Any], what: str) -> int:
    collection = store.chroma_collection("text")
    with store.guarded(f"delete text records of {what}"):
        ids = collection.get(where=where, include=[])["ids"]
        for start in range(0, len(ids), 5000):
            collection.delete(ids=ids[start:start + 5000])
    return len(ids)


def text_store_delete_build(*, store: ChromaClient, build_id: str | int) -> int:
    """Delete every record a fill of `build_id` wrote → how many were deleted."""
    build = _check_build_id(build_id)
    return _delete_where(store, {"$and": [{"origin": ORIGIN}, {"index_build": build}]}, f"build {build}")


def text_store_prune(*, store: ChromaClient, keep_build_ids: Iterable[str | int]) -> int:
    """Delete the records of every build not in `keep_build_ids` (after a switch) → count."""
    keep = sorted({_check_build_id(b) for b in keep_build_ids})
    where: dict[str, Any] = {"origin": ORIGIN}
    if keep:
        where = {"$and": [where, {"index_build": {"$nin": keep}}]}
    return _delete_where(store, where, f"builds other than {keep}")


def text_store_delete_source(*, store: ChromaClient, source_id: int) -> int:
    """Delete one dataset's records in every build (the dataset was deleted) → count."""
    where = {"$and": [{"origin": ORIGIN}, {"source_id": int(source_id)}]}
    return _delete_where(store, where, f"source {int(source_id)}")


def _write_late_file(
    path: Path, *, encoder: TokenVectorEncoder, row_ids: list[np.ndarray], norms: np.ndarray
) -> None:
    """`LATE_FILE`: ids (n,) int32 local vocabulary positions of every row's content tokens, offsets
    (rows + 1,) int64, norms (rows,) float32 (a row's summary before normalisation; 0: no sequence),
    vocab (v,) int64 token ids, vectors (v, dim) float16 their weighted rows, the encoder signature."""
    offsets = np.zeros(len(row_ids) + 1, dtype=np.int64)
    np.cumsum([ids.size for ids in row_ids], out=offsets[1:])
    flat = np.concatenate(row_ids) if row_ids else np.zeros(0, np.int64)
    vocab, local = np.unique(flat, return_inverse=True)
    vectors = (
        np.concatenate(
            [encoder.token_rows(vocab[start : start + 4096]) for start in range(0, vocab.size, 4096)]
        )
        if vocab.size
        else np.zeros((0, encoder.dim), np.float32)
    )
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, ids=local.astype(np.int32), offsets=offsets, norms=norms, vocab=vocab,
             vectors=vectors.astype(np.float16), signature=np.array(encoder.signature))
    tmp.replace(path)


class LateInteractionChannel:
    """Exact MaxSim of a build's rows for a query, from its `LATE_FILE` (see the module docstring):
    the `LATE_INTERACTION` channel, which re-scores HDC's candidates and brings none of its own.

    score(query, row) = sum over the query's rows q_i of max(max_j q_i . v_j, q_i . summary), v_j
    the row's token vectors and summary their normalised sum: what `maxsim_many` gives on the
    sequences the store holds (within float16 rounding of the stored vectors). Thread-safe.
    """

    name = LATE_INTERACTION
    file = LATE_FILE
    # Where no rule beats HDC alone significantly, it is left out: fused at equal RRF weight, late
    # interaction lowered HDC's recall@10 on a held-out glossary set (`engine.fusion`).
    gate = Gate(stage=FIRST, candidates=0, fallback="hdc")

    def __init__(self, path: str | Path, *, encoder: TokenVectorEncoder, tokenizer: Tokenizer) -> None:
        with np.load(path) as data:
            if str(data["signature"]) != encoder.signature:
                raise TextStoreError(f"{path}: written by encoder {str(data['signature'])!r}, "
                                     f"not {encoder.signature!r}")
            self.ids, self.offsets, self.norms = data["ids"], data["offsets"], data["norms"]
            self.vocab, self.vectors = data["vocab"], data["vectors"]  # float16: 1.5 kB per token
        self.encoder, self.tokenizer = encoder, tokenizer
        self.count = self.offsets.size - 1

    @classmethod
    def for_build(cls, corpus: LoadedIndex, *, encoder: TokenVectorEncoder, tokenizer: Tokenizer
                  ) -> LateInteractionChannel | None:
        """The channel of a build whose fill wrote `LATE_FILE`; None for a build without one."""
        path = Path(corpus.build_dir) / LATE_FILE if corpus.build_dir is not None else None
        return (
            cls(path, encoder=encoder, tokenizer=tokenizer) if path is not None and path.is_file() else None
        )

    def _query(self, query: str) -> np.ndarray | None:
        """The query's sequence (1 + k, dim), as `encoder.encode` makes it, with the rows of tokens
        the build uses read from its table (deriving a row from the embeddings costs more than all
        the rest of a scoring); None without content tokens."""
        ids = self.encoder.content_ids(self.tokenizer.tokenize(query))
        if ids.size == 0:
            return None
        at = np.minimum(np.searchsorted(self.vocab, ids), max(self.vocab.size - 1, 0))
        known = self.vocab[at] == ids if self.vocab.size else np.zeros(ids.size, dtype=bool)
        rows = np.empty((ids.size, self.encoder.dim), dtype=np.float32)
        rows[known] = self.vectors[at[known]]
        if not known.all():
            rows[~known] = self.encoder.token_rows(ids[~known])
        summary = rows.sum(axis=0)
        norm = float(np.linalg.norm(summary))
        return np.vstack([summary / norm, rows]) if norm > 0 else None

    def score_rows(self, query: str, rows: np.ndarray | Iterable[int]) -> np.ndarray:
        """MaxSim scores (m,) float64 of `rows` (m,); nan for a row without a sequence (none of its
        tokens is content, or outside the build), and everywhere for a query without content tokens."""
        rows = np.asarray(list(rows) if not isinstance(rows, np.ndarray) else rows, dtype=np.int64)
        out = np.full(rows.shape[0], np.nan)
        query_rows = self._query(query)
        inside = (rows >= 0) & (rows < self.count)
        starts = np.where(inside, self.offsets[np.clip(rows, 0, self.count - 1)], 0)
        lengths = np.where(inside, self.offsets[np.clip(rows, 0, self.count - 1) + 1] - starts, 0)
        scored = lengths > 0
        if query_rows is None or not scored.any():
            return out
        starts, lengths = starts[scored], lengths[scored]
        segments = np.zeros(lengths.size, dtype=np.int64)
        np.cumsum(lengths[:-1], out=segments[1:])
        flat = self.ids[np.repeat(starts - segments, lengths) + np.arange(int(lengths.sum()))]
        vocab, local = np.unique(flat, return_inverse=True)
        by_token = (query_rows @ self.vectors[vocab].astype(np.float32).T)[
            :, local
        ]  # (q, tokens of all rows)
        best = np.maximum.reduceat(by_token, segments, axis=1)
        summary = np.add.reduceat(by_token, segments, axis=1) / self.norms[rows[scored]]
        out[scored] = np.maximum(best, summary).sum(axis=0, dtype=np.float64)
        return out

    def score_texts(self, query: str, texts: list[str]) -> np.ndarray:
        """MaxSim scores (n,) float64 of texts that are not rows (encoded as the fill would); nan for
        a text without content tokens, and everywhere for a query without them."""
        out = np.full(len(texts), np.nan)
        try:
            query_rows = self.encoder.encode(self.tokenizer.tokenize(query))
        except EmptySequenceError:
            return out
        for number, tokens in enumerate(self.tokenizer.bulk_tokenize(texts) if texts else []):
            try:
                out[number] = float(maxsim_many(query_rows, [self.encoder.encode(tokens)])[0])
            except EmptySequenceError:
                continue
        return out

    def query(self, query: str) -> LateInteractionQuery:
        return LateInteractionQuery(self, query)


class LateInteractionQuery:
    """`LateInteractionChannel` bound to one query (`engine.channels.ChannelQuery`)."""

    def __init__(self, channel: LateInteractionChannel, query: str) -> None:
        self._channel, self._query = channel, query

    def scores(self, rows: np.ndarray) -> np.ndarray:
        return self._channel.score_rows(self._query, rows)

    def best(self, k: int, keep: RowFilter | None = None) -> np.ndarray:
        return np.zeros(0, dtype=np.int64)  # it re-scores HDC's candidates only

    def text_scores(self, texts: Sequence[str]) -> np.ndarray:
        return self._channel.score_texts(self._query, list(texts))
