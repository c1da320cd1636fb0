"""Fusion and ranking variants on every known-item set, from score matrices computed once.

For one set (`--set`, as bench/retrieval_eval.py) it builds the HDC index, the exact
late-interaction ranker and BM25 once, scores EVERY document for every test query and for the
corpus's own self-queries (`engine.fusion.self_queries`, every kind), and saves the matrices to
`--out` (npz). `--report` then evaluates fusion rules and HDC ranking variants on saved matrices
without rebuilding anything: recall@10 / MRR@10 on the test queries, and what each gate chooses
from the self-queries alone (never from the test queries).

    python -m bench.fusion_eval --set jargon --docs 3000 --queries 200 --out var/fusion/jargon.npz
    python -m bench.fusion_eval --report var/fusion/*.npz
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench.ranking_variants import hubness  # noqa: E402
from bench.retrieval_eval import SET_CHOICES, HDCRanker, LateInteractionRanker, load_set  # noqa: E402
from engine.bits import score64  # noqa: E402
from engine.fusion import (  # noqa: E402
    FUSION_RULES,
    SELF_QUERY_KINDS,
    choose_fusion,
    fuse_scores,
    reciprocal_ranks,
    self_queries,
)
from engine.gate import WORD_FALLBACK  # noqa: E402
from engine.multivector.late_interaction import maxsim_many  # noqa: E402
from engine.multivector.token_vectors import EmptySequenceError  # noqa: E402
from engine.retrieval import FUSION_DEPTH  # noqa: E402

K = 10
SELF_QUERY_DOCS = 64


def _bm25_scores(documents: list[str], queries: list[str]) -> np.ndarray:
    import bm25s

    retriever = bm25s.BM25()
    corpus_tokens = bm25s.tokenize(documents, stopwords="en", show_progress=False)
    retriever.index(corpus_tokens, show_progress=False)
    vocabulary = corpus_tokens.vocab
    out = np.zeros((len(queries), len(documents)), dtype=np.float32)
    for number, tokens in enumerate(bm25s.tokenize(queries, stopwords="en", show_progress=False,
                                                   return_ids=False)):
        known = [t for t in tokens if t in vocabulary]
        if known:
            out[number] = retriever.get_scores(known)
    return out


def _score_matrix(queries: list[str], documents: int, score, *, missing: float) -> np.ndarray:  # noqa: ANN001
    """(queries, documents) float32: `score(query)`'s scores of every document, or `missing` on a
    query's row where it returns None (nothing to score with)."""
    out = np.full((len(queries), documents), missing, dtype=np.float32)
    for number, query in enumerate(queries):
        scores = score(query)
        if scores is not None:
            out[number] = scores
    return out


def _word_scores(
    documents: list[str], queries: list[str], made: list, self_targets: list[int], n: int
) -> np.ndarray:
    """The portal's exact-word channel (`engine.lexical.WordIndex`, BM25 over words) for every query
    and document; a held-out self-query's target is scored as the rest of its text, as a build's
    evidence does. nan: a query without an indexed word (not fused)."""
    from engine.lexical import WordIndex

    index = WordIndex.build(documents)
    out = _score_matrix(queries, len(documents), index.score_all, missing=np.nan)
    for number, made_query in enumerate(made):
        if made_query.rest is not None:
            out[n + number, self_targets[number]] = index.score_texts(made_query.query, [made_query.rest])[0]
    return out


