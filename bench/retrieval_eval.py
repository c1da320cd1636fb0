"""Known-item retrieval quality: the HDC retriever's raw ranking against BM25 on the same set.

Corpus and queries come from WordNet 3.0 (Debian package `wordnet-base`; see bench/data/wordnet.py):
each query has exactly one relevant document. Reported per ranker: recall@10 (the relevant
document is in the top 10) and MRR@10 (mean of 1/rank, 0 past rank 10), with the query and
document counts and the time each ranker took to index and to answer.

The HDC column is the index's exact search on the encoded query: no blend, threshold, dedup or
MMR, so it measures the encoding alone. The late-interaction column scores every document by exact
MaxSim of `engine.multivector.token_vectors` sequences (the GGUF's token embeddings projected to
the store's 768 dims; the store's two-stage search re-ranks its stage-1 candidates with the same
scores). "LI via store" (not run by default: filling Chroma is slow) is that two-stage search on
a real embedded store. "RRF(HDC, LI)" fuses the HDC and exact-LI rankings' top 100 by reciprocal
rank fusion (k = 60), as the retriever does when a corpus has both; a sweep over k and the LI
weight follows, for information only (choosing its best cell would tune on the test queries).
"hybrid" is the hybrid a team would switch on in Open WebUI, the anchor the default settings
("meaning": the default path with the meaning channel, as a new corpus gets it) are held to: BM25
and all-MiniLM-L6-v2 fused by reciprocal rank, k = 60, equal weights, whatever --rrf-k says.
Rankers are registered in `RANKERS`.

    .venv/bin/python -m bench.retrieval_eval --set pydocs --docs 2000 --queries 300 \
        --rankers bm25,minilm,hybrid,default,meaning

    .venv/bin/python -m bench.retrieval_eval --docs 5000 --queries 300       # quick, < 2 min
    .venv/bin/python -m bench.retrieval_eval --docs 40000 --queries 2000     # moderate
    .venv/bin/python -m bench.retrieval_eval --rankers li --li-weighting idf  # one LI variant
    .venv/bin/python -m bench.retrieval_eval --docs 5000 --queries 500 --rankers hdc,li,li-store,rrf
    .venv/bin/python -m bench.retrieval_eval --set gcide --docs 5000 --queries 300   # GCIDE, "What is X?"
    .venv/bin/python -m bench.retrieval_eval --gguf chat --rankers bm25,hdc,li  # Qwen's token embeddings

Sets: `wordnet` (above), `gcide` and `jargon` (bench/data/glossaries.py: "What is <headword>?"
against entry texts; `apt-get install dict-gcide jargon-text`), `gcide-definitions` (WordNet's
definition of a word, the word removed -> its GCIDE entry), `manpages` (NAME line -> DESCRIPTION;
`apt-get install manpages manpages-dev`) and `pydocs` (a standard-library docstring's summary line
-> the rest). The fusion rule a build chooses from its own self-queries, and every rule beside it,
are measured by bench/fusion_eval.py. "hdc-cos" and "hdc-csls" re-score the
exact HDC scores (bench/ranking_variants.py). Every column also reports hubness.

`--gguf` picks the model whose token embeddings build the hdc and li rankers (bench/embedding_model.py:
a path, "chat" or the default Gemma; a tokenizer the engine lacks runs in a llama.cpp server);
bench/embedding_compare.py runs both packaged models on one set (docs/embedding-model.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

if __package__ in (None, ""):
    # Run as a script, bench/ would lead sys.path and bench/tokenize.py would shadow the stdlib's.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench.anchor_rankers import (  # noqa: E402
    AsymmetricBitsRanker,
    BinaryEncoderRanker,
    DefaultPathRanker,
    EncoderRanker,
    Int8EncoderRanker,
    MeaningPathRanker,
    StaticEncoderRanker,
)
from bench.data import manpages, paraphrase, pydocs  # noqa: E402
from bench.data.glossaries import GlossaryMissing, definition_set, gcide_entries, jargon_entries  # noqa: E402
from bench.data.glossaries import known_item_set as glossary_set  # noqa: E402
from bench.data.wordnet import WordNetMissing, build_known_item_set, read_synsets  # noqa: E402
from bench.embedding_model import EmbeddingModel, measure_tokenization, open_embedding_model  # noqa: E402
from bench.ranking_variants import ScoreVariants, hubness, rank_by  # noqa: E402

try:
    from bench._hw import print_hardware  # noqa: E402
except ImportError:  # pragma: no cover - the shared helper is optional for this script
    import platform

    def print_hardware() -> None:
        print("== hardware ==")
        print(f"cpu: {platform.processor() or platform.machine()}  cores: {os.cpu_count()}")


K = 10
# Depth of each ranking kept for fusion (RRF sees each ranker's top DEPTH, scores use the top K).
DEPTH = 100


class Ranker(Protocol):
    """Index a corpus once, then return each query's top-k document indices, best first."""

    name: str

    def index(self, documents: list[str]) -> None: ...

    def rank(self, queries: list[str], k: int) -> np.ndarray:
        """(len(queries), k) int64 document indices; -1 pads rows with fewer than k results."""
        ...


