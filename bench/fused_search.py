"""Latency of the full search pipeline with fusion: HDC alone, fusion as it was (late interaction
through the Chroma store's two-stage search, then RRF), and fusion now (`LateInteractionChannel`
re-scores HDC's candidates from the build's kept token vectors).

One build of a known-item set (bench/retrieval_eval.py's sets) is made and filled into a real
embedded Chroma store; every query then goes through `Retriever.search` (encode, exact search,
threshold, fusion, dedup, HDC-MMR) on one corpus. The old pipeline is the code of `--baseline`
(a git commit, default the branch's merge base with main, exported to a temp dir) run in a child
process on the SAME build and store, in the same run, the modes taking turns query by query (a
load that changes during the run weighs on all alike), after one untimed pass of every query on
both sides (format 2 derives a token's vocabulary rows on first use in a process). Prints hardware, the load
average, p50/p90 per mode and the ratio to the old fused pipeline.

    python -m bench.fused_search --work-dir var/fused --prepare   # build + fill
    python -m bench.fused_search --work-dir var/fused             # timings, on a quiet machine
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._hw import print_hardware  # noqa: E402
from bench.retrieval_eval import SET_CHOICES, load_set  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# The old pipeline, run by the baseline code's interpreter on the same build and store.
_OLD = """
import json, sys, time
from pathlib import Path
from engine.config import Config
from engine.fusion import FusionWeights
from engine.loaded_build import load_corpus
from engine.multivector import ChromaClient
from engine.retrieval import Retriever, SearchTarget
from engine.spm import GGUFTokenizer
from engine.text_store import text_encoder_for, text_store_rank
args = json.loads(sys.argv[1])
corpus = load_corpus(args["build"])
tokenizer = GGUFTokenizer.from_gguf(args["gguf"])
encoder = text_encoder_for(corpus, gguf_path=args["gguf"], tokenizer=tokenizer, cache_dir=args["cache"])
store = ChromaClient(path=args["chroma"], visual_collection="bench_visual", text_collection="bench_text")
late = lambda query: text_store_rank(
    store=store, encoder=encoder, tokenizer=tokenizer, query=query, build_id=1
)
target = SearchTarget(
    corpus=corpus, store=corpus.store, name="bench", late=late, fusion=FusionWeights(1.0, 0.5)
)
retriever = Retriever(tokenizer, Config(**args["config"]))
print("ready", flush=True)
for line in sys.stdin:
    started = time.perf_counter()
    retriever.search(json.loads(line), [target])
    print((time.perf_counter() - started) * 1000, flush=True)
