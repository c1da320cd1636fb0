"""Append segments against a full rebuild: how far do frozen statistics cost ranking quality?

On each known-item set of bench/retrieval_eval.py (one relevant document per query), the same
documents are indexed two ways: a full build of all of them (the baseline, measured in the same
run), and a base build of the first (100 - p) % followed by `--appends` append segments of the
rest (`engine.segments.append_segment`: the base's vocabulary statistics frozen, unseen tokens
added as they first appear). Queries are ranked by the HDC index's exact search over the state, as
in retrieval_eval's HDC column; the documents of the appends are mixed at random with the base's
(a seeded shuffle), so queries hit both. Reported per set and appended share p: recall@10 and
MRR@10 of both, their difference, the appended documents' share of token occurrences that were new
tokens (OOV share) and what the appends cost.

    .venv/bin/python -m bench.segments_eval --docs 3000 --queries 300
    .venv/bin/python -m bench.segments_eval --sets jargon,manpages --shares 10,40 --appends 10

Sets: wordnet (`apt-get install wordnet-base`), gcide, jargon, gcide-definitions (`dict-gcide
jargon-text`), manpages (`manpages manpages-dev`), pydocs (the standard library).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._hw import print_hardware  # noqa: E402
from bench.retrieval_eval import SET_CHOICES, K, load_set, score  # noqa: E402


class State:
    """A list of segment directories and the document each state row holds."""

    def __init__(self) -> None:
        self.dirs: list[Path] = []
        self.row_document: dict[int, int] = {}
        self.files: dict[int, list[int]] = {}  # source id -> the document of each JSONL line
        self.ids: set[str] = set()  # content ids of the rows: an append skips what the state holds

    def write(self, path: Path, source_id: int, documents: list[tuple[int, str]]) -> Path:
        self.files[source_id] = [number for number, _ in documents]
        with open(path, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps({"text": text}, ensure_ascii=False) + "\n" for _, text in documents)
        return path

    def sink(self, records: list[dict]) -> None:
        for record in records:  # JSONL lines are 1-based; a long document's chunks share its line
            document = self.files[record["source_id"]][record["metadata"]["record"] - 1]
            self.row_document[record["hdv_idx"]] = document
            self.ids.add(record["id"])

    def rank(self, retriever, queries: list[str]) -> np.ndarray:  # noqa: ANN001 - engine.retrieval.Retriever
        from engine.segments import load_state

        state = load_state(self.dirs)
        rows_to_documents = np.full(state.count, -1, dtype=np.int64)
        for row, document in self.row_document.items():
            rows_to_documents[row] = document
        ranked = np.full((len(queries), K), -1, dtype=np.int64)
        for position, query in enumerate(queries):
            q_pos, q_neg = retriever.query_vector(state, query)
            rows, _ = state.index.search_exact(q_pos, q_neg, K)
            ranked[position, : rows.size] = rows_to_documents[rows]
        return ranked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default=",".join(SET_CHOICES))
    parser.add_argument("--docs", type=int, default=3000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--shares", default="10,25,50", help="appended share of the documents, in %%")
    parser.add_argument("--appends", type=int, default=10, help="append segments the share is split into")
    parser.add_argument("--dims", type=int, default=10000)
    parser.add_argument("--ngram", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--wordnet-dir", type=Path, default=Path("/usr/share/wordnet"))
    args = parser.parse_args(argv)
    os.environ.setdefault("NUMBA_NUM_THREADS", str(args.threads))
    import torch

    from engine.build import build_index
    from engine.config import Config
    from engine.model_files import default_gguf_path
    from engine.retrieval import Retriever
    from engine.segments import append_segment
    from engine.spm import GGUFTokenizer

    torch.set_num_threads(args.threads)
    print_hardware()
    gguf_path = default_gguf_path()
    tokenizer = GGUFTokenizer.from_gguf(str(gguf_path))
    config = Config(hdc_dimensions=args.dims, hdc_ngram=args.ngram)
    retriever = Retriever(tokenizer, config)
    cache_dir = Path(gguf_path).parent.parent / "embeddings"
    shares = [int(s) for s in args.shares.split(",")]
    print(
        f"\n{'set':<18} {'appended':>8} {'recall full':>11} {'recall segs':>11} {'diff':>7} {'MRR full':>9} "
        f"{'MRR segs':>9} {'diff':>7} {'OOV share':>9} {'append s':>9} {'full s':>7}"
    )
    for name in [s.strip() for s in args.sets.split(",") if s.strip()]:
        set_args = argparse.Namespace(set=name, docs=args.docs, queries=args.queries, seed=args.seed,
                                      no_hypernym=False, wordnet_dir=args.wordnet_dir)
        try:
            data = load_set(set_args)
        except Exception as missing:  # noqa: BLE001 - a set whose package is not installed is reported, not fatal
            print(f"{name:<18} skipped: {missing}")
            continue
        relevant = np.asarray(data.relevant, dtype=np.int64)
        order = np.random.default_rng(args.seed).permutation(len(data.documents))
        with tempfile.TemporaryDirectory(prefix="hdrag-segments-") as scratch:
            root = Path(scratch)
            documents = [(int(i), data.documents[i]) for i in order]
            full = State()
            start = time.perf_counter()
            build_index(
                datasets=[(1, "all", full.write(root / "all.jsonl", 1, documents))],
                out_dir=root / "full",
                gguf_path=gguf_path,
                tokenizer=tokenizer,
                config=config,
                sink=full.sink,
                cache_dir=cache_dir,
            )
            full_seconds = time.perf_counter() - start
            full.dirs = [root / "full"]
            full_recall, full_mrr = score(full.rank(retriever, data.queries), relevant)
            for share in shares:
                appended = len(documents) * share // 100
                base_docs = documents[: len(documents) - appended]
                state = State()
                base_dir = root / f"base-{share}"
                build_index(
                    datasets=[(1, "base", state.write(root / f"base-{share}.jsonl", 1, base_docs))],
                    out_dir=base_dir,
                    gguf_path=gguf_path,
                    tokenizer=tokenizer,
                    config=config,
                    sink=state.sink,
                    cache_dir=cache_dir,
                )
                state.dirs = [base_dir]
                parts = np.array_split(np.arange(len(base_docs), len(documents)), args.appends)
                oov, seconds = [], []
                for number, part in enumerate(parts):
                    if not part.size:
                        continue
                    out = root / f"append-{share}-{number}"
                    start = time.perf_counter()
                    result = append_segment(
                        previous_dir=state.dirs[-1],
                        datasets=[
                            (
                                2 + number,
                                f"a{number}",
                                state.write(
                                    root / f"a-{share}-{number}.jsonl",
                                    2 + number,
                                    [documents[i] for i in part],
                                ),
                            )
                        ],
                        out_dir=out,
                        gguf_path=gguf_path,
                        tokenizer=tokenizer,
                        sink=state.sink,
                        word_index=False,
                        known=lambda ids, state=state: set(ids) & state.ids,
                    )
                    seconds.append(time.perf_counter() - start)
                    oov.append(result.manifest["segment"]["oov_share"])
                    state.dirs.append(out)
                recall, mrr = score(state.rank(retriever, data.queries), relevant)
                print(
                    f"{name:<18} {share:>7}% {full_recall:>11.4f} {recall:>11.4f} "
                    f"{recall - full_recall:>+7.4f} "
                    f"{full_mrr:>9.4f} {mrr:>9.4f} {mrr - full_mrr:>+7.4f} {np.mean(oov):>9.4f} "
                    f"{np.median(seconds):>9.2f} {full_seconds:>7.1f}",
                    flush=True,
                )
    print("\nappend s: median seconds of one append (tokenize, extend the vocabulary, encode, verify) of "
          "share / appends of the documents; full s: the full build of all documents, the baseline.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