class BM25Ranker:
    name = "BM25 (bm25s)"

    def index(self, documents: list[str]) -> None:
        import bm25s

        self._bm25s = bm25s
        self._retriever = bm25s.BM25()
        self._retriever.index(
            bm25s.tokenize(documents, stopwords="en", show_progress=False), show_progress=False
        )
        self._n = len(documents)

    def rank(self, queries: list[str], k: int) -> np.ndarray:
        tokens = self._bm25s.tokenize(queries, stopwords="en", show_progress=False)
        results, scores = self._retriever.retrieve(tokens, k=min(k, self._n), show_progress=False)
        ranked = np.full((len(queries), k), -1, dtype=np.int64)
        # bm25s fills rows with arbitrary documents at score 0 once real matches run out.
        ranked[:, : results.shape[1]] = np.where(scores > 0, results, -1)
        return ranked


class WordsRanker:
    """The portal's own exact-word channel (`engine.lexical.WordIndex`, BM25 over words without
    stop words) ranking every document, beside bm25s (issue 30.11: keep it only if it holds up)."""

    name = "BM25 (engine.lexical)"

    def index(self, documents: list[str]) -> None:
        from engine.lexical import WordIndex

        self._index = WordIndex.build(documents)

    def rank(self, queries: list[str], k: int) -> np.ndarray:
        ranked = np.full((len(queries), k), -1, dtype=np.int64)
        for position, query in enumerate(queries):
            scores = self._index.score_all(query)
            if scores is None:
                continue
            top = np.argsort(-scores, kind="stable")[:k]
            top = top[scores[top] > 0]
            ranked[position, : top.size] = top
        return ranked