"""


class _TimedScorer:
    """A late-interaction channel that adds up the wall time of its scorings (ms)."""

    def __init__(self, scorer) -> None:  # noqa: ANN001 - engine.text_store.LateInteractionChannel
        self.scorer, self.times = scorer, []
        self.name, self.file, self.gate = scorer.name, scorer.file, scorer.gate

    def query(self, query):  # noqa: ANN001, ANN201
        from engine.text_store import LateInteractionQuery

        return LateInteractionQuery(self, query)

    def score_rows(self, query, rows):  # noqa: ANN001, ANN201
        began = time.perf_counter()
        try:
            return self.scorer.score_rows(query, rows)
        finally:
            self.times.append((time.perf_counter() - began) * 1000)

    def score_texts(self, query, texts):  # noqa: ANN001, ANN201
        return self.scorer.score_texts(query, texts)


def _percentiles(times: list[float]) -> str:
    ordered = sorted(times)
    return f"p50 {statistics.median(ordered):8.1f} ms   p90 {ordered[int(0.9 * (len(ordered) - 1))]:8.1f} ms"


def _baseline_tree(commit: str, into: Path) -> Path:
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "engine"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", default="jargon", choices=SET_CHOICES)
    parser.add_argument("--docs", type=int, default=3000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-hypernym", action="store_true")
    parser.add_argument("--wordnet-dir", type=Path, default=Path("/usr/share/wordnet"))
    parser.add_argument(
        "--baseline", default=None, help="git commit of the old pipeline (default: merge base with main)"
    )
    parser.add_argument(
        "--work-dir", type=Path, default=None, help="keep the build and store here (default: temp)"
    )
    parser.add_argument("--prepare", action="store_true", help="only build and fill --work-dir (untimed)")
    args = parser.parse_args(argv)

    from engine.build import build_index
    from engine.channels import LATE_INTERACTION, SearchTarget
    from engine.config import Config
    from engine.fusion import FusionChoice
    from engine.loaded_build import load_corpus
    from engine.model_files import default_gguf_path
    from engine.multivector import ChromaClient
    from engine.retrieval import Retriever
    from engine.spm import GGUFTokenizer
    from engine.text_store import LateInteractionChannel, text_encoder_for, text_store_fill

    print_hardware()
    data = load_set(args)
    queries = list(data.queries[: args.queries])
    gguf = str(default_gguf_path())
    cache = str(Path(gguf).parent.parent / "embeddings")
    config = Config()
    commit = args.baseline or subprocess.run(["git", "-C", str(ROOT), "merge-base", "HEAD", "main"],
                                             capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="hdrag-fused-") as scratch:
        work = args.work_dir or Path(scratch)
        tokenizer = GGUFTokenizer.from_gguf(gguf)
        if not (work / "build" / "late.npz").is_file():
            work.mkdir(parents=True, exist_ok=True)
            dataset = work / "documents.jsonl"
            dataset.write_text(
                "".join(json.dumps({"text": t}) + "\n" for t in data.documents), encoding="utf-8"
            )
            started = time.perf_counter()
            build_index(datasets=[(1, args.set, dataset)], out_dir=work / "build", gguf_path=gguf,
                        tokenizer=tokenizer, config=config, cache_dir=cache)
            corpus = load_corpus(work / "build")
            encoder = text_encoder_for(corpus, gguf_path=gguf, tokenizer=tokenizer, cache_dir=cache)
            store = ChromaClient(
                path=work / "chroma", visual_collection="bench_visual", text_collection="bench_text"
            )
            text_store_fill(store=store, corpus=corpus, encoder=encoder, tokenizer=tokenizer, build_id=1)
            print(f"built and filled in {time.perf_counter() - started:.0f} s")
        if args.prepare:
            return 0
        corpus = load_corpus(work / "build")
        encoder = text_encoder_for(corpus, gguf_path=gguf, tokenizer=tokenizer, cache_dir=cache)
        print(f"set {args.set}: {corpus.count} rows, {len(queries)} queries")
        print(f"old pipeline: commit {commit[:10]} (fusion weights HDC 1, late 0.5 through Chroma)")

        scorer = _TimedScorer(LateInteractionChannel.for_build(corpus, encoder=encoder, tokenizer=tokenizer))
        channels = {LATE_INTERACTION: scorer}
        modes = {
            "HDC alone": SearchTarget(corpus=corpus, store=corpus.store, name="bench"),
            "fusion now (z:2)": SearchTarget(
                corpus=corpus,
                store=corpus.store,
                name="bench",
                channels=channels,
                rules={LATE_INTERACTION: FusionChoice("z:2")},
            ),
            "fusion now (rrf:1)": SearchTarget(
                corpus=corpus,
                store=corpus.store,
                name="bench",
                channels=channels,
                rules={LATE_INTERACTION: FusionChoice("rrf:1")},
            ),
        }
        old_tree = _baseline_tree(commit, Path(scratch) / "old")
        payload = json.dumps(
            {
                "build": str(work / "build"),
                "gguf": gguf,
                "cache": cache,
                "chroma": str(work / "chroma"),
                "config": {},
            }
        )
        child = subprocess.Popen(
            [sys.executable, "-c", _OLD, payload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=old_tree,
            env={**os.environ, "PYTHONPATH": str(old_tree)},
        )
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError("the baseline pipeline did not start")
        # Warm-up, untimed, on both sides: every query once, so the vocabulary rows its tokens need
        # are derived (format 2 derives them on first use, once per process) and files are cached.
        warm = Retriever(tokenizer, config)
        for query in queries:
            warm.search(query, [modes["fusion now (z:2)"]])
            child.stdin.write(json.dumps(query) + "\n")
            child.stdin.flush()
            child.stdout.readline()
        scorer.times.clear()
        retrievers = {name: Retriever(tokenizer, config) for name in modes}  # each its own encoding cache
        results: dict[str, list[float]] = {name: [] for name in [*modes, "fusion before (Chroma, RRF)"]}
        loads = [os.getloadavg()[0]]
        for query in queries:
            for name, target in modes.items():
                began = time.perf_counter()
                retrievers[name].search(query, [target])
                results[name].append((time.perf_counter() - began) * 1000)
            child.stdin.write(json.dumps(query) + "\n")
            child.stdin.flush()
            results["fusion before (Chroma, RRF)"].append(float(child.stdout.readline()))
            loads.append(os.getloadavg()[0])
        child.stdin.close()
        child.wait()
    print(
        "late scoring of HDC's top candidates alone (both fused modes): p50 "
        f"{statistics.median(scorer.times):.1f} ms"
    )
    print(f"1-minute load average during the run: min {min(loads):.2f}, max {max(loads):.2f}")
    print(f"load average: {os.getloadavg()}")
    old = statistics.median(results["fusion before (Chroma, RRF)"])
    for name, times in results.items():
        print(
            f"{name:<30} {_percentiles(times)}   old fused / this (p50): "
            f"{old / statistics.median(times):5.1f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
