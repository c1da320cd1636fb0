"""Known-item retrieval quality: the HDC retriever's raw ranking against BM25 on the same set.

Corpus and queries come from WordNet 3.0 (Debian package `wordnet-base`; see bench/data/wordnet.py):
each query has exactly one relevant document. Reported per ranker: recall@10 (the relevant
document is in the top 10) and MRR@10 (mean of 1/rank, 0 past rank 10), with the query and
document counts and the time each ranker took to index and to answer.

The HDC column is the index's exact search on the encoded query: no blend, threshold, dedup or
MMR, so it measures the encoding alone. Rankers are registered in `RANKERS`; a third column (the
multi-vector late-interaction store) is one more entry there.

    .venv/bin/python -m bench.retrieval_eval --docs 5000 --queries 300       # quick, < 2 min
    .venv/bin/python -m bench.retrieval_eval --docs 40000 --queries 2000     # moderate
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

if __package__ in (None, ""):
    # Run as a script, bench/ would lead sys.path and bench/tokenize.py would shadow the stdlib's.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench.data.wordnet import WordNetMissing, build_known_item_set, read_synsets  # noqa: E402

try:
    from bench._hw import print_hardware  # noqa: E402
except ImportError:  # pragma: no cover - the shared helper is optional for this script
    import platform

    def print_hardware() -> None:
        print("== hardware ==")
        print(f"cpu: {platform.processor() or platform.machine()}  cores: {os.cpu_count()}")


K = 10


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
        self._retriever.index(bm25s.tokenize(documents, stopwords="en", show_progress=False), show_progress=False)
        self._n = len(documents)

    def rank(self, queries: list[str], k: int) -> np.ndarray:
        tokens = self._bm25s.tokenize(queries, stopwords="en", show_progress=False)
        results, scores = self._retriever.retrieve(tokens, k=min(k, self._n), show_progress=False)
        ranked = np.full((len(queries), k), -1, dtype=np.int64)
        # bm25s fills rows with arbitrary documents at score 0 once real matches run out.
        ranked[:, : results.shape[1]] = np.where(scores > 0, results, -1)
        return ranked


class HDCRanker:
    """The engine end to end: `build_index` on the documents (as a JSONL dataset), `load_corpus`,
    queries encoded by the `Retriever`, ranked by the index's exact search (no blend/threshold/MMR)."""

    name = "HDC exact (engine)"

    def __init__(self, args: argparse.Namespace) -> None:
        from engine.config import Config

        self.config = Config(hdc_dimensions=args.dims, hdc_ngram=args.ngram, hdc_seed=args.hdc_seed)
        self.work_dir: Path = args.work_dir
        self.name = f"HDC exact (dims {args.dims}, ngram {args.ngram})"

    def index(self, documents: list[str]) -> None:
        import json

        from engine.build import build_index
        from engine.corpus import load_corpus
        from engine.models import default_gguf_path
        from engine.retrieval import Retriever
        from engine.tokenizer import GGUFTokenizer

        gguf_path = default_gguf_path()
        tokenizer = GGUFTokenizer.from_gguf(gguf_path)
        dataset = self.work_dir / "documents.jsonl"
        with open(dataset, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps({"text": text}, ensure_ascii=False) + "\n" for text in documents)
        # The build drops duplicate texts, so rows are mapped back to documents through the records.
        row_to_document = np.full(len(documents), -1, dtype=np.int64)

        def sink(records: list[dict]) -> None:
            for record in records:
                row_to_document[record["hdv_idx"]] = record["metadata"]["record"] - 1  # JSONL lines are 1-based

        build_dir = self.work_dir / "hdc-build"
        build_index(datasets=[(1, "wordnet", dataset)], out_dir=build_dir, gguf_path=gguf_path, tokenizer=tokenizer,
                    config=self.config, sink=sink, cache_dir=Path(gguf_path).parent.parent / "embeddings")
        self.corpus = load_corpus(build_dir)
        self.retriever = Retriever(tokenizer, self.config)
        self.row_to_document = row_to_document

    def rank(self, queries: list[str], k: int) -> np.ndarray:
        ranked = np.full((len(queries), k), -1, dtype=np.int64)
        for position, query in enumerate(queries):
            q_pos, q_neg, _ = self.retriever.encode_text(self.corpus, query)
            rows, _ = self.corpus.index.search_exact(q_pos, q_neg, k)
            ranked[position, : rows.size] = self.row_to_document[rows]
        return ranked


