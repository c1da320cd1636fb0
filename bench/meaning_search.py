"""Search latency with the meaning channel (`engine.meaning`) against the default path, 1 user and
several at once, beside the floor (what the channel alone costs a query).

One known-item set of bench/retrieval_eval.py is built as the portal builds a corpus with the
channel on (`bench.anchor_rankers.MeaningPathRanker`: HDC, its word channel and the gate's rules,
each memory's all-MiniLM-L6-v2 vector as int8). Every query then goes through `Retriever.search`
(encode, candidates, both fusion stages, threshold, dedup, HDC-MMR) twice, the channel off (the
default path, the baseline) and on, taking turns query by query, by `--users` threads at once
(each its own share of the queries; `search_slot` is the portal's, not used here: this measures
the engine). The floor: the encoder's query vector alone, and the scan of the int8 rows alone.

    .venv/bin/python -m bench.meaning_search --set jargon-paraphrase --docs 2000 --queries 100 --users 1,4
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._hw import print_hardware  # noqa: E402
from bench.retrieval_eval import SET_CHOICES, load_set  # noqa: E402


def _ms(times: list[float]) -> str:
    ordered = sorted(times)
    return (f"p50 {statistics.median(ordered) * 1000:7.1f} ms  "
            f"p90 {ordered[int(0.9 * (len(ordered) - 1))] * 1000:7.1f} ms")


def _timed(search, query: str) -> float:  # noqa: ANN001 - a callable
    start = time.perf_counter()
    search(query)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="jargon-paraphrase", choices=SET_CHOICES)
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--users", default="1,4", help="comma-separated: searches at once")
    parser.add_argument("--threads", type=int, default=2, help="numba / torch threads")
    args = parser.parse_args(argv)
    args.no_hypernym, args.wordnet_dir = False, Path("/usr/share/wordnet")
    args.dims, args.ngram, args.hdc_seed, args.gguf = 10000, 5, 42, None
    os.environ.setdefault("NUMBA_NUM_THREADS", str(args.threads))
    import torch

    from bench.anchor_rankers import MeaningPathRanker
    from bench.embedding_model import open_embedding_model
    from engine.channels import MEANING

    torch.set_num_threads(args.threads)
    data = load_set(args)
    print_hardware()
    print(f"== search latency with the meaning channel: {args.set}, {len(data.documents)} documents, "
          f"{len(data.queries)} queries ==")
    with tempfile.TemporaryDirectory(prefix="hdrag-meaning-") as scratch, ExitStack() as servers:
        args.work_dir = Path(scratch)
        args.embedding_model = open_embedding_model(None, servers, threads=args.threads)
        ranker = MeaningPathRanker(args)
        ranker.index(data.documents)
        print(ranker.build_rate())
        retriever, on = ranker.hdc.retriever, ranker.target
        channel = on.channels[MEANING]
        off = replace(on, channels={name: c for name, c in on.channels.items() if name != MEANING},
                      rules={name: r for name, r in on.rules.items() if name != MEANING})
        queries = list(data.queries)
        for query in queries:  # one untimed pass: the encoding cache and first-use costs, both sides
            retriever.search(query, [off])
            retriever.search(query, [on])
        floor_encode = [_timed(channel.query_vector, q) for q in queries]
        vector = channel.query_vector(queries[0])
        floor_scan = [_timed(lambda _: channel.index.scores(vector), q) for q in queries]
        print(f"rows: {channel.count:,} memories; floor: query vector {_ms(floor_encode)}; "
              f"int8 scan {_ms(floor_scan)}")
        def one(query: str, times: dict[str, list[float]]) -> None:
            times["off"].append(_timed(lambda q: retriever.search(q, [off]), query))
            times["on"].append(_timed(lambda q: retriever.search(q, [on]), query))

        for users in [int(u) for u in args.users.split(",")]:
            times: dict[str, list[float]] = {"off": [], "on": []}
            with ThreadPoolExecutor(max_workers=users) as pool:
                list(pool.map(lambda query, times=times: one(query, times), queries))
            ratio = statistics.median(times["on"]) / statistics.median(times["off"])
            print(f"{users} user{'s' if users > 1 else ''} at once: default path {_ms(times['off'])};  "
                  f"with meaning {_ms(times['on'])};  ratio {ratio:.1f}x (p50)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
