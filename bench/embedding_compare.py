"""Gemma 3 270M against Qwen2.5-Coder-0.5B token embeddings: bench/retrieval_eval.py once per model per set.

Every run has the same set, seed, dimensions and settings; only `--gguf` differs. Gemma (the
packaged default) is the baseline; the table gives each model's HDC and late-interaction recall@10
and MRR@10 beside BM25 (which does not depend on the model), its tokenization speed, HDC build
speed and index size, and the Qwen/Gemma ratios. Each retrieval_eval run is a child process (one
model's 0.5-0.7 GB embedding table at a time) whose full output is echoed.

    .venv/bin/python -m bench.embedding_compare --set wordnet --docs 5000 --queries 500
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

MODELS = {"gemma": "embeddings", "qwen": "chat"}
RANKERS = "bm25,hdc,li"
_ROW = re.compile(
    r"^(?P<name>BM25|HDC exact|late interaction).*?\s+(?P<recall>[01]\.\d{4})\s+(?P<mrr>[01]\.\d{4})"
    r"\s+(?P<index>[\d.]+)\s+(?P<query>[\d.]+)\s",
    re.M,
)
_TOKENS = re.compile(r"^tokenization: .*?: (?P<docs>[\d,]+) docs/s, (?P<tokens>[\d,]+) tokens/s", re.M)
_BUILD = re.compile(r"^HDC build: (?P<docs>[\d,]+) docs/s .*index (?P<mb>[\d,.]+) MB", re.M)


@dataclass
class ModelRun:
    scores: dict[str, tuple[float, float]] = field(default_factory=dict)  # ranker -> (recall@10, MRR@10)
    tokens_per_s: float = 0.0
    tokenize_docs_per_s: float = 0.0
    build_docs_per_s: float = 0.0
    index_mb: float = 0.0


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def parse(output: str) -> ModelRun:
    """The figures of one retrieval_eval run's printed report."""
    run = ModelRun()
    for row in _ROW.finditer(output):
        run.scores[row["name"]] = (float(row["recall"]), float(row["mrr"]))
    tokens, build = _TOKENS.search(output), _BUILD.search(output)
    if len(run.scores) != 3 or tokens is None or build is None:
        raise ValueError(f"retrieval_eval's report lacks a figure:\n{output[-3000:]}")
    run.tokens_per_s, run.tokenize_docs_per_s = _number(tokens["tokens"]), _number(tokens["docs"])
    run.build_docs_per_s, run.index_mb = _number(build["docs"]), _number(build["mb"])
    return run


def run_model(model: str, args: argparse.Namespace) -> ModelRun:
    command = [sys.executable, "-m", "bench.retrieval_eval", "--set", args.set, "--docs", str(args.docs),
               "--queries", str(args.queries), "--seed", str(args.seed), "--dims", str(args.dims),
               "--hdc-seed", str(args.hdc_seed), "--rankers", RANKERS, "--gguf", MODELS[model]]
    print(f"$ {' '.join(command[1:])}", flush=True)
    done = subprocess.run(command, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
    print(done.stdout, done.stderr[-2000:] if done.returncode else "", flush=True)
    if done.returncode:
        raise SystemExit(f"retrieval_eval --gguf {MODELS[model]} failed with code {done.returncode}")
    return parse(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", default="wordnet", choices=("wordnet", "gcide", "jargon"))
    parser.add_argument("--docs", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dims", type=int, default=10000)
    parser.add_argument("--hdc-seed", type=int, default=42)
    args = parser.parse_args(argv)
    runs = {model: run_model(model, args) for model in MODELS}
    gemma, qwen = runs["gemma"], runs["qwen"]
    print(
        f"== embedding model comparison: {args.set}, {args.docs} docs, {args.queries} queries, seed "
        f"{args.seed}, dims {args.dims} (baseline: Gemma) =="
    )
    print(f"{'figure':<34} {'Gemma 3 270M':>13} {'Qwen2.5 0.5B':>13} {'Qwen/Gemma':>11}")
    rows = []
    for ranker in ("BM25", "HDC exact", "late interaction"):
        for column, label in ((0, "recall@10"), (1, "MRR@10")):
            rows.append(
                (f"{ranker} {label}", gemma.scores[ranker][column], qwen.scores[ranker][column], "{:.4f}")
            )
    rows += [("tokenization tokens/s", gemma.tokens_per_s, qwen.tokens_per_s, "{:,.0f}"),
             ("tokenization docs/s", gemma.tokenize_docs_per_s, qwen.tokenize_docs_per_s, "{:,.0f}"),
             ("HDC build docs/s", gemma.build_docs_per_s, qwen.build_docs_per_s, "{:,.0f}"),
             ("HDC index MB", gemma.index_mb, qwen.index_mb, "{:,.1f}")]
    for label, base, other, shape in rows:
        ratio = f"{other / base:.3f}" if base else "n/a"
        print(f"{label:<34} {shape.format(base):>13} {shape.format(other):>13} {ratio:>11}")
    print(f"load average: {' '.join(f'{value:.2f}' for value in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