# A ranker is one more column: the multi-vector late-interaction store registers here.
RANKERS: dict[str, Callable[[argparse.Namespace], Ranker]] = {
    "bm25": lambda args: BM25Ranker(),
    "hdc": HDCRanker,
}


@dataclass
class Result:
    name: str
    recall: float
    mrr: float
    index_s: float
    query_s: float


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
    ranked = ranker.rank(queries, K)
    answered = time.perf_counter()
    if ranked.shape != (len(queries), K):
        raise ValueError(f"{ranker.name}: rank() returned shape {ranked.shape}, expected {(len(queries), K)}")
    recall, mrr = score(ranked, relevant)
    return Result(ranker.name, recall, mrr, indexed - start, answered - indexed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=20000, help="corpus size (queries' documents + distractors)")
    parser.add_argument("--queries", type=int, default=1000, help="number of known-item queries")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-hypernym", action="store_true", help="queries are the lemmas only")
    parser.add_argument("--dims", type=int, default=10000, help="HDC dimensions")
    parser.add_argument("--ngram", type=int, default=5, help="HDC n-gram length")
    parser.add_argument("--hdc-seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=2, help="numba / torch threads")
    parser.add_argument("--rankers", default=",".join(RANKERS), help=f"comma-separated, from: {', '.join(RANKERS)}")
    parser.add_argument("--work-dir", type=Path, default=None, help="where indexes are built (default: a temp dir)")
    parser.add_argument("--wordnet-dir", type=Path, default=Path("/usr/share/wordnet"))
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.rankers.split(",") if name.strip()]
    unknown = [name for name in names if name not in RANKERS]
    if unknown:
        parser.error(f"unknown rankers: {', '.join(unknown)} (known: {', '.join(RANKERS)})")

    os.environ.setdefault("NUMBA_NUM_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)
    try:
        synsets = read_synsets(args.wordnet_dir)
    except WordNetMissing as missing:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    data = build_known_item_set(synsets, args.docs, args.queries, seed=args.seed, with_hypernym=not args.no_hypernym)
    relevant = np.asarray(data.relevant, dtype=np.int64)

    print_hardware()
    print("== known-item retrieval: WordNet 3.0 glosses ==")
    print(f"documents: {len(data.documents)}  queries: {len(data.queries)}  relevant per query: 1  "
          f"query style: lemmas{'' if args.no_hypernym else ' + hypernym'}  seed: {args.seed}")
    for query, target in list(zip(data.queries, data.relevant, strict=True))[:3]:
        print(f"  e.g. {query!r} -> {data.documents[target][:90]!r}")

    with tempfile.TemporaryDirectory(prefix="hdrag-eval-") as scratch:
        args.work_dir = args.work_dir or Path(scratch)
        results = [evaluate(RANKERS[name](args), data.documents, data.queries, relevant) for name in names]

    print(f"\n{'ranker':<34} {'recall@10':>10} {'MRR@10':>8} {'index s':>9} {'query s':>9}")
    for result in results:
        print(f"{result.name:<34} {result.recall:>10.4f} {result.mrr:>8.4f} {result.index_s:>9.2f} {result.query_s:>9.2f}")
    if len(results) >= 2:
        base, other = results[0], results[1]
        print(f"\n{other.name} vs {base.name}: recall@10 {other.recall - base.recall:+.4f}, "
              f"MRR@10 {other.mrr - base.mrr:+.4f} (ratio {other.mrr / base.mrr if base.mrr else float('nan'):.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
