"""Segments: a corpus's searchable state as one base build plus append segments (docs/segments.md).

A segment is a build directory in `engine.build`'s format, written once and never changed. A full
build writes a base segment; `append_segment` writes a small one holding only new documents,
encoded with the state's **frozen** statistics: its `vocab.idx` is the previous segment's
vocabulary with the new documents' unseen tokens added (`vocab_writer.extend_vocab_index`), every
earlier value unchanged, so its rows are comparable with the old ones and any text made of
earlier tokens encodes bit for bit as before. The newest segment's vocabulary is therefore the
state's: a query is encoded once, with it, and searched in every segment.

Rows are numbered across the state: an append's row r is the state's row `row_offset + r`, where
`row_offset` is the number of rows before it, so (state, row) names a memory as (build, row) does
for one build. `load_state` opens a list of segment directories as one `LoadedIndex` whose index
(`SegmentedIndex`) searches every segment and merges their results (best score first, lower row
first on ties: exactly one index's order over the same rows), and `SegmentedWordIndex` scores
BM25 with the statistics of all segments together (document count, document frequencies and mean
length summed), as one word index over the same rows would.

New tokens get an IDF when they first appear, by `encoder.compute_idf` over the state's document
count after the append, and keep it. What the state loses until a merge (a full build of its live
datasets) is the drift of the frozen statistics; `append_segment` records the share of the new
documents' token occurrences that are new tokens (`oov_share`) in the manifest, to decide when to merge.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine import gguf, topk
from engine.build import (
    _SPOOL,
    BATCH_DOCS,
    BuildCancelled,
    BuildError,
    BuildResult,
    Progress,
    Sink,
    _check_out_dir,
    _complete,
    _corpus_vocabulary,
    _created,
    _encode_pass,
    _seal,
    _Spool,
    _timed,
    _tokenize_pass,
    _Tokenized,
    _write_verify_sample,
)
from engine.encoder import HDCEncoder, compute_idf, load_torch
from engine.index import BitmapIndex
from engine.index_search import (
    DEFAULT_SAMPLE_CHUNKS,
    DEFAULT_SHORTLIST,
    SAMPLED_SEARCH_MIN_ROWS,
    SHORTLIST_PER_RESULT,
)
from engine.lexical import WORDS_FILE, WordChannel, WordIndex, bm25_weights, words
from engine.loaded_build import VOCAB_FILE, CorpusError, LoadedIndex, load_corpus, read_manifest
from engine.readers import ReadOptions
from engine.tokenizer import Tokenizer
from engine.vocab import VocabIndex
from engine.vocab_writer import extend_vocab_index

SEGMENT = "segment"  # manifest key: {"kind": "base" | "append", "row_offset", "previous"}
# A segment of at most this many rows (an append) is scored in one gather of all its rows: the
# index's chunked search launches a parallel kernel per column chunk, ~10 ms for 300 rows at
# 10,000 dims, where one gather takes 0.35 ms (same rows, same order).
SMALL_SEGMENT_ROWS = 4096


def segment_info(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest's segment entry; a build written before segments is a base at row 0."""
    return manifest.get(SEGMENT) or {"kind": "base", "row_offset": 0, "previous": None}


