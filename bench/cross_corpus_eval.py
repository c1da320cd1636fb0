"""Searching two corpora together against searching the right one alone (issue 31.3).

Each pair of known-item sets (bench/retrieval_eval.py) becomes two corpora, built by the engine as
the portal builds them (HDC index and exact-word index, the fusion rule chosen from each corpus's
own self-queries). Every query of either set is ranked three ways, recall@10 and MRR@10 against its
one relevant document:

* alone: the query's own corpus only (the baseline: what searching the right corpus finds);
* raw merge: both corpora's candidates by raw HDC score (what the retriever did before), or, fused,
  by 1 / (60 + rank) in each corpus's fused order (rank interleaving);
* per length: each corpus's ranking kept and the corpora interleaved by their r-th best HDC score
  per unit of the query's length in that corpus (what the retriever did before);
* merged: `engine.ranking.merge_targets` as the retriever calls it, that key times 1 + the corpus's
  word coverage (the largest share of the query's words one of its first 10 candidates holds).

    .venv/bin/python -m bench.cross_corpus_eval --docs 2000 --queries 200
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._hw import print_hardware  # noqa: E402
from bench.retrieval_eval import K, load_set, score  # noqa: E402

CANDIDATES = 500
PAIRS = "jargon+manpages,pydocs+gcide,manpages+pydocs"


def _build(root: Path, name: str, documents: list[str], *, gguf_path: Path, tokenizer, config, retriever):  # noqa: ANN001, ANN202
    from engine.build import build_index
    from engine.channels import WORDS, SearchTarget
    from engine.fusion import FusionChoice
    from engine.gate import channel_evidence
    from engine.lexical import WordIndex
    from engine.loaded_build import MemoryRecord, load_corpus

    path = root / f"{name}.jsonl"
    path.write_text(
        "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in documents), encoding="utf-8"
    )
    rows: dict[int, int] = {}
    texts: dict[int, str] = {}

    def sink(records: list[dict]) -> None:
        for record in records:
            rows[record["hdv_idx"]] = record["metadata"]["record"] - 1
            texts[record["hdv_idx"]] = record["text"]

    build_index(datasets=[(1, name, path)], out_dir=root / name, gguf_path=gguf_path, tokenizer=tokenizer,
                config=config, sink=sink, cache_dir=Path(gguf_path).parent.parent / "embeddings")
    corpus = load_corpus(root / name)
    words = WordIndex.build(texts[r] for r in range(corpus.count))

    class Store:
        def get_memories(self, wanted: list[int]) -> dict[int, MemoryRecord]:
            return {r: MemoryRecord(hdv_idx=r, content_hash=str(r), text=texts[r], token_count=1)
                    for r in wanted if r in texts}

    target = SearchTarget(corpus=corpus, store=Store(), name=name, channels={WORDS: words})
    rule = channel_evidence(retriever=retriever, target=target, channel=WORDS)
    row_document = np.array([rows[r] for r in range(corpus.count)], dtype=np.int64)
    return SearchTarget(corpus=corpus, store=Store(), name=name, channels={WORDS: words},
                        rules={WORDS: FusionChoice.from_dict(rule.to_dict())}), row_document


def _orders(retriever, query: str, targets, fused: bool):  # noqa: ANN001, ANN202
    """Each target's candidates in its own ranking (HDC, or fused), as the retriever makes them."""
    from engine.channels import FIRST
    from engine.ranking import Candidate, group_by_target, query_length
    from engine.stages import bind, first_stage

    candidates = []
    vectors = []
    nonzero = {}
    for number, target in enumerate(targets):
        q_pos, q_neg = retriever.query_vector(target.corpus, query)
        vectors.append((q_pos, q_neg))
        if not (q_pos.any() or q_neg.any()):
            continue
        nonzero[number] = query_length(q_pos, q_neg)
        found, scores = target.corpus.index.search_exact(q_pos, q_neg, min(CANDIDATES, target.corpus.count))
        candidates.extend(Candidate(number, int(r), int(s)) for r, s in zip(found, scores, strict=True))
    candidates.sort(key=lambda c: (-c.score, c.target, c.row))
    if fused:
        orders = first_stage(targets, bind(targets, query, FIRST), candidates, vectors)
        if orders is not None:
            return orders, nonzero
    return group_by_target(candidates), nonzero


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", default=PAIRS)
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dims", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--wordnet-dir", type=Path, default=Path("/usr/share/wordnet"))
    args = parser.parse_args(argv)
    os.environ.setdefault("NUMBA_NUM_THREADS", str(args.threads))
    import torch

    from engine.config import Config
    from engine.fusion import DEFAULT_K
    from engine.model_files import default_gguf_path
    from engine.ranking import merge_targets, word_coverage
    from engine.retrieval import COVERAGE_DEPTH, Retriever
    from engine.spm import GGUFTokenizer

    torch.set_num_threads(args.threads)
    print_hardware()
    gguf_path = default_gguf_path()
    tokenizer = GGUFTokenizer.from_gguf(str(gguf_path))
    config = Config(hdc_dimensions=args.dims)
    retriever = Retriever(tokenizer, config)
    print(
        f"\n{'pair':<22} {'queries of':<10} {'mode':<6} {'alone R@10':>10} {'raw R@10':>9} "
        f"{'length R@10':>11} {'merged R@10':>11} {'alone MRR':>9} {'raw MRR':>8} {'length MRR':>10} "
        f"{'merged MRR':>10}"
    )
    for pair in [p.strip() for p in args.pairs.split(",") if p.strip()]:
        names = pair.split("+")
        with tempfile.TemporaryDirectory(prefix="hdrag-cross-") as scratch:
            sets, targets, mappings = [], [], []
            for name in names:
                data = load_set(
                    argparse.Namespace(
                        set=name,
                        docs=args.docs,
                        queries=args.queries,
                        seed=args.seed,
                        no_hypernym=False,
                        wordnet_dir=args.wordnet_dir,
                    )
                )
                target, rows = _build(
                    Path(scratch),
                    name,
                    data.documents,
                    gguf_path=gguf_path,
                    tokenizer=tokenizer,
                    config=config,
                    retriever=retriever,
                )
                sets.append(data)
                targets.append(target)
                mappings.append(rows)
            for own, data in enumerate(sets):
                relevant = np.asarray(data.relevant, dtype=np.int64)
                for fused in (False, True):
                    modes = ("alone", "raw", "length", "merged")
                    ranked = {mode: np.full((len(data.queries), K), -1, dtype=np.int64) for mode in modes}
                    for position, query in enumerate(data.queries):
                        alone = _orders(retriever, query, [targets[own]], fused)[0].get(0, [])
                        orders, nonzero = _orders(retriever, query, targets, fused)
                        both = [c for o in orders.values() for c in o]
                        if fused:
                            raw = sorted(both, key=lambda c: (-c.fused, -c.score, c.target, c.row))
                        else:
                            raw = sorted(both, key=lambda c: (-c.score, c.target, c.row))
                        length = list(merge_targets(orders, nonzero))
                        coverage = {t: word_coverage(query, [m.text for m in targets[t].store.get_memories(
                            [c.row for c in own[:COVERAGE_DEPTH]]).values()]) for t, own in orders.items()}
                        merged = merge_targets(orders, nonzero, coverage)
                        for mode, order in (
                            ("alone", alone),
                            ("raw", raw),
                            ("length", length),
                            ("merged", merged),
                        ):
                            hits = [int(mappings[own][c.row]) if (mode == "alone" or c.target == own) else -2
                                    for c in order[:K]]
                            ranked[mode][position, :len(hits)] = hits
                    results = {mode: score(r, relevant) for mode, r in ranked.items()}
                    print(
                        f"{pair:<22} {names[own]:<10} {'fused' if fused else 'hdc':<6} "
                        f"{results['alone'][0]:>10.4f} {results['raw'][0]:>9.4f} "
                        f"{results['length'][0]:>11.4f} "
                        f"{results['merged'][0]:>11.4f} {results['alone'][1]:>9.4f} "
                        f"{results['raw'][1]:>8.4f} {results['length'][1]:>10.4f} "
                        f"{results['merged'][1]:>10.4f}",
                        flush=True,
                    )
    print(
        f"\nalone: the query's own corpus only (the baseline); raw: both by raw HDC score (hdc) or by "
        f"1/({DEFAULT_K}+rank) in each corpus's fused order (fused); length: score per unit of the query's "
        "length in each corpus; merged: engine.ranking.merge_targets, that times 1 + the corpus's word "
        "coverage."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