class HDCRanker:
    """The engine end to end: `build_index` on the documents (as a JSONL dataset), `load_corpus`,
    queries encoded by the `Retriever`, ranked by the index's exact search (no blend/threshold/MMR)."""

    name = "HDC exact (engine)"

    def __init__(self, args: argparse.Namespace) -> None:
        from engine.config import Config

        self.config = Config(hdc_dimensions=args.dims, hdc_ngram=args.ngram, hdc_seed=args.hdc_seed)
        self.work_dir: Path = args.work_dir
        self.model: EmbeddingModel = args.embedding_model
        self.token_vectors: str = getattr(args, "token_vectors", "input")
        self.encoder_cache: Path | None = getattr(args, "encoder_cache", None)
        shown = "" if self.token_vectors == "input" else f", {self.token_vectors} tokens"
        self.name = f"HDC exact (dims {args.dims}, ngram {args.ngram}{shown})"
        args.hdc_ranker = self  # the "default" column searches this build too

    def index(self, documents: list[str]) -> None:
        import json

        from engine.build import build_index
        from engine.loaded_build import load_corpus
        from engine.retrieval import Retriever

        gguf_path, tokenizer = self.model.path, self.model.make_tokenizer()
        dataset = self.work_dir / "documents.jsonl"
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with open(dataset, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps({"text": text}, ensure_ascii=False) + "\n" for text in documents)
        # The build drops duplicate texts and cuts a long text into several memories, so rows are
        # mapped back to documents through the records.
        owners: dict[int, int] = {}
        self.row_texts: dict[int, str] = {}

        def sink(records: list[dict]) -> None:
            for record in records:
                owners[record["hdv_idx"]] = record["metadata"]["record"] - 1  # JSONL lines are 1-based
                self.row_texts[record["hdv_idx"]] = record["text"]

        build_dir = self.work_dir / "hdc-build"
        cache_dir = Path(gguf_path).parent.parent / "embeddings"
        with ExitStack() as swap:
            if self.token_vectors != "input":
                from bench.distilled_tokens import DistilledTokens, token_table

                ids = np.unique(
                    np.concatenate([np.asarray(t, np.int64) for t in tokenizer.bulk_tokenize(documents)])
                )
                self.distilled = DistilledTokens(gguf_path, self.encoder_cache or cache_dir)
                swap.enter_context(token_table(self.token_vectors, self.distilled, ids))
            build_index(datasets=[(1, "wordnet", dataset)], out_dir=build_dir, gguf_path=gguf_path,
                        tokenizer=tokenizer, config=self.config, sink=sink, cache_dir=cache_dir)
        self.corpus = load_corpus(build_dir)
        self.documents = documents
        self.index_bytes = sum(path.stat().st_size for path in build_dir.rglob("*") if path.is_file())
        self.retriever = Retriever(tokenizer, self.config)
        self.row_to_document = np.full(max(owners, default=-1) + 1, -1, dtype=np.int64)
        self.row_to_document[list(owners)] = list(owners.values())

    def documents_of(self, rows: np.ndarray, k: int) -> np.ndarray:
        """The first `k` distinct documents of build rows, best first (a document cut into several
        memories ranks at its best one), -1 padded to (k,)."""
        found = list(dict.fromkeys(int(d) for d in self.row_to_document[rows] if d >= 0))[:k]
        return np.array(found + [-1] * (k - len(found)), dtype=np.int64)

    def rank(self, queries: list[str], k: int) -> np.ndarray:
        ranked = np.full((len(queries), k), -1, dtype=np.int64)
        for position, query in enumerate(queries):
            q_pos, q_neg = self.retriever.query_vector(self.corpus, query)
            rows, _ = self.corpus.index.search_exact(q_pos, q_neg, min(4 * k, self.corpus.count))
            ranked[position] = self.documents_of(rows, k)
        return ranked


