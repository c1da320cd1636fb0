"""Command line: `python -m engine build|search|stats`.

    python -m engine build --data DIR --out DIR [--gguf PATH] [--dims N] [--ngram N] [--seed N]
    python -m engine search --index DIR [--top-document] [--budget N] [--compress] "query"
    python -m engine stats --index DIR

`build` indexes every dataset `datasets.discover_datasets(DIR)` finds (source ids 1, 2, ... in
discovery order), tokenizing in-process with the GGUF's own tokenizer (default: the packaged Gemma
3 270M); memory text goes to `memories.sqlite` in the build directory.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from engine.config import Config


def _tokenizer(gguf_path: Path):
    from engine.spm import GGUFTokenizer

    return GGUFTokenizer.from_gguf(gguf_path)


def _gguf(path: str | None) -> Path:
    from engine.model_files import default_gguf_path

    return Path(path) if path else default_gguf_path()


def cmd_build(args: argparse.Namespace) -> int:
    from engine.build import build_index
    from engine.datasets import discover_datasets

    config = Config.load(args.config) if args.config else Config()
    overrides = {k: v for k, v in (("hdc_dimensions", args.dims), ("hdc_ngram", args.ngram),
                                   ("hdc_seed", args.seed), ("chunk_size", args.chunk_size)) if v is not None}
    config = config.replace(**overrides)
    found = discover_datasets(args.data)
    if not found:
        print(f"error: no datasets found in {args.data}", file=sys.stderr)
        return 2
    datasets = [(number, Path(d["path"]).name, d["path"]) for number, d in enumerate(found, start=1)]
    gguf_path = _gguf(args.gguf)
    last = [0.0]

    def progress(phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] > 1.0 or done == total:
            last[0] = now
            print(f"  {phase:<10} {done}" + (f"/{total}" if total else ""), file=sys.stderr)

    result = build_index(
        datasets=datasets,
        out_dir=args.out,
        gguf_path=gguf_path,
        tokenizer=_tokenizer(gguf_path),
        config=config,
        progress=progress,
        cache_dir=args.cache_dir,
    )
    print(f"built {result.out_dir}: {result.documents} documents ({result.duplicates} duplicates skipped), "
          f"vocabulary {result.vocab_size} tokens")
    for phase, seconds in result.manifest["timings"].items():
        print(f"  {phase:<10} {seconds:8.2f} s")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from engine.loaded_build import load_corpus
    from engine.retrieval import Retriever, SearchTarget

    corpus = load_corpus(args.index)
    if corpus.store is None:
        print(f"error: {args.index} has no memories.sqlite (its texts live with the portal)", file=sys.stderr)
        return 2
    tokenizer = _tokenizer(Path(args.gguf) if args.gguf else Path(corpus.manifest["model"]["path"]))
    retriever = Retriever(tokenizer, Config(min_context=args.min_context))
    target = SearchTarget(corpus, corpus.store, Path(args.index).name)
    if args.compress:
        print(
            retriever.get_context(
                args.query, [target], token_budget=args.budget, top_document=args.top_document, compress=True
            )
        )
        return 0
    started = time.perf_counter()
    results = retriever.search(args.query, [target], token_budget=args.budget, top_document=args.top_document)
    elapsed = time.perf_counter() - started
    for rank, result in enumerate(results, start=1):
        memory = result.memory
        snippet = " ".join(memory.text.split())[:160]
        print(f"{rank:3d}. score {result.hdc_score:7.0f}  row {memory.hdv_idx:<7d} "
              f"{memory.metadata.get('source', '')}  ({memory.token_count} tokens)\n     {snippet}")
    print(f"{len(results)} memories in {elapsed * 1000:.0f} ms", file=sys.stderr)
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from engine.loaded_build import load_corpus

    corpus = load_corpus(args.index)
    manifest = corpus.manifest
    print(
        f"index      {args.index}\ndocuments  {corpus.count}  (duplicates skipped {manifest['duplicates']})"
    )
    print(f"dims       {corpus.dims}  ngram {manifest['ngram']}  seed {manifest['seed']}  "
          f"vocabulary {manifest['vocab_size']}")
    sparsity = corpus.index.sparsity()
    print(f"sparsity   +1 {sparsity['pos']:.4f}   0 {sparsity['zero']:.4f}   -1 {sparsity['neg']:.4f}")
    sims = corpus.index.sample_similarities()
    if sims.size:
        q = np.percentile(sims, [5, 50, 95])
        print(f"similarity {sims.size} random pairs: mean {sims.mean():.4f}  p5 {q[0]:.4f}  "
              f"median {q[1]:.4f}  p95 {q[2]:.4f}")
    pos, neg = corpus.index.dimension_activation()
    active = pos + neg
    print(f"dims       activation mean {active.mean():.4f}  min {active.min():.4f}  max {active.max():.4f}  "
          f"never active {int(np.count_nonzero(active == 0))}")
    print("sources")
    for name, count in corpus.source_counts().items():
        print(f"  {count:8d}  {name}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine", description="HdRAG engine command line")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="index every dataset in a directory")
    build.add_argument("--data", required=True, type=Path)
    build.add_argument("--out", required=True, type=Path, help="new or empty build directory")
    build.add_argument("--gguf", help="GGUF model (default: packaged Gemma 3 270M)")
    build.add_argument("--config", help="YAML engine config (defaults otherwise)")
    build.add_argument("--dims", type=int)
    build.add_argument("--ngram", type=int)
    build.add_argument("--seed", type=int)
    build.add_argument("--chunk-size", type=int)
    build.add_argument("--cache-dir", type=Path, help="cache for the extracted embedding table")
    build.set_defaults(run=cmd_build)
    search = commands.add_parser("search", help="search a build")
    search.add_argument("--index", required=True, type=Path)
    search.add_argument("--gguf", help="tokenizer model (default: the one the build used)")
    search.add_argument("--top-document", action="store_true")
    search.add_argument("--compress", action="store_true", help="print the compressed joined context")
    search.add_argument("--budget", type=int, help="token budget (default max_context_tokens)")
    search.add_argument("--min-context", type=int, default=Config().min_context)
    search.add_argument("query")
    search.set_defaults(run=cmd_search)
    stats = commands.add_parser("stats", help="diagnostics of a build")
    stats.add_argument("--index", required=True, type=Path)
    stats.set_defaults(run=cmd_stats)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
