"""Multi-vector text encoding from a GGUF model's own token embeddings (no second model).

A text's sequence for the store (multivector_storage_contract.md, text collection):

    row 0       summary: the weighted mean of the token rows, L2-normalised — the contract's
                "CLS" representative vector, searched by the store's stage-1 HNSW index
    rows 1..    one row per distinct content token, in order of first occurrence:
                weight(t) * normalise(E[t] @ P)

E is the model's `token_embd.weight` table (vocab, emb_dim), P a seeded Gaussian projection
(emb_dim, dim) to the store's width, so the same seed gives the same vectors on every machine.
With an `isotropy` correction (mean, directions) — `engine.vocab.isotropy_correction` of the
corpus vocabulary, as the HDC build uses — each unit row of E loses the shared mean and the top
principal directions before projection: Gemma's raw rows have a mean cosine of ~0.2, which
makes every summary vector alike and adds a constant to every MaxSim term.
Content tokens are the text's token ids minus the tokenizer's special tokens and, when
`min_idf` > 0, the corpus's most frequent tokens (IDF below it). Repeated ids keep one row:
on the document side that loses nothing for MaxSim (identical rows have identical maxima).
With more than `max_rows - 1` content tokens the highest-weighted ones are kept (ties by
position), so an encoded sequence never exceeds `max_rows` rows and its payload stays under
the store's MAX_PAYLOAD_BYTES.

weight(t) is 1 ("none"), idf(t) ("idf") or sqrt(idf(t)) ("sqrt_idf"). Queries are encoded
exactly like documents; with "sqrt_idf" on both sides an exact token match scores idf(t), as
a BM25 term does. bench/retrieval_eval.py measures the choices; `DEFAULT_WEIGHTING` is the
best one there.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.multivector.records import MAX_PAYLOAD_BYTES
from engine.vocab import corrected_rows, isotropy_correction, unit_rows

if TYPE_CHECKING:
    from engine.loaded_build import LoadedIndex

DEFAULT_SEED = 20240611
DEFAULT_MAX_ROWS = 256
DEFAULT_WEIGHTING = "sqrt_idf"
DEFAULT_MIN_IDF = 0.0
DEFAULT_DROP_COMPONENTS = 16
WEIGHTINGS = ("none", "idf", "sqrt_idf")
# Worst-case encoded bytes of one float32 row: base64 (4/3) of 4 bytes per value, plus gzip's
# few bytes of growth on incompressible data (< 0.1 %, bounded by 1 % here).
_ROW_BYTES_FACTOR = 4 * 4 / 3 * 1.01


class EmptySequenceError(ValueError):
    """A text with no content tokens (empty, only special tokens or only dropped frequent ones)."""


def idf_table(vocab_size: int, token_ids: np.ndarray, idf: np.ndarray, n_documents: int) -> np.ndarray:
    """A full-vocabulary IDF (vocab_size,) float32 from a corpus's (token_ids, idf).

    Tokens the corpus never saw get the IDF of a document frequency of 0 (engine.encoder's
    BM25 formula), the highest possible: a query word absent from the corpus is rare.
    """
    token_ids = np.asarray(token_ids, dtype=np.int64)
    idf = np.asarray(idf, dtype=np.float32)
    if token_ids.shape != idf.shape or token_ids.ndim != 1:
        raise ValueError(f"token_ids {token_ids.shape} and idf {idf.shape} must be matching 1-D arrays")
    if token_ids.size and (token_ids.min() < 0 or token_ids.max() >= vocab_size):
        raise ValueError(f"token ids must lie in [0, {vocab_size})")
    if n_documents < 1:
        raise ValueError(f"n_documents must be >= 1, got {n_documents}")
    table = np.full(vocab_size, np.log1p((n_documents + 0.5) / 0.5), dtype=np.float32)
    table[token_ids] = idf
    return table


class TokenVectorEncoder:
    """Token-embedding multi-vectors (see the module docstring). Thread-safe: no mutable state.

    Shapes: embeddings (vocab, emb_dim) float (a memmap is fine: only used rows are read);
    idf (vocab,) float or None (every weight 1, `min_idf` unused).
    """

    def __init__(
        self,
        embeddings: np.ndarray,
        *,
        dim: int = 768,
        seed: int = DEFAULT_SEED,
        idf: np.ndarray | None = None,
        special_ids: Iterable[int] = (),
        weighting: str = DEFAULT_WEIGHTING,
        min_idf: float = DEFAULT_MIN_IDF,
        max_rows: int = DEFAULT_MAX_ROWS,
        isotropy: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        if not isinstance(embeddings, np.ndarray) or embeddings.ndim != 2 or 0 in embeddings.shape:
            raise ValueError(f"embeddings must be a non-empty 2-D array (vocab, emb_dim), got "
                             f"{getattr(embeddings, 'shape', type(embeddings).__name__)}")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        if weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 2:
            raise ValueError(f"max_rows must be an int >= 2 (summary + one token), got {max_rows!r}")
        if max_rows * dim * _ROW_BYTES_FACTOR > MAX_PAYLOAD_BYTES:
            raise ValueError(f"max_rows {max_rows} of dim {dim} could encode to more than the store's "
                             f"{MAX_PAYLOAD_BYTES}-byte payload limit; at most "
                             f"{int(MAX_PAYLOAD_BYTES // (dim * _ROW_BYTES_FACTOR))}")
        vocab_size, emb_dim = embeddings.shape
        self.embeddings = embeddings
        self.vocab_size = int(vocab_size)
        self.dim = dim
        self.seed = int(seed)
        self.weighting = weighting
        self.min_idf = float(min_idf)
        self.max_rows = max_rows
        if idf is not None:
            idf = np.asarray(idf, dtype=np.float32)
            if idf.shape != (vocab_size,) or not np.isfinite(idf).all() or (idf < 0).any():
                raise ValueError(f"idf must be ({vocab_size},) finite and >= 0, got shape {idf.shape}")
        self.idf = idf
        if isotropy is not None:
            mean, directions = (np.asarray(part, dtype=np.float32) for part in isotropy)
            if mean.shape != (emb_dim,) or directions.ndim != 2 or directions.shape[1] != emb_dim:
                raise ValueError(f"isotropy must be (mean ({emb_dim},), directions (c, {emb_dim})), got "
                                 f"{mean.shape} and {directions.shape}")
            isotropy = (mean, directions)
        self.isotropy = isotropy
        self._special = np.zeros(vocab_size, dtype=bool)
        special = np.fromiter((int(i) for i in special_ids), dtype=np.int64)
        self._special[special[(special >= 0) & (special < vocab_size)]] = True
        rng = np.random.default_rng(self.seed)
        self.projection = (rng.standard_normal((emb_dim, dim)) / np.sqrt(dim)).astype(np.float32)

    @classmethod
    def for_corpus(cls, corpus: LoadedIndex, embeddings: np.ndarray, *, special_ids: Iterable[int] = (),
                   drop_components: int = DEFAULT_DROP_COMPONENTS, **options: Any) -> TokenVectorEncoder:
        """The encoder of a finished HDC build: IDF from its vocabulary index (`vocab.idx`), the
        isotropy correction (mean and `drop_components` directions; 0: none) of that vocabulary,
        one direction at most per `engine.vocab.MIN_TOKENS_PER_COMPONENT` vocabulary tokens."""
        vocab = corpus.encoder.vocab
        token_ids = np.asarray(vocab.token_ids, dtype=np.int64)
        idf = idf_table(embeddings.shape[0], token_ids, vocab.idf, max(1, int(corpus.manifest["documents"])))
        isotropy = isotropy_correction(token_ids, embeddings, drop_components) if drop_components else None
        return cls(embeddings, idf=idf, special_ids=special_ids, isotropy=isotropy, **options)

    @property
    def signature(self) -> str:
        """What a stored sequence depends on besides the model and corpus IDF (kept in metadata)."""
        drop = "none" if self.isotropy is None else len(self.isotropy[1])
        return (f"tokvec-1 dim={self.dim} seed={self.seed} weighting={self.weighting} "
                f"min_idf={self.min_idf:g} max_rows={self.max_rows} isotropy={drop}")

    def _check_ids(self, token_ids: Any) -> np.ndarray:
        ids = np.asarray(token_ids)
        if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
            raise ValueError(f"token_ids must be a 1-D sequence of ints, got {ids.dtype} shape {ids.shape}")
        ids = ids.astype(np.int64, copy=False)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            bad = ids[(ids < 0) | (ids >= self.vocab_size)][0]
            raise ValueError(f"token id {int(bad)} is outside the embedding table [0, {self.vocab_size})")
        return ids

    def weights(self, token_ids: np.ndarray) -> np.ndarray:
        """Row weights (n,) float32 of token ids under this encoder's weighting."""
        if self.idf is None or self.weighting == "none":
            return np.ones(len(token_ids), dtype=np.float32)
        idf = self.idf[token_ids]
        return idf if self.weighting == "idf" else np.sqrt(idf)

    def content_ids(self, token_ids: Any) -> np.ndarray:
        """The distinct content token ids (k,) int64 a sequence gets rows for, in first-occurrence order.

        Special tokens and (with an IDF and `min_idf` > 0) frequent tokens are dropped; at most
        `max_rows - 1` ids are kept, the highest-weighted. May be empty.
        """
        ids = self._check_ids(token_ids)
        keep = ~self._special[ids]
        if self.idf is not None and self.min_idf > 0:
            keep &= self.idf[ids] >= self.min_idf
        ids = ids[keep]
        _, first = np.unique(ids, return_index=True)
        ids = ids[np.sort(first)]
        limit = self.max_rows - 1
        if ids.size > limit:
            best = np.argsort(-self.weights(ids), kind="stable")[:limit]
            ids = ids[np.sort(best)]
        return ids

    def token_rows(self, token_ids: Any) -> np.ndarray:
        """Weighted unit token vectors of the given ids, no filtering: (n,) → (n, dim) float32."""
        ids = self._check_ids(token_ids)
        vectors = np.asarray(self.embeddings[ids], dtype=np.float32)
        if self.isotropy is not None:
            vectors = corrected_rows(vectors, self.isotropy)
        return unit_rows(vectors @ self.projection) * self.weights(ids)[:, None]

    def encode(self, token_ids: Any) -> np.ndarray:
        """A text's sequence: token ids (t,) → (1 + k, dim) float32, row 0 the summary.

        Raises EmptySequenceError when no content token remains (k = 0), ValueError for ids
        outside the embedding table.
        """
        ids = self.content_ids(token_ids)
        if ids.size == 0:
            raise EmptySequenceError(
                f"no content tokens among {len(np.asarray(token_ids).reshape(-1))} token ids "
                "(empty text, only special tokens or only frequent tokens)")
        rows = self.token_rows(ids)
        summary = rows.sum(axis=0)
        norm = float(np.linalg.norm(summary))
        if norm == 0.0:
            raise EmptySequenceError("the token vectors of this text cancel out; no summary vector")
        return np.vstack([summary / norm, rows]).astype(np.float32, copy=False)