def collect(args: argparse.Namespace) -> None:
    data = load_set(args)
    rng = np.random.default_rng(1)
    sample = rng.choice(
        len(data.documents), size=min(args.self_query_docs, len(data.documents)), replace=False
    )
    made = self_queries([data.documents[i] for i in sample], kinds=SELF_QUERY_KINDS)
    self_texts = [q.query for q in made]
    self_targets = [int(sample[q.index]) for q in made]
    self_kinds = [q.kind for q in made]
    queries = list(data.queries) + self_texts
    started = time.perf_counter()
    hdc = HDCRanker(args)
    hdc.index(data.documents)
    rows = np.arange(hdc.corpus.count, dtype=np.int64)
    row_to_document = hdc.row_to_document[:hdc.corpus.count]  # the build drops repeated texts
    pos, neg = hdc.corpus.index.get_bitmaps(rows)
    doc_nnz = np.zeros(len(data.documents), dtype=np.float32)
    doc_nnz[row_to_document] = np.bitwise_count(pos | neg).sum(axis=1)
    hdc_scores = np.full((len(queries), len(data.documents)), -np.inf, dtype=np.float32)
    query_nnz = np.zeros(len(queries), dtype=np.float32)
    for number, query in enumerate(queries):
        q_pos, q_neg = hdc.retriever.query_vector(hdc.corpus, query)
        query_nnz[number] = np.bitwise_count(q_pos | q_neg).sum()
        hdc_scores[number, row_to_document] = hdc.corpus.index.score_rows(rows, q_pos, q_neg)
    n = len(data.queries)
    for number, made_query in enumerate(made):
        if made_query.rest is not None:  # held out: the target is scored as the text without the query
            q_pos, q_neg = hdc.retriever.query_vector(hdc.corpus, made_query.query)
            d_pos, d_neg, _ = hdc.retriever.encode_text(hdc.corpus, made_query.rest)
            hdc_scores[n + number, self_targets[number]] = score64(d_pos[None], d_neg[None], q_pos, q_neg)[0]
    hdc_s = time.perf_counter() - started
    started = time.perf_counter()
    late = LateInteractionRanker(args)
    late.index(data.documents)
    li_scores = _score_matrix(queries, len(data.documents), late.scores, missing=-np.inf)
    for number, made_query in enumerate(made):
        if made_query.rest is not None:
            try:
                query_rows = late.encoder.encode(late.tokenizer.tokenize(made_query.query))
                rest_rows = late.encoder.encode(late.tokenizer.tokenize(made_query.rest))
            except EmptySequenceError:
                li_scores[n + number, self_targets[number]] = -np.inf
                continue
            li_scores[n + number, self_targets[number]] = maxsim_many(query_rows, [rest_rows])[0]
    li_s = time.perf_counter() - started
    bm25 = _bm25_scores(data.documents, queries)
    words = _word_scores(data.documents, queries, made, self_targets, n)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        args.out,
        hdc=hdc_scores,
        li=li_scores,
        bm25=bm25,
        words=words,
        doc_nnz=doc_nnz,
        query_nnz=query_nnz,
        tests=np.asarray(data.relevant, dtype=np.int64),
        self_targets=np.asarray(self_targets),
        self_kinds=np.asarray(self_kinds),
        name=args.set,
        times=np.array([hdc_s, li_s]),
    )
    print(
        f"{args.set}: {len(data.documents)} documents, {len(data.queries)} test + {len(self_texts)} "
        f"self-queries; HDC {hdc_s:.0f} s, LI {li_s:.0f} s -> {args.out}"
    )


def metrics(scores: np.ndarray, targets: np.ndarray) -> tuple[float, float]:
    """recall@10 and MRR@10 of score rows (q, m) against target positions (q,) (-1: not there)."""
    ranks = reciprocal_ranks(scores, targets, K)
    return float((ranks > 0).mean()), float(ranks.mean())