class LateInteractionRanker:
    """Exact MaxSim over every document's token-vector sequence (`TokenVectorEncoder.encode`).

    Every row of every sequence comes from one table (the weighted projected vector of a token
    id), except row 0 (each text's summary). So a query's similarities to the corpus vocabulary
    are computed once, gathered per document token and max-reduced per document, instead of a
    matmul against a million materialised rows; the summaries are one (docs, dim) matrix. The
    first queries are checked against `maxsim_many` on explicitly encoded sequences.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self.weighting, self.min_idf, self.drop = args.li_weighting, args.li_min_idf, args.li_drop_components
        self.model: EmbeddingModel = args.embedding_model
        self.name = (f"late interaction ({self.weighting}, drop {self.drop}"
                     + (f", idf>={self.min_idf:g})" if self.min_idf else ")"))

    def index(self, documents: list[str]) -> None:
        from engine import gguf
        from engine.encoder import compute_idf
        from engine.multivector.token_vectors import TokenVectorEncoder, idf_table
        from engine.vocab import isotropy_correction

        gguf_path, self.tokenizer = self.model.path, self.model.make_tokenizer()
        embeddings = gguf.load_token_embeddings(gguf_path, Path(gguf_path).parent.parent / "embeddings")
        tokens = self.tokenizer.bulk_tokenize(documents)
        vocab_size = embeddings.shape[0]
        df = np.zeros(vocab_size, dtype=np.int64)
        for ids in tokens:
            df[np.unique(np.asarray(ids, dtype=np.int64))] += 1
        seen = np.flatnonzero(df)
        idf = idf_table(vocab_size, seen, compute_idf(df[seen], len(documents)), len(documents))
        vocabulary = seen[~np.isin(seen, list(self.tokenizer.special_ids))]  # as the HDC build's vocab.idx
        isotropy = (
            isotropy_correction(vocabulary, embeddings, self.drop) if self.drop else None
        )  # as for_corpus
        self.encoder = TokenVectorEncoder(embeddings, idf=idf, special_ids=self.tokenizer.special_ids,
                                          weighting=self.weighting, min_idf=self.min_idf, isotropy=isotropy)
        self.documents, self.doc_tokens = documents, tokens
        content = [self.encoder.content_ids(ids) for ids in tokens]
        lengths = np.array([ids.size for ids in content], dtype=np.int64)
        self.searchable = lengths > 0  # a text without content tokens has no sequence
        flat = np.concatenate(content) if content else np.zeros(0, np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(lengths)])
        self.vocabulary, self.local = np.unique(flat, return_inverse=True)
        self.rows = self.encoder.token_rows(self.vocabulary)  # (v, dim), row i = token vocabulary[i]
        summaries = np.zeros((len(documents), self.encoder.dim), dtype=np.float32)
        for start in range(0, len(documents), 2048):
            stop = min(start + 2048, len(documents))
            lo, hi = self.offsets[start], self.offsets[stop]
            part = np.zeros((stop - start, self.encoder.dim), dtype=np.float32)
            np.add.at(
                part, np.repeat(np.arange(stop - start), lengths[start:stop]), self.rows[self.local[lo:hi]]
            )
            summaries[start:stop] = part
        norms = np.linalg.norm(summaries, axis=1, keepdims=True)
        self.summaries = np.divide(summaries, norms, out=summaries, where=norms > 0)
        self.starts = self.offsets[:-1]

    def scores(self, query: str) -> np.ndarray | None:
        """MaxSim of the query against every document (docs,) float32; None for an empty query."""
        from engine.multivector.token_vectors import EmptySequenceError

        try:
            query_rows = self.encoder.encode(self.tokenizer.tokenize(query))
        except EmptySequenceError:
            return None
        # One -inf column past the end, so an empty last segment still has a valid start index.
        by_token = np.full((query_rows.shape[0], self.local.size + 1), -np.inf, dtype=np.float32)
        by_token[:, :-1] = (query_rows @ self.rows.T)[:, self.local]
        best = np.maximum.reduceat(by_token, self.starts, axis=1)
        best = np.maximum(best, query_rows @ self.summaries.T)
        total = best.sum(axis=0)
        return np.where(self.searchable, total, -np.inf)

    def check_against_reference(self, queries: list[str], sample: int = 200) -> None:
        from engine.multivector.late_interaction import maxsim_many

        rng = np.random.default_rng(0)
        docs = rng.choice(
            np.flatnonzero(self.searchable), size=min(sample, int(self.searchable.sum())), replace=False
        )
        sequences = [self.encoder.encode(self.doc_tokens[d]) for d in docs]
        for query in queries:
            fast = self.scores(query)
            if fast is None:
                continue
            reference = maxsim_many(self.encoder.encode(self.tokenizer.tokenize(query)), sequences)
            np.testing.assert_allclose(fast[docs], reference, rtol=1e-4, atol=1e-4)

    def rank(self, queries: list[str], k: int) -> np.ndarray:
        self.check_against_reference(queries[:5])
        ranked = np.full((len(queries), k), -1, dtype=np.int64)
        for position, query in enumerate(queries):
            scores = self.scores(query)
            if scores is None:
                continue
            top = np.argpartition(-scores, min(k, scores.size - 1))[:k]
            top = top[np.lexsort((top, -scores[top]))]
            top = top[np.isfinite(scores[top])]
            ranked[position, : top.size] = top
        return ranked


class StoreLateInteractionRanker(LateInteractionRanker):
    """The same sequences in a real embedded Chroma store (`ChromaClient`, storage version 1.1 as
    the portal writes), ranked by its two-stage search: stage 1 takes `--store-candidates` by the
    summary row's cosine, stage 2 re-ranks them by MaxSim. Shows what stage 1 loses; slow to fill."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.candidates = args.store_candidates
        self.store_dir = args.work_dir / "chroma"
        self.name = f"LI via store ({self.candidates} cand., drop {self.drop})"

    def index(self, documents: list[str]) -> None:
        from engine.multivector import ChromaClient
        from engine.multivector.token_vectors import EmptySequenceError

        super().index(documents)
        self.store = ChromaClient(
            path=self.store_dir,
            visual_collection="eval_visual",
            text_collection="eval_text",
            storage_version="1.1",
        )
        batch: tuple[list[int], list[np.ndarray], list[dict]] = ([], [], [])
        for number, (text, tokens) in enumerate(zip(documents, self.doc_tokens, strict=True)):
            try:
                sequence = self.encoder.encode(tokens)
            except EmptySequenceError:
                continue
            batch[0].append(number)
            batch[1].append(sequence)
            batch[2].append({"filename": "wordnet", "source_path": "", "text": text})
            if len(batch[0]) == 256:
                self.store.add_batch_text("wordnet", *batch)
                batch = ([], [], [])
        if batch[0]:
            self.store.add_batch_text("wordnet", *batch)

    def rank(self, queries: list[str], k: int) -> np.ndarray:
        from engine.multivector.token_vectors import EmptySequenceError

        ranked = np.full((len(queries), k), -1, dtype=np.int64)
        for position, query in enumerate(queries):
            try:
                rows = self.encoder.encode(self.tokenizer.tokenize(query))
            except EmptySequenceError:
                continue
            hits = self.store.search_text_multivector(rows, n_candidates=max(self.candidates, k), n_results=k)
            found = [int(hit["metadata"]["chunk_id"]) for hit in hits]
            ranked[position, : len(found)] = found
        return ranked


