"""HDCEncoder: token ids -> ternary hypervectors (packed pos/neg uint64 bitmaps).

The spec's "Encoding Pipeline", with every choice it leaves open fixed here:

* Projection. `R` (emb_dim, dims) float32 from `numpy.random.default_rng(seed).standard_normal`,
  each column scaled to unit L2 norm. Embedding rows are L2-normalised first, so a projected
  value is ~ N(0, 1/emb_dim) and tau = emb_dim^-0.5 is one standard deviation: a token's ternary
  vector has density P(|z| > 1) ~ 0.317. Values exactly at +-tau quantise to 0.
* Vocabulary index (`engine.vocab`): only the corpus vocabulary (special tokens excluded) is
  projected; float16 unigram rows, and ternary bitmaps for each n-gram position j, rotated by j
  dimensions (the permutation rho^j is the cyclic shift by j: out[d] = in[(d - j) mod dims]).
  A format 1 index stores both tables; a format 2 index derives the rows a batch uses, and the
  encoder works on those rows alone (same values, so the same hypervectors).
* Tokens. Special tokens and tokens outside the corpus vocabulary (possible in queries) are
  dropped before both channels; n-grams run over the remaining sequence.
* IDF. idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)) over the N distinct documents (BM25's
  non-negative form): a token in every document weighs ~ln(1 + 0.5/N) ~ 0, a rare one ~ln(2N).
* Unigram. u = sum over token occurrences of idf(t) * P[t] (term frequency counts; one
  `embedding_bag` per batch on the float16 rows), then L2-normalised and scaled by
  sqrt(dims / emb_dim), so its RMS per dimension is tau again. An empty bag stays all zero.
* N-gram channel (`engine.ngram`, numba, whole batches). For each window i of `ngram` tokens the
  bound vector is g_i = prod_j rho^j(t_{i+j}) (ternary product). Coherence is its L2 norm
  sqrt(c_i), c_i = popcount(pos | neg). Coherence filter: keep windows with
  c_i >= c_min = max(1, round(p * dims)), p = density^ngram the expected density of one bound
  n-gram (density measured on the vocabulary bitmaps). Capacity bound: keep at most
  m_cap = ceil(log(1 - target) / log(1 - p)) windows, target = 0.5 (`vocab.CAPACITY_TARGET`):
  enough n-grams that about half of the dimensions see at least one, so the channel never covers
  the whole vector. The most coherent windows win, ties going to the earlier window, which makes
  the selection a property of the n-grams themselves (shared n-grams tend to be selected in
  both documents).
* Agreement. Each kept n-gram votes its polarity with weight 1/sqrt(c_i) (unit L2 norm) on its
  nonzero dims. agree_d = max(0, sign(u_d) * sum(votes_d) / sum(|votes_d|)) in [0, 1], 0 where
  no n-gram is active: agreement boosts, disagreement leaves the unigram value alone.
* Boost. v = u * (1 + agree), re-quantised at tau. |v_d| <= 2 |u_d|, so a dimension the IDF
  weighting left below tau / 2 stays zero whatever the n-grams say.

Everything is deterministic for a seed: batch and single-document encodings are identical.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from engine.bits import quantize_ternary
from engine.ngram import ngram_agreement
from engine.vocab import VocabIndex

if TYPE_CHECKING:  # torch is imported when an encoder is made: a process that never encodes starts without it
    import torch


def load_torch() -> None:
    """Import torch now, where a process will encode anyway (a build, an append), so that it comes
    before any numba kernel's first parallel loop here. Imported after one, torch shares the OpenMP
    runtime numba started instead of loading its own, and its bfloat16 matrix products (the meaning
    encoder's, `engine.meaning.SentenceEncoder`) ran 2.5-4x slower (docs/retrieval-measurements.md)."""
    import torch  # noqa: F401 - imported for where its OpenMP runtime comes from


def compute_idf(document_frequency: np.ndarray, n_documents: int) -> np.ndarray:
    """BM25-style non-negative IDF. Shapes: document_frequency (v,) int -> (v,) float32."""
    df = np.asarray(document_frequency, dtype=np.float64)
    if np.any(df < 0) or np.any(df > n_documents):
        raise ValueError(f"document frequencies must lie in [0, {n_documents}]")
    return np.log1p((n_documents - df + 0.5) / (df + 0.5)).astype(np.float32)


def flatten(token_lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Token lists -> (flat int64 (t,), offsets int64 (b+1,))."""
    lengths = np.fromiter((len(tokens) for tokens in token_lists), dtype=np.int64, count=len(token_lists))
    offsets = np.zeros(len(token_lists) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.fromiter(itertools.chain.from_iterable(token_lists), dtype=np.int64, count=int(offsets[-1]))
    return flat, offsets


class HDCEncoder:
    """Encoder over one opened `VocabIndex`. Thread-safe: its only mutable state is the index's
    row cache, which takes a lock."""

    def __init__(self, vocab: VocabIndex) -> None:
        header = vocab.header
        self.vocab = vocab
        self.dims = int(header["dims"])
        self.words = int(header["words"])
        self.ngram = int(header["ngram"])
        self.seed = int(header["seed"])
        self.emb_dim = int(header["emb_dim"])
        self.tau = float(header["tau"])
        self.m_cap = int(header["m_cap"])
        self.c_min = int(header["c_min"])
        import torch

        self._token_ids = np.asarray(vocab.token_ids)
        self._idf = torch.from_numpy(np.asarray(vocab.idf).astype(np.float16))
        # Full tables when the index has them (format 1, or a build's scratch tables): no copying.
        self._bitmaps = self._unigram = None
        if vocab.unigram is not None:
            self._bitmaps = np.asarray(vocab.bitmaps)
            self._unigram = _tensor(vocab.unigram)

    @classmethod
    def open(cls, path: str) -> HDCEncoder:
        return cls(VocabIndex.open(path))

    def local_ids(self, flat: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Map global ids to vocabulary rows, dropping specials and out-of-vocabulary tokens."""
        if self._token_ids.size == 0:
            return np.zeros(0, np.int64), np.zeros_like(offsets)
        local = np.searchsorted(self._token_ids, flat)
        np.minimum(local, self._token_ids.size - 1, out=local)
        known = self._token_ids[local] == flat
        kept = np.zeros(flat.size + 1, dtype=np.int64)
        np.cumsum(known, out=kept[1:])
        return local[known].astype(np.int64), kept[offsets]

    def _check(self, flat: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        flat = np.ascontiguousarray(flat, dtype=np.int64)
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        if flat.ndim != 1 or offsets.ndim != 1 or offsets.size < 1:
            raise ValueError(
                f"flat ids must be 1-D and offsets 1-D with >= 1 entry, got {flat.shape}, {offsets.shape}"
            )
        if offsets[0] != 0 or offsets[-1] != flat.size or np.any(np.diff(offsets) < 0):
            raise ValueError("offsets must start at 0, be non-decreasing and end at len(flat)")
        return flat, offsets

    def _tables(self, local: np.ndarray) -> tuple[np.ndarray, torch.Tensor, np.ndarray]:
        """(row ids into the tables, unigram table, bitmaps table) for the vocabulary rows `local`:
        the full tables when stored, else the rows `local` uses, derived (same values)."""
        if self._unigram is not None:
            return local, self._unigram, self._bitmaps
        unique, inverse = np.unique(local, return_inverse=True)
        unigram, bitmaps = self.vocab.rows(unique)
        return inverse.astype(np.int64).reshape(-1), _tensor(unigram), bitmaps

    def _unigram_local(self, local: np.ndarray, offsets: np.ndarray, rows: np.ndarray | None = None,
                       table: torch.Tensor | None = None) -> np.ndarray:
        n_docs = offsets.size - 1
        if local.size == 0:
            return np.zeros((n_docs, self.dims), dtype=np.float32)
        if table is None:
            rows, table, _ = self._tables(local)
        import torch

        bags = torch.nn.functional.embedding_bag(
            torch.from_numpy(rows),
            table,
            torch.from_numpy(offsets[:-1]),
            mode="sum",
            per_sample_weights=self._idf[torch.from_numpy(local)],
        )
        unigram = bags.float().numpy()
        norms = np.linalg.norm(unigram, axis=1, keepdims=True)
        scale = math.sqrt(self.dims / self.emb_dim)
        return np.divide(unigram * scale, norms, out=np.zeros_like(unigram), where=norms > 0)

    def project_flat(self, flat: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Unigram channel. Shapes: flat (t,) int global ids, offsets (b+1,) -> (b, dims) float32."""
        local, local_offsets = self.local_ids(*self._check(flat, offsets))
        return self._unigram_local(local, local_offsets)

    def encode_values_flat(self, flat: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(unigram, agree), both (b, dims) float32: the two channels before boosting."""
        local, local_offsets = self.local_ids(*self._check(flat, offsets))
        if local.size == 0:
            unigram = np.zeros((offsets.size - 1, self.dims), dtype=np.float32)
            return unigram, np.zeros_like(unigram)
        rows, table, bitmaps = self._tables(local)
        unigram = self._unigram_local(local, local_offsets, rows, table)
        agree = np.zeros_like(unigram)
        if self.m_cap > 0:
            ngram_agreement(rows, local_offsets, bitmaps, np.sign(unigram).astype(np.int8),
                            self.ngram, self.m_cap, self.c_min, agree)
        return unigram, agree

    def encode_flat(self, flat: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Full pipeline. Shapes: flat (t,) int64 global ids, offsets (b+1,) -> pos, neg (b, words) uint64."""
        unigram, agree = self.encode_values_flat(flat, offsets)
        return quantize_ternary(unigram * (1.0 + agree), self.tau)

    def encode(self, token_lists: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Encode documents given as token-id lists -> pos, neg (b, words) uint64."""
        return self.encode_flat(*flatten(token_lists))

    def content_count(self, tokens: Sequence[int]) -> int:
        """Tokens of `tokens` the encoder uses (in the corpus vocabulary, not special)."""
        flat, offsets = flatten([tokens])
        return int(self.local_ids(flat, offsets)[0].size)


def _tensor(array: np.ndarray) -> torch.Tensor:
    import torch

    with warnings.catch_warnings():
        # A read-only memmap; torch only reads it, so its "non-writable" warning is moot.
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(np.asarray(array))