def pooled(hdc: np.ndarray, li: np.ndarray, targets: np.ndarray, depth: int = FUSION_DEPTH
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What a search fuses: each query's HDC top `depth` documents (q, depth), their HDC and late
    scores, and the target's position among them (-1: HDC did not bring it into the pool)."""
    top = np.argsort(-hdc, axis=1, kind="stable")[:, :depth]
    found = top == targets[:, None]
    positions = np.where(found.any(axis=1), found.argmax(axis=1), -1)
    return top, np.take_along_axis(hdc, top, axis=1), np.take_along_axis(li, top, axis=1), positions


def top_documents(top: np.ndarray, fused: np.ndarray, k: int = K) -> np.ndarray:
    order = np.argsort(-fused, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(top, order, axis=1)


def report(paths: list[Path]) -> None:
    for path in paths:
        data = np.load(path)
        n = len(data["tests"])
        hdc, li, bm25 = data["hdc"], data["li"], data["bm25"]
        tests = data["tests"]
        print(f"\n== {data['name']} ({hdc.shape[1]} documents, {n} test queries) ==")
        cos = hdc / np.sqrt(
            np.maximum(data["doc_nnz"][None, :], 1) * np.maximum(data["query_nnz"][:, None], 1)
        )
        everything = np.arange(hdc.shape[1])[None, :].repeat(n, axis=0)
        for name, scores in (
            ("BM25", bm25[:n]),
            ("HDC", hdc[:n]),
            ("HDC cos", cos[:n]),
            ("LI (every document)", li[:n]),
        ):
            _line(name, metrics(scores, tests), top_documents(everything, scores))
        top, pool_hdc, pool_li, positions = pooled(hdc[:n], li[:n], tests)
        for rule in FUSION_RULES:
            fused = fuse_scores(pool_hdc, pool_li, rule=rule)
            _line(f"pool {FUSION_DEPTH}, {rule}", metrics(fused, positions), top_documents(top, fused))
        kinds, targets = data["self_kinds"], data["self_targets"]
        _, s_hdc, s_li, s_pos = pooled(hdc[n:], li[n:], targets)
        for name, choice in (
            ("every kind", choose_fusion(s_hdc, s_li, s_pos, kinds=kinds)),
            (
                "held-out only",
                choose_fusion(s_hdc[kinds == "heldout"], s_li[kinds == "heldout"], s_pos[kinds == "heldout"]),
            ),
        ):
            recall, mrr = metrics(fuse_scores(pool_hdc, pool_li, rule=choice.rule), positions)
            print(
                f"  gate on {name}: {choice.rule} (gain {choice.evidence['gain']}, z {choice.evidence['z']})"
                f" -> test {recall:.3f} / {mrr:.3f}"
            )
        choice = choose_fusion(s_hdc, s_li, s_pos, kinds=kinds, rules=FUSION_RULES)
        for kind, table in choice.evidence["mrr_by_kind"].items():
            print(f"  self {kind:<8} n={(kinds == kind).sum():<4} MRR@10 " + " ".join(
                f"{rule} {value:.3f}" for rule, value in table.items()))
        if "words" in data:  # the exact-word channel, as the portal's builds gate and fuse it
            words = data["words"]
            _line("words (every document)", metrics(np.nan_to_num(words[:n], nan=0.0), tests),
                  top_documents(everything, np.nan_to_num(words[:n], nan=0.0)))
            pool_words = np.take_along_axis(words[:n], top, axis=1)
            for rule in ("z:0.5", "z:1", "z:2", "late"):
                fused = fuse_scores(pool_hdc, pool_words, rule=rule)
                _line(
                    f"pool {FUSION_DEPTH}, HDC+words {rule}",
                    metrics(fused, positions),
                    top_documents(top, fused),
                )
            _, s_hdc, s_words, s_pos = pooled(hdc[n:], words[n:], targets)
            choice = choose_fusion(s_hdc, s_words, s_pos, kinds=kinds, fallback=WORD_FALLBACK)
            fused = fuse_scores(pool_hdc, pool_words, rule=choice.rule)
            _line(f"HDC+words, gate: {choice.rule}", metrics(fused, positions), top_documents(top, fused))


def _line(name: str, figures: tuple[float, float], top: np.ndarray) -> None:
    hubs = hubness(top)
    print(f"  {name:<26} {figures[0]:.3f} / {figures[1]:.3f}   top hub {hubs['top_hub_share']:.3f} "
          f"distinct {hubs['distinct_share']:.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", default="wordnet", choices=SET_CHOICES)
    parser.add_argument("--docs", type=int, default=3000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-hypernym", action="store_true")
    parser.add_argument("--dims", type=int, default=10000)
    parser.add_argument("--ngram", type=int, default=5)
    parser.add_argument("--hdc-seed", type=int, default=42)
    parser.add_argument("--li-weighting", default="sqrt_idf")
    parser.add_argument("--li-drop-components", type=int, default=16)
    parser.add_argument("--li-min-idf", type=float, default=0.0)
    parser.add_argument("--wordnet-dir", type=Path, default=Path("/usr/share/wordnet"))
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--report", type=Path, nargs="*", default=None)
    parser.add_argument(
        "--gguf", default=None, help="model whose token embeddings build HDC and LI (as retrieval_eval)"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--self-query-docs",
        type=int,
        default=SELF_QUERY_DOCS,
        help="documents the gate's self-queries are made from (default: as a build's evidence)",
    )
    args = parser.parse_args(argv)
    if args.report:
        report(args.report)
        return 0
    import tempfile
    from contextlib import ExitStack

    from bench.embedding_model import open_embedding_model

    with tempfile.TemporaryDirectory(prefix="hdrag-fusion-") as scratch, ExitStack() as servers:
        args.work_dir = args.work_dir or Path(scratch)
        # The rankers read their model from here since retrieval_eval gained --gguf.
        args.embedding_model = open_embedding_model(args.gguf, servers, threads=args.threads)
        args.out = args.out or Path(tempfile.gettempdir()) / "fusion" / f"{args.set}.npz"
        collect(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