# A ranker is one more column. "rrf" is not indexed: it fuses the hdc and li columns' rankings.
RANKERS: dict[str, Callable[[argparse.Namespace], Ranker]] = {
    "bm25": lambda args: BM25Ranker(),
    "words": lambda args: WordsRanker(),
    "hdc": HDCRanker,
    "li": LateInteractionRanker,
    "li-store": StoreLateInteractionRanker,
    "default": DefaultPathRanker,
    "meaning": MeaningPathRanker,
    "minilm": EncoderRanker,
    "minilm-bits": BinaryEncoderRanker,
    "minilm-asym": AsymmetricBitsRanker,
    "minilm-int8": Int8EncoderRanker,
    "minilm-static": StaticEncoderRanker,
}
FUSED = {
    "rrf": ("hdc", "li"),
    "default+bits": ("default", "minilm-bits"),
    "default+asym": ("default", "minilm-asym"),
    "default+int8": ("default", "minilm-int8"),
    "default+minilm": ("default", "minilm"),
    "default+static": ("default", "minilm-static"),
    "hybrid": ("bm25", "minilm"),
}
# The hybrid a team would switch on in Open WebUI (BM25 and all-MiniLM-L6-v2 fused by reciprocal
# rank, k = 60, equal weights): fixed, whatever --rrf-k and --rrf-weights say of the other fusions.
HYBRID_RRF = (60, [1.0, 1.0])
FUSED_LABELS = {
    "rrf": "RRF(HDC, LI)",
    "default+bits": "RRF(default path, MiniLM sign bits)",
    "default+asym": "RRF(default path, MiniLM sign bits, float query)",
    "default+int8": "RRF(default path, MiniLM int8)",
    "default+minilm": "RRF(default path, MiniLM float)",
    "default+static": "RRF(default path, MiniLM distilled static)",
    "hybrid": "Open WebUI hybrid: RRF(BM25, MiniLM)",
}
VARIANTS = ("hdc-cos", "hdc-csls", "hdc-template", "hdc-idfq")


@dataclass
class Result:
    name: str
    recall: float
    mrr: float
    index_s: float
    query_s: float
    ranked: np.ndarray  # (queries, DEPTH) document indices, -1 padded


def score(ranked: np.ndarray, relevant: np.ndarray) -> tuple[float, float]:
    """recall@k and MRR@k of rankings (q, k) against one relevant index per query (q,)."""
    hits = ranked == relevant[:, None]
    found = hits.any(axis=1)
    ranks = hits.argmax(axis=1) + 1
    return float(found.mean()), float(np.where(found, 1.0 / ranks, 0.0).mean())


def evaluate(ranker: Ranker, documents: list[str], queries: list[str], relevant: np.ndarray) -> Result:
    start = time.perf_counter()
    ranker.index(documents)
    indexed = time.perf_counter()
    ranked = ranker.rank(queries, DEPTH)
    answered = time.perf_counter()
    if ranked.shape != (len(queries), DEPTH):
        raise ValueError(
            f"{ranker.name}: rank() returned shape {ranked.shape}, expected {(len(queries), DEPTH)}"
        )
    recall, mrr = score(ranked[:, :K], relevant)
    return Result(ranker.name, recall, mrr, indexed - start, answered - indexed, ranked)


