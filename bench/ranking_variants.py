"""HDC ranking variants and hubness figures for `bench.retrieval_eval` (issue 14, item 3).

Variants re-score the exact HDC scores s(q, d) (ternary dot products) of every document:

* ``hdc``: s itself (the engine's ranking).
* ``hdc-cos``: per-document normalisation, s / sqrt(nnz(d) * nnz(q)): a dense document no longer
  scores high against everything merely for having many nonzero dimensions.
* ``hdc-template``: s of the query *with* its question template, as the engine encoded queries
  before `engine.query.query_terms` (the other columns use the engine's query, template
  removed): in a glossary "What" and "?" are rare, so their IDF is high, and entries that happen
  to contain them become hubs for every "What is X?".
* ``hdc-idfq``: query-side IDF sharpening: the query's tokens found in more than
  `COMMON_SHARE` of the documents are dropped before encoding (all of them kept when none would
  be left), so a query's rare words carry its vector.
* ``hdc-csls``: cross-domain similarity local scaling (Lample et al. 2018) against the corpus's
  own query-like vectors: 2 cos(q, d) - r(d), r(d) = the mean cosine of d with its 10 nearest of
  `PSEUDO_QUERIES` pseudo-queries (the first words of seeded documents, encoded as queries). A hub
  is near every query, so its r(d) is high and its score drops.

Hubness of a ranker's top-10 lists: the share of queries whose top 10 holds the most frequent
document, how many documents sit in more than a third of the lists, and the distinct documents
among all top-10 slots.
"""

from __future__ import annotations

import functools

import numpy as np

from engine.encoder import compute_idf
from engine.query import query_terms

PSEUDO_QUERIES = 1000
COMMON_SHARE = 0.05
CSLS_NEIGHBOURS = 10


def hubness(ranked: np.ndarray, k: int = 10) -> dict[str, float]:
    """Hubness figures of rankings (q, >= k) document indices (-1 = none)."""
    top = ranked[:, :k]
    counts = np.bincount(top[top >= 0].ravel()) if (top >= 0).any() else np.zeros(1, np.int64)
    queries = top.shape[0]
    return {"top_hub_share": float(counts.max() / queries) if queries else 0.0,
            "hubs_over_third": int(np.count_nonzero(counts > queries / 3)),
            "distinct_share": float(np.count_nonzero(counts) / max(1, int((top >= 0).sum())))}


def _nonzeros(corpus) -> np.ndarray:  # noqa: ANN001 - engine.loaded_build.LoadedIndex
    pos, neg = corpus.index.get_bitmaps(np.arange(corpus.count))
    return np.bitwise_count(pos | neg).sum(axis=1).astype(np.float64)


class ScoreVariants:
    """All documents' exact HDC scores for a query, and the variants above computed from them."""

    def __init__(self, corpus, retriever, documents: list[str]) -> None:  # noqa: ANN001
        self.corpus, self.retriever = corpus, retriever
        self.rows = np.arange(corpus.count, dtype=np.int64)
        self.doc_nnz = np.maximum(_nonzeros(corpus), 1.0)
        self.documents = documents

    @functools.cached_property
    def local_density(self) -> np.ndarray:
        """CSLS's r(d): mean cosine of each document with its nearest pseudo-queries (made on first use)."""
        documents = self.documents
        rng = np.random.default_rng(0)
        sample = rng.choice(len(documents), size=min(PSEUDO_QUERIES, len(documents)), replace=False)
        leads = [" ".join(documents[i].split()[:8]) for i in sample if documents[i].split()]
        cosines = (
            np.stack([self.cosine(query) for query in leads]) if leads else np.zeros((1, self.corpus.count))
        )
        neighbours = min(CSLS_NEIGHBOURS, cosines.shape[0])
        return np.sort(cosines, axis=0)[-neighbours:].mean(axis=0)

    def raw(self, query: str, template: bool = False) -> tuple[np.ndarray, float]:
        q_pos, q_neg, _ = self.retriever.encode_text(self.corpus, query if template else query_terms(query))
        return self.corpus.index.score_rows(self.rows, q_pos, q_neg).astype(np.float64), \
            float(np.bitwise_count(q_pos | q_neg).sum())

    def sharpened(self, query: str) -> np.ndarray:
        vocab = self.corpus.encoder.vocab
        cut = float(compute_idf(np.array([COMMON_SHARE * self.corpus.count]), self.corpus.count)[0])
        tokens = self.retriever.tokenizer.tokenize(query_terms(query))
        at = np.minimum(np.searchsorted(vocab.token_ids, tokens), vocab.token_ids.size - 1)
        idf = np.where(vocab.token_ids[at] == tokens, vocab.idf[at], np.inf)  # unseen tokens: rare
        kept = [token for token, value in zip(tokens, idf, strict=True) if value >= cut] or tokens
        q_pos, q_neg = self.corpus.encoder.encode([kept])
        return self.corpus.index.score_rows(self.rows, q_pos[0], q_neg[0]).astype(np.float64)

    def cosine(self, query: str) -> np.ndarray:
        scores, q_nnz = self.raw(query)
        return scores / np.sqrt(self.doc_nnz * max(q_nnz, 1.0))

    def scores(self, variant: str, query: str) -> np.ndarray:
        if variant == "hdc-template":
            return self.raw(query, template=True)[0]
        if variant == "hdc":
            return self.raw(query)[0]
        if variant == "hdc-idfq":
            return self.sharpened(query)
        if variant == "hdc-cos":
            return self.cosine(query)
        if variant == "hdc-csls":
            return 2 * self.cosine(query) - self.local_density
        raise ValueError(f"unknown variant {variant!r}")


def rank_by(scores: np.ndarray, k: int) -> np.ndarray:
    """Top-k indices by score, ties to the lower index."""
    top = np.argpartition(-scores, min(k, scores.size - 1))[:k]
    return top[np.lexsort((top, -scores[top]))]