class SegmentedIndex:
    """Several `BitmapIndex` files searched as one, rows numbered across them (see the module
    docstring). Searches return what one index holding the same rows in the same order returns
    (`search_auto` decides sampled or exact per segment, by the segment's own size)."""

    def __init__(self, parts: Sequence[BitmapIndex]) -> None:
        if not parts:
            raise ValueError("a segmented index needs at least one segment")
        if len({p.dims for p in parts}) != 1:
            raise ValueError(f"segments must share dims, got {[p.dims for p in parts]}")
        self.parts = list(parts)
        self.offsets = np.concatenate([[0], np.cumsum([p.count for p in parts])]).astype(np.int64)
        self.dims = parts[0].dims
        self.words = parts[0].words
        self.count = int(self.offsets[-1])

    @property
    def source_ids(self) -> np.ndarray:
        return np.concatenate([p.source_ids for p in self.parts])

    def _split(self, rows: np.ndarray | Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
        """State rows (m,) -> (segment number (m,), local row (m,)); IndexError outside [0, count)."""
        rows = np.asarray(list(rows) if not isinstance(rows, np.ndarray) else rows, dtype=np.int64)
        rows = rows.reshape(-1)
        if rows.size and (rows.min() < 0 or rows.max() >= self.count):
            raise IndexError(f"rows must lie in [0, {self.count})")
        part = np.searchsorted(self.offsets, rows, side="right") - 1
        return part, rows - self.offsets[part]

    def _merged(self, k: int, found: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        rows = np.concatenate([r.astype(np.int64) + self.offsets[i] for i, (r, _) in enumerate(found)])
        scores = np.concatenate([s.astype(np.int64) for _, s in found])
        if rows.size == 0:
            return topk.empty_result()
        order = np.lexsort((rows, -scores))[:k]
        return rows[order], scores[order].astype(np.int32)

    def _each(self, method: str, q_pos: np.ndarray, q_neg: np.ndarray, k: int, row_mask: np.ndarray | None,
              **options: Any) -> tuple[np.ndarray, np.ndarray]:
        if row_mask is not None:
            row_mask = np.asarray(row_mask, dtype=bool)
            if row_mask.shape != (self.count,):
                raise ValueError(f"row_mask must have shape ({self.count},), got {row_mask.shape}")
        found = []
        for number, part in enumerate(self.parts):
            if part.count == 0:
                found.append((np.zeros(0, np.int64), np.zeros(0, np.int32)))
                continue
            mask = None if row_mask is None else row_mask[self.offsets[number]:self.offsets[number + 1]]
            if part.count <= SMALL_SEGMENT_ROWS:
                found.append(_search_small(part, q_pos, q_neg, k, options.get("allowed_sources"), mask))
                continue
            extra = {} if mask is None else {"row_mask": mask}
            found.append(getattr(part, method)(q_pos, q_neg, min(k, part.count), **options, **extra))
        return self._merged(k, found)

    def search(self, q_pos: np.ndarray, q_neg: np.ndarray, k: int, *,
               allowed_sources: Iterable[int] | None = None,
               row_mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """`BitmapIndex.search` over every segment (exact)."""
        return self._each("search", q_pos, q_neg, k, row_mask, allowed_sources=allowed_sources)

    def search_exact(self, q_pos: np.ndarray, q_neg: np.ndarray, k: int, *,
                     allowed_sources: Iterable[int] | None = None,
                     row_mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self._each("search_exact", q_pos, q_neg, k, row_mask, allowed_sources=allowed_sources)

    def search_auto(self, q_pos: np.ndarray, q_neg: np.ndarray, k: int, *,
                    allowed_sources: Iterable[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """`BitmapIndex.search_auto` decided by the state's size, not each segment's: from
        SAMPLED_SEARCH_MIN_ROWS rows on, every segment is searched sampled (a segment no larger
        than the shortlist is searched exactly by `search_sampled` itself), so ten segments of a
        large corpus read what one would, instead of scanning each in full."""
        if self.count >= SAMPLED_SEARCH_MIN_ROWS:
            return self.search_sampled(q_pos, q_neg, k, allowed_sources=allowed_sources)
        return self._each("search", q_pos, q_neg, k, None, allowed_sources=allowed_sources)

    def search_sampled(self, q_pos: np.ndarray, q_neg: np.ndarray, k: int, *,
                       sample_chunks: int = DEFAULT_SAMPLE_CHUNKS, shortlist: int | None = None,
                       allowed_sources: Iterable[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """`BitmapIndex.search_sampled` over the state as over one index: every segment's first
        pass (`sample_scores`; a small one's in one gather of its rows), one shortlist of the best
        partial scores across them (from the sum of their histograms: no copy of the partial
        scores), re-ranked exactly on the chunks the first pass left. So ten segments read what one
        index of their rows reads, and find the same rows."""
        shortlist = shortlist if shortlist is not None else max(DEFAULT_SHORTLIST, SHORTLIST_PER_RESULT * k)
        found, passes = [], []
        for number, part in enumerate(self.parts):
            if part.count:
                passes.append((number, *part.sample_scores(q_pos, q_neg, sample_chunks=sample_chunks,
                                                             allowed_sources=allowed_sources)))
        if passes:
            # The shortlist-th best partial score over every segment, all rows above it, then its ties
            # lower state row first: the shortlist one index of the same rows picks
            # (`topk.rows_at_least`). Every segment's histogram has the same bins (one query, one lo).
            lo = passes[0][3]
            hist = np.sum([h for _, _, h, _ in passes], axis=0)
            kth = max(topk.kth_value(hist, lo, shortlist), lo)
            ties_left = shortlist - int(hist[kth - lo + 1:].sum())
            for number, partial, _, _ in passes:
                rows = topk.rows_at_least(
                    partial, kth, int(np.count_nonzero(partial > kth)) + max(ties_left, 0)
                )
                ties_left -= int(np.count_nonzero(partial[rows] == kth))
                if rows.size:
                    scores = partial[rows].astype(np.int64) + self.parts[number].score_rows(
                        rows, q_pos, q_neg, first_chunk=sample_chunks)
                    found.append((rows + self.offsets[number], scores))
        if not found:
            return topk.empty_result()
        rows = np.concatenate([r for r, _ in found])
        scores = np.concatenate([s for _, s in found])
        order = np.lexsort((rows, -scores))[:k]
        return rows[order], scores[order].astype(np.int32)

    def score_rows(
        self, rows: np.ndarray | Iterable[int], q_pos: np.ndarray, q_neg: np.ndarray
    ) -> np.ndarray:
        """Exact ternary scores int64 (m,) of the given state rows (m,) for the query."""
        part, local = self._split(rows)
        out = np.zeros(local.size, dtype=np.int64)
        for number in np.unique(part):
            at = np.flatnonzero(part == number)
            out[at] = self.parts[number].score_rows(local[at], q_pos, q_neg)
        return out

    def get_bitmaps(self, rows: np.ndarray | Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
        """Shapes: rows (m,) state rows → (pos, neg) uint64 (m, words)."""
        part, local = self._split(rows)
        pos = np.empty((local.size, self.words), dtype=np.uint64)
        neg = np.empty_like(pos)
        for number in np.unique(part):
            at = np.flatnonzero(part == number)
            pos[at], neg[at] = self.parts[number].get_bitmaps(local[at])
        return pos, neg


def _search_small(part: BitmapIndex, q_pos: np.ndarray, q_neg: np.ndarray, k: int,
                  allowed_sources: Iterable[int] | None,
                  row_mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The exact top k of a small segment from one gather of its rows (see SMALL_SEGMENT_ROWS):
    the same rows and scores as `BitmapIndex.search_exact`, ties to the lower row."""
    rows = np.arange(part.count, dtype=np.int64)
    keep = np.ones(part.count, dtype=bool)
    if allowed_sources is not None:
        keep &= np.isin(part.source_ids, np.fromiter(allowed_sources, dtype=np.int64))
    if row_mask is not None:
        keep &= row_mask
    rows = rows[keep]
    if rows.size == 0 or k == 0:
        return topk.empty_result()
    scores = part.score_rows(rows, q_pos, q_neg)
    order = np.lexsort((rows, -scores))[:k]
    return rows[order], scores[order].astype(np.int32)


class SegmentedWordIndex(WordChannel):
    """BM25 over the rows of several segments' word indexes (`engine.lexical.WordIndex`), with the
    statistics of all of them together: the scores one index over the same rows gives (up to the
    rounding of float sums). The `WORDS` channel as `WordIndex` is (`score_all`, `score_rows`,
    `score_texts`)."""

    def __init__(self, parts: Sequence[WordIndex], offsets: Sequence[int]) -> None:
        if len(offsets) != len(parts) + 1:
            raise ValueError("one offset per segment and the total expected")
        self.parts = list(parts)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        counts = [p.count for p in parts]
        if list(np.diff(self.offsets)) != counts:
            raise ValueError(
                f"word indexes hold {counts} rows, the segments {np.diff(self.offsets).tolist()}"
            )
        self.count = int(self.offsets[-1])
        total_length = sum(float(p.lengths.astype(np.float64).sum()) for p in parts)
        self.average_length = total_length / self.count if self.count and total_length else 1.0

    def _statistics(self, query: str) -> tuple[list[str], np.ndarray]:
        """The query's words that some segment indexed, and their idf over all segments."""
        frequency: dict[str, int] = {}
        asked = set(words(query))
        for part in self.parts:
            for word in asked:
                number = part.vocabulary.get(word)
                if number is not None:
                    frequency[word] = frequency.get(word, 0) + int(
                        part.starts[number + 1] - part.starts[number]
                    )
        found = sorted(frequency)
        df = np.array([frequency[w] for w in found], dtype=np.float64)
        return found, np.log1p((self.count - df + 0.5) / (df + 0.5))

    def _part_scores(self, number: int, found: list[str], idf: np.ndarray) -> np.ndarray:
        """BM25 scores (rows of segment `number`,) float64 of its rows, under every segment's statistics."""
        part = self.parts[number]
        scores = np.zeros(part.count)
        for word, weight in zip(found, idf, strict=True):
            local = part.vocabulary.get(word)
            if local is not None:
                span = slice(part.starts[local], part.starts[local + 1])
                hits = part.rows[span]
                scores[hits] += weight * bm25_weights(part.counts[span].astype(np.float64),
                                                      part.lengths[hits].astype(np.float64),
                                                      self.average_length)
        return scores

    def score_all(self, query: str) -> np.ndarray | None:
        """BM25 scores (count,) float64 of every row of every segment; None for a query without an
        indexed word."""
        found, idf = self._statistics(query)
        if not found:
            return None
        return np.concatenate([self._part_scores(number, found, idf) for number in range(len(self.parts))])

    def score_rows(self, query: str, rows: np.ndarray | Iterable[int]) -> np.ndarray:
        rows = np.asarray(list(rows) if not isinstance(rows, np.ndarray) else rows, dtype=np.int64)
        out = np.full(rows.shape[0], np.nan)
        found, idf = self._statistics(query)
        if not found:
            return out
        inside = (rows >= 0) & (rows < self.count)
        part_of = np.searchsorted(self.offsets, rows, side="right") - 1
        for number in range(len(self.parts)):
            at = np.flatnonzero(inside & (part_of == number))
            if at.size:
                out[at] = self._part_scores(number, found, idf)[rows[at] - self.offsets[number]]
        return out

    def score_texts(self, query: str, texts: Sequence[str]) -> np.ndarray:
        found, idf = self._statistics(query)
        out = np.full(len(texts), np.nan)
        if not found:
            return out
        for number, text in enumerate(texts):
            bag = words(text)
            counts = np.array([bag.count(word) for word in found], dtype=np.float64)
            weights = bm25_weights(counts, np.full(len(found), float(len(bag))), self.average_length)
            out[number] = float(np.sum(idf * weights))
        return out


def load_state(build_dirs: Sequence[str | Path], *,
               load: Callable[[str | Path], LoadedIndex] = load_corpus) -> LoadedIndex:
    """The segments `build_dirs` (base first, then appends, oldest first) as one searchable corpus.

    One directory is returned as `load` gives it. Otherwise the result's `encoder` is the newest
    segment's (the state's vocabulary), its `index` a `SegmentedIndex`, its `segments` the loaded
    segments, its manifest the base's with the sources and document count of all. Raises
    CorpusError when the segments do not chain (an append's row offset or base differs)."""
    parts = [load(d) for d in build_dirs]
    if not parts:
        raise CorpusError("a state needs at least one segment")
    if len(parts) == 1:
        return parts[0]
    rows = 0
    for part in parts:
        info = segment_info(part.manifest)
        if info["row_offset"] != rows:
            raise CorpusError(
                f"{part.build_dir}: segment starts at row {info['row_offset']}, the state has {rows} "
                f"rows before it"
            )
        if (part.dims, part.encoder.ngram, part.encoder.seed) != (parts[0].dims, parts[0].encoder.ngram,
                                                                 parts[0].encoder.seed):
            raise CorpusError(f"{part.build_dir}: HDC parameters differ from the base segment's")
        rows += part.count
    manifest = {**parts[0].manifest, "documents": rows,
                "sources": [s for part in parts for s in part.manifest.get("sources", [])],
                "segments": [str(part.build_dir) for part in parts]}
    return LoadedIndex(encoder=parts[-1].encoder, index=SegmentedIndex([p.index for p in parts]),
                        manifest=manifest, build_dir=parts[-1].build_dir, segments=tuple(parts))


def state_word_index(state: LoadedIndex, word_index: Callable[[LoadedIndex], WordIndex | None]
                     ) -> WordIndex | SegmentedWordIndex | None:
    """The exact-word index of a state: the segment's own for one segment, else every segment's
    together (None when any segment has none: the search then runs on HDC alone)."""
    if not state.segments:
        return word_index(state)
    parts = [word_index(segment) for segment in state.segments]
    if any(part is None for part in parts):
        return None
    return SegmentedWordIndex(parts, state.index.offsets)


def append_segment(*, previous_dir: str | Path, datasets: Iterable[tuple[int, str, str | Path]],
                   out_dir: str | Path, gguf_path: str | Path, tokenizer: Tokenizer, sink: Sink | None = None,
                   progress: Progress | None = None, should_cancel: Callable[[], bool] | None = None,
                   batch_docs: int = BATCH_DOCS, word_index: bool = True,
                   known: Callable[[list[str]], set[str]] | None = None,
                   read_options: ReadOptions | None = None) -> BuildResult:
    """Write an append segment of `datasets` = [(source_id, name, path)] after the state whose
    newest segment is `previous_dir` (see the module docstring); returns it as a build result.

    The new documents are tokenized, their unseen tokens added to the previous vocabulary with an
    IDF over the state's documents after the append, and encoded with that vocabulary; their
    records (`hdv_idx` numbered across the state) go to `sink`. With `word_index`, the segment's
    `words.npz` is written too. Verified and completed like a build (manifest last); a failure or
    `BuildCancelled` leaves `out_dir` without a manifest for the caller to delete. Duplicates are
    dropped within the append, and, with `known(ids)` (which of a batch's content ids the state
    holds), a document the state already holds, as a full build of the same documents would.
    """
    load_torch()  # before the first numba kernel: see its docstring
    previous_dir, out_dir = Path(previous_dir), Path(out_dir)
    previous = read_manifest(previous_dir)
    datasets = [(int(source_id), str(name), Path(path)) for source_id, name, path in datasets]
    if not datasets:
        raise BuildError("no datasets given")
    _check_out_dir(out_dir)
    report = progress or (lambda phase, done, total: None)

    def checkpoint() -> None:
        if should_cancel is not None and should_cancel():
            raise BuildCancelled(f"append into {out_dir} cancelled")

    vocab = VocabIndex.open(previous_dir / VOCAB_FILE)
    row_offset = int(segment_info(previous)["row_offset"]) + int(previous["documents"])
    timings: dict[str, float] = {}
    spool_dir = out_dir / _SPOOL
    spool, tokenized, offsets = _tokenize_append(datasets, spool_dir, tokenizer=tokenizer,
                                                 chunk_size=int(previous["chunk_size"]),
                                                 batch_docs=batch_docs, report=report, checkpoint=checkpoint,
                                                 known=known, timings=timings, read_options=read_options)
    n_docs = offsets.size - 1
    checkpoint()
    with _timed(timings, "vocabulary"):
        vocab, added = _extend_vocabulary(vocab, out_dir, tokenizer=tokenizer, gguf_path=gguf_path,
                                          document_frequency=tokenized.document_frequency,
                                          documents=row_offset + n_docs, report=report)
    tokens = np.memmap(spool.tokens_path, dtype="<i4", mode="r") if offsets[-1] else np.zeros(0, np.int32)
    _encode_append(out_dir, encoder=HDCEncoder(vocab), spool=spool, tokens=tokens, offsets=offsets, sink=sink,
                   batch_docs=batch_docs, report=report, checkpoint=checkpoint, row_offset=row_offset,
                   word_index=word_index, timings=timings)
    with _timed(timings, "verify"):
        _write_verify_sample(out_dir, tokens, offsets, int(previous["seed"]))
        del tokens
        shutil.rmtree(spool_dir)
        manifest = _append_manifest(previous, tokenized=tokenized, offsets=offsets, vocab=vocab, sink=sink,
                                    segment={"kind": "append", "row_offset": row_offset,
                                             "previous": previous_dir.name, **added})
        _seal(out_dir, manifest, report)
    return _complete(out_dir, manifest, timings, tokenized.skipped)


def _tokenize_append(datasets: list[tuple[int, str, Path]], spool_dir: Path, *, tokenizer: Tokenizer,
                     chunk_size: int, batch_docs: int, report: Progress, checkpoint: Callable[[], None],
                     known: Callable[[list[str]], set[str]] | None, timings: dict[str, float],
                     read_options: ReadOptions | None = None) -> tuple[_Spool, _Tokenized, np.ndarray]:
    """The new documents' tokens and records, spooled in `spool_dir` → (the spool, what the pass
    counted, each document's token offsets (documents + 1,) int64); none at all is a BuildError."""
    spool_dir.mkdir()
    spool = _Spool(spool_dir / "tokens.i32", spool_dir / "records.jsonl")
    with _timed(timings, "tokenize"):
        tokenized = _tokenize_pass(
            datasets, tokenizer, chunk_size, spool, batch_docs, report, checkpoint, known, read_options
        )
    offsets = np.asarray(spool.offsets, dtype=np.int64)
    if offsets.size == 1:
        raise BuildError(f"no documents found in {[str(d[2]) for d in datasets]}")
    return spool, tokenized, offsets


def _encode_append(out_dir: Path, *, encoder: HDCEncoder, spool: _Spool, tokens: np.ndarray,
                   offsets: np.ndarray, sink: Sink | None, batch_docs: int, report: Progress,
                   checkpoint: Callable[[], None], row_offset: int, word_index: bool,
                   timings: dict[str, float]) -> None:
    """The new documents' rows (numbered from `row_offset`) and records, and with `word_index`
    their exact-word index (`words.npz`)."""
    texts: list[str] | None = [] if word_index else None
    with _timed(timings, "encode"):
        _encode_pass(out_dir, encoder=encoder, spool=spool, tokens=tokens, offsets=offsets, sink=sink,
                     batch_docs=batch_docs, report=report, checkpoint=checkpoint, row_offset=row_offset,
                     texts=texts)
    if texts is not None:
        with _timed(timings, "words"):
            WordIndex.build(texts).save(out_dir / WORDS_FILE)


def _extend_vocabulary(vocab: VocabIndex, out_dir: Path, *, tokenizer: Tokenizer, gguf_path: str | Path,
                       document_frequency: np.ndarray, documents: int, report: Progress
                       ) -> tuple[VocabIndex, dict[str, Any]]:
    """The append's `vocab.idx`: the previous vocabulary plus the new documents' unseen tokens, their
    IDF over the state's `documents` after the append → (it, opened; the manifest's count of new
    tokens and their share of the new documents' token occurrences)."""
    report("vocabulary", 0, 1)
    seen = _corpus_vocabulary(tokenizer, document_frequency)
    unseen = np.setdiff1d(seen, np.asarray(vocab.token_ids), assume_unique=True)
    idf = compute_idf(document_frequency[unseen], documents)
    occurrences = int(document_frequency[seen].sum())
    oov_share = float(document_frequency[unseen].sum()) / occurrences if occurrences else 0.0
    vocab = extend_vocab_index(vocab, out_dir / VOCAB_FILE, token_ids=unseen, idf=idf,
                               stored_rows=gguf.token_rows(gguf_path, unseen))
    report("vocabulary", 1, 1)
    return vocab, {"new_tokens": int(unseen.size), "oov_share": round(oov_share, 6)}


def _append_manifest(previous: dict[str, Any], *, tokenized: _Tokenized, offsets: np.ndarray,
                     vocab: VocabIndex, sink: Sink | None, segment: dict[str, Any]) -> dict[str, Any]:
    """An append's manifest: the previous segment's parameters, the new documents' counts and sources."""
    n_docs = offsets.size - 1
    return {
        **{k: previous[k] for k in ("format_version", "dims", "seed", "ngram", "drop_components",
                                    "chunk_size", "model", "encoder") if k in previous},
        "created": _created(), "documents": n_docs,
        "duplicates": sum(s["duplicates"] for s in tokenized.sources),
        "skipped_records": len(tokenized.skipped), "vocab_size": vocab.size,
        "median_doc_length": float(np.median(np.diff(offsets))), "sources": tokenized.sources,
        "memories": "sink" if sink is not None else "memories.sqlite",
        SEGMENT: segment,
    }