def fuse(label: str, parts: list[Result], relevant: np.ndarray, rrf_k: int, weights: list[float]) -> Result:
    """RRF of the parts' rankings per query (each part's top DEPTH) → a Result of the top DEPTH."""
    from engine.fusion import reciprocal_rank_fusion

    start = time.perf_counter()
    ranked = np.full_like(parts[0].ranked, -1)
    for query in range(ranked.shape[0]):
        rankings = [[int(d) for d in part.ranked[query] if d >= 0] for part in parts]
        fused = [key for key, _ in reciprocal_rank_fusion(rankings, k=rrf_k, weights=weights)][:DEPTH]
        ranked[query, : len(fused)] = fused
    fused_s = time.perf_counter() - start
    recall, mrr = score(ranked[:, :K], relevant)
    shown = "" if set(weights) == {1.0} else f" w={','.join(f'{w:g}' for w in weights)}"
    return Result(f"{label} k={rrf_k}{shown}", recall, mrr, sum(p.index_s for p in parts),
                  sum(p.query_s for p in parts) + fused_s, ranked)


PARAPHRASE_SETS = tuple(f"{source}-paraphrase" for source in paraphrase.SOURCES)
SET_CHOICES = ("wordnet", "gcide", "jargon", "gcide-definitions", "manpages", "pydocs", *PARAPHRASE_SETS)
QUERY_STYLES = {
    **{name: "a definition sentence removed from its entry" for name in PARAPHRASE_SETS},
    "gcide": "What is X?",
    "jargon": "What is X?",
    "gcide-definitions": "a definition, the word removed",
    "manpages": "the NAME line",
    "pydocs": "a docstring's summary line",
}


def load_set(args: argparse.Namespace):  # noqa: ANN201 - a KnownItemSet of either module
    if args.set == "wordnet":
        synsets = read_synsets(args.wordnet_dir)
        return build_known_item_set(synsets, args.docs, args.queries, seed=args.seed,
                                    with_hypernym=not args.no_hypernym)
    return load_text_set(args.set, args.docs, args.queries, seed=args.seed, wordnet_dir=args.wordnet_dir)


def load_text_set(name: str, n_documents: int, n_queries: int, *, seed: int, wordnet_dir: Path):  # noqa: ANN201
    """The sets of real text beside WordNet's lemma queries: glossaries ("What is X?"), definitions
    as queries (WordNet's definition of a word -> its GCIDE entry), manual pages (NAME line ->
    DESCRIPTION), the Python standard library's docstrings (summary line -> the rest)."""
    if name in PARAPHRASE_SETS:
        return paraphrase.known_item_set(name.removesuffix("-paraphrase"), n_documents, n_queries, seed=seed,
                                         wordnet_dir=wordnet_dir)
    if name == "manpages":
        return manpages.known_item_set(manpages.manpage_entries(), n_documents, n_queries, seed=seed)
    if name == "pydocs":
        return pydocs.known_item_set(pydocs.pydoc_entries(), n_documents, n_queries, seed=seed)
    if name == "gcide-definitions":
        return definition_set(gcide_entries(), read_synsets(wordnet_dir), n_documents, n_queries, seed=seed)
    entries = gcide_entries() if name == "gcide" else jargon_entries()
    return glossary_set(name, entries, n_documents, n_queries, seed=seed)


def evaluate_variants(hdc: HDCRanker, variants: list[str], data, relevant: np.ndarray) -> dict[str, Result]:  # noqa: ANN001
    """The re-scored HDC rankings of bench/ranking_variants.py, on the HDC ranker's own build."""
    start = time.perf_counter()
    scorer = ScoreVariants(hdc.corpus, hdc.retriever, [d for d in data.documents])
    prepared = time.perf_counter() - start
    # Rows are build rows; a document repeated in the set is indexed once (row_to_document).
    out = {}
    for variant in variants:
        start = time.perf_counter()
        ranked = np.full((len(data.queries), DEPTH), -1, dtype=np.int64)
        for position, query in enumerate(data.queries):
            rows = rank_by(scorer.scores(variant, query), DEPTH)
            ranked[position, : rows.size] = hdc.row_to_document[rows]
        recall, mrr = score(ranked[:, :K], relevant)
        out[variant] = Result(
            f"HDC {variant[4:]} (rescored)", recall, mrr, prepared, time.perf_counter() - start, ranked
        )
    return out


def report_build(hdc: HDCRanker | DefaultPathRanker, result: Result, n_documents: int) -> None:
    """The HDC build's speed and size (the index directory: vocabulary index, hypervectors, texts)."""
    print(
        f"{result.name} build: {n_documents / result.index_s:,.0f} docs/s ({result.index_s:.2f} s, load and "
        f"queries' encoder setup included), index {hdc.index_bytes / 1e6:,.1f} MB"
    )
    distilled = getattr(hdc, "distilled", None)
    if distilled is not None:
        rate = (
            f"{distilled.encoded / distilled.encode_s:,.0f} tokens/s" if distilled.encoded else "all cached"
        )
        print(f"  distilled token vectors: {distilled.encoded:,} tokens encoded in this run ({rate}), "
              f"cache {distilled.cache}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--docs", type=int, default=20000, help="corpus size (queries' documents + distractors)"
    )
    parser.add_argument("--queries", type=int, default=1000, help="number of known-item queries")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-hypernym", action="store_true", help="queries are the lemmas only")
    parser.add_argument("--dims", type=int, default=10000, help="HDC dimensions")
    parser.add_argument("--ngram", type=int, default=5, help="HDC n-gram length")
    parser.add_argument("--hdc-seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=2, help="numba / torch threads")
    parser.add_argument("--li-weighting", default="sqrt_idf", help="token row weights: none, idf, sqrt_idf")
    parser.add_argument("--li-drop-components", type=int, default=16,
                        help="isotropy correction: mean and this many principal directions removed (0: none)")
    parser.add_argument(
        "--li-min-idf", type=float, default=0.0, help="drop tokens with a lower IDF (0: keep all)"
    )
    parser.add_argument("--store-candidates", type=int, default=100, help="li-store: stage-1 candidates")
    parser.add_argument("--rrf-k", type=int, default=60)
    parser.add_argument("--rrf-weights", default="1,1", help="RRF weight of each fused ranking (HDC, LI)")
    known = [*RANKERS, *VARIANTS, *FUSED]
    default = [name for name in known if name != "li-store"]  # li-store: ask for it, on a small --docs
    parser.add_argument(
        "--encoder-cache",
        type=Path,
        default=None,
        help="minilm: keep the windows' vectors here, keyed by their text (rerunning a set skips "
        "encoding, and the encoder's build rate is then not measured); --token-vectors: the "
        "distilled token vectors too (default: beside the embedding cache)",
    )
    parser.add_argument("--set", default="wordnet", choices=SET_CHOICES)
    parser.add_argument(
        "--token-vectors",
        default="input",
        choices=("input", "minilm", "concat"),
        help="what the hdc and default rankers' build projects: the GGUF's input embeddings, or "
        "static vectors distilled from all-MiniLM-L6-v2 alone or beside them "
        "(bench/distilled_tokens.py)",
    )
    parser.add_argument(
        "--rankers", default=",".join(default), help=f"comma-separated, from: {', '.join(known)}"
    )
    parser.add_argument(
        "--work-dir", type=Path, default=None, help="where indexes are built (default: a temp dir)"
    )
    parser.add_argument("--wordnet-dir", type=Path, default=Path("/usr/share/wordnet"))
    parser.add_argument(
        "--gguf",
        default=None,
        help="model whose token embeddings build the hdc and li rankers: "
        "a path, 'chat' (packaged Qwen2.5-Coder) or 'embeddings' (packaged Gemma 3, default)",
    )
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.rankers.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown:
        parser.error(f"unknown rankers: {', '.join(unknown)} (known: {', '.join(known)})")
    for name in names:
        missing = [
            part for part in FUSED.get(name, ("hdc",) if name in VARIANTS else ()) if part not in names
        ]
        if missing:
            parser.error(f"{name} fuses {', '.join(FUSED[name])}: add {', '.join(missing)} to --rankers")

    os.environ.setdefault("NUMBA_NUM_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)
    try:
        data = load_set(args)
    except (WordNetMissing, GlossaryMissing, manpages.ManPagesMissing) as missing:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    relevant = np.asarray(data.relevant, dtype=np.int64)

    print_hardware()
    print(f"== known-item retrieval: {args.set} ==")
    style = (
        f"lemmas{'' if args.no_hypernym else ' + hypernym'}"
        if args.set == "wordnet"
        else QUERY_STYLES[args.set]
    )
    print(f"documents: {len(data.documents)}  queries: {len(data.queries)}  relevant per query: 1  "
          f"query style: {style}  seed: {args.seed}")
    for query, target in list(zip(data.queries, data.relevant, strict=True))[:3]:
        print(f"  e.g. {query!r} -> {data.documents[target][:90]!r}")

    with tempfile.TemporaryDirectory(prefix="hdrag-eval-") as scratch, ExitStack() as servers:
        args.work_dir = args.work_dir or Path(scratch)
        if {"hdc", "li", "li-store", "default", "meaning"} & set(names):
            args.embedding_model = open_embedding_model(args.gguf, servers, threads=args.threads)
            print(args.embedding_model.describe())
            print(measure_tokenization(args.embedding_model, data.documents))
        by_name: dict[str, Result] = {}
        rankers: dict[str, Ranker] = {}
        for name in names:
            if name in RANKERS:
                rankers[name] = RANKERS[name](args)
                by_name[name] = evaluate(rankers[name], data.documents, data.queries, relevant)
        if any(name in VARIANTS for name in names):
            by_name.update(
                evaluate_variants(rankers["hdc"], [n for n in names if n in VARIANTS], data, relevant)
            )
        for name in names:
            if name in FUSED:
                rrf_k, weights = HYBRID_RRF if name == "hybrid" else (
                    args.rrf_k, [float(w) for w in args.rrf_weights.split(",")])
                by_name[name] = fuse(FUSED_LABELS[name], [by_name[part] for part in FUSED[name]], relevant,
                                     rrf_k, weights)
        results = [by_name[name] for name in names]
        if "hdc" in rankers:
            report_build(rankers["hdc"], by_name["hdc"], len(data.documents))
        if "default" in rankers:
            report_build(rankers["default"], by_name["default"], len(data.documents))
            print(f"default path's fusion evidence: {rankers['default'].fusion.evidence}")
        for name in ("minilm", "minilm-static", "meaning"):
            if name in rankers:
                print(rankers[name].build_rate())

    print(f"\n{'ranker':<40} {'recall@10':>10} {'MRR@10':>8} {'index s':>9} {'query s':>9} {'top hub':>8} "
          f"{'hubs>1/3':>8} {'distinct':>8}")
    for result in results:
        hubs = hubness(result.ranked)
        print(
            f"{result.name:<40} {result.recall:>10.4f} {result.mrr:>8.4f} {result.index_s:>9.2f} "
            f"{result.query_s:>9.2f}"
            f" {hubs['top_hub_share']:>8.3f} {hubs['hubs_over_third']:>8d} {hubs['distinct_share']:>8.3f}"
        )
    if "hdc" in by_name and "li" in by_name:
        # Informative only: picking the best cell here would tune on the test queries.
        parts = [by_name["hdc"], by_name["li"]]
        print("\nRRF(HDC, LI) sweep, MRR@10 (recall@10) by k and LI weight (HDC weight 1):")
        for rrf_k in (10, 60, 200):
            cells = [fuse("", parts, relevant, rrf_k, [1.0, weight]) for weight in (0.5, 1.0, 2.0, 4.0)]
            print(f"  k={rrf_k:<4}" + "".join(f"  w={weight:g}: {cell.mrr:.4f} ({cell.recall:.4f})"
                                         for weight, cell in zip((0.5, 1.0, 2.0, 4.0), cells, strict=True)))
    if len(results) >= 2:
        # The baseline is HDC alone when it ran (fusion is measured against it), else the first column.
        base = by_name.get("hdc", results[0])
        print()
        for other in results:
            if other is not base:
                print(
                    f"{other.name} vs {base.name}: recall@10 {other.recall - base.recall:+.4f}, MRR@10 "
                    f"{other.mrr - base.mrr:+.4f} (ratio "
                    f"{other.mrr / base.mrr if base.mrr else float('nan'):.3f})"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
