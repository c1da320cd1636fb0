"""Index format 4 against the formats and code it replaces, in one run: size, load, query, results.

The same WordNet known-item corpus (bench/data/wordnet.py, Debian package `wordnet-base`) is built
by a baseline checkout of the engine (default bd218d2, the engine before issue 14: stored tables,
float32 BLAS projection; extracted with `git archive` into a scratch directory) in its format 1,
and by this checkout in format 1 (stored tables, format 4's row definition), 2 (derived rows,
float64 BLAS projection), 3 (derived rows, int8 fixed-point projection) and 4 (its default:
derived rows, the float32 projection stored and applied in one fixed float64 order). Each build is
then measured in a fresh Python process of its own code: `load_corpus` time, the first query, and
the p50 / p90 of `Retriever.encode_text` + the exact index search over the query set, then the
p50 of the same queries asked again ("again": every word already seen by the process, as in a
portal that has been answering a while; a derived format's row cache holds `CACHED_ROWS`). The builds'
top-10 rankings and scores are compared with the baseline's and with this code's format 1, and
recall@10 is given for each.

Format 4 is bit-identical to format 1 written by the same code (tests/engine/test_build.py); the
baseline's float32 BLAS projection depended on its batch, so against its builds a value can differ
in the last bit. The comparison below shows what that amounts to.

    .venv/bin/python -m bench.index_format --docs 20000 --queries 300
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._hw import print_hardware  # noqa: E402
from bench.data.wordnet import build_known_item_set, read_synsets  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# Run inside a fresh interpreter with the engine under test first on sys.path.
_BUILD = """
import json, sys
from pathlib import Path
from engine.build import build_index
from engine.config import Config
try:
    from engine.model_files import default_gguf_path
except ModuleNotFoundError:  # engines before the module's rename (the issue-14 baseline)
    from engine.models import default_gguf_path
from engine.tokenizer import GGUFTokenizer
dataset, out, version = sys.argv[1], sys.argv[2], sys.argv[3]
gguf = default_gguf_path()
options = {"format_version": int(version)} if version else {}
result = build_index(datasets=[(1, "wordnet", dataset)], out_dir=out, gguf_path=gguf,
                     tokenizer=GGUFTokenizer.from_gguf(gguf), config=Config(),
                     cache_dir=Path(gguf).parent.parent / "embeddings", **options)
print(json.dumps({"timings": result.manifest["timings"], "format": result.manifest["format_version"]}))
"""

_MEASURE = """
import json, sys, time
import numpy as np
started = time.perf_counter()
from engine.config import Config
try:
    from engine.loaded_build import load_corpus
except ModuleNotFoundError:  # engines before the module's split (the issue-14 baseline)
    from engine.corpus import load_corpus
try:
    from engine.model_files import default_gguf_path
except ModuleNotFoundError:  # engines before the module's rename (the issue-14 baseline)
    from engine.models import default_gguf_path
from engine.retrieval import Retriever
from engine.tokenizer import GGUFTokenizer
imported = time.perf_counter()
build, queries_path = sys.argv[1], sys.argv[2]
queries = json.loads(open(queries_path).read())
retriever = Retriever(GGUFTokenizer.from_gguf(default_gguf_path()), Config())
t0 = time.perf_counter()
corpus = load_corpus(build)
t1 = time.perf_counter()
times, rows, scores, warm = [], [], [], []
for number, query in enumerate(queries):
    q0 = time.perf_counter()
    pos, neg, _ = retriever.encode_text(corpus, query)
    found, found_scores = corpus.index.search_exact(pos, neg, 10)
    times.append(time.perf_counter() - q0)
    rows.append(found.tolist())
    scores.append(found_scores.tolist())
for query in queries:  # again: every word of the queries seen once already
    q0 = time.perf_counter()
    pos, neg, _ = retriever.encode_text(corpus, query)
    corpus.index.search_exact(pos, neg, 10)
    warm.append(time.perf_counter() - q0)
print(json.dumps({"load_ms": (t1 - t0) * 1e3, "first_query_ms": times[0] * 1e3,
                  "p50_ms": float(np.median(times[1:]) * 1e3),
                  "p90_ms": float(np.percentile(times[1:], 90) * 1e3),
                  "warm_p50_ms": float(np.median(warm) * 1e3), "rows": rows, "scores": scores}))
"""


def _run(code: str, engine_root: Path, *args: str) -> dict | list:
    env = {**os.environ, "PYTHONPATH": str(engine_root)}
    # `python -c` puts the working directory first on sys.path: run where no `engine` package is.
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=tempfile.gettempdir(),
    )
    if done.returncode:
        raise RuntimeError(f"{engine_root}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _sizes(build: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(build.iterdir()) if p.is_file()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=20000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--baseline", default="bd218d2", help="git revision of the baseline engine")
    parser.add_argument("--wordnet-dir", type=Path, default=Path("/usr/share/wordnet"))
    args = parser.parse_args(argv)
    print_hardware()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (start)")
    data = build_known_item_set(read_synsets(args.wordnet_dir), args.docs, args.queries, seed=0)
    # The build indexes a repeated text once: keep first occurrences so rows are document numbers.
    first: dict[str, int] = {}
    for text in data.documents:
        first.setdefault(text, len(first))
    documents = list(first)
    relevant = np.asarray([first[data.documents[r]] for r in data.relevant])
    revision = subprocess.run(["git", "rev-parse", "--short", args.baseline], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="hdrag-format-") as scratch:
        scratch = Path(scratch)
        baseline_root = scratch / "baseline"
        baseline_root.mkdir()
        archive = subprocess.run(["git", "archive", args.baseline, "engine"], cwd=ROOT, capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(baseline_root)], input=archive, check=True)
        dataset = scratch / "wordnet.jsonl"
        dataset.write_text("".join(json.dumps({"text": t}) + "\n" for t in documents), encoding="utf-8")
        queries = scratch / "queries.json"
        queries.write_text(json.dumps(data.queries), encoding="utf-8")
        text_bytes = sum(len(t.encode()) for t in documents)
        print(f"== corpus == WordNet glosses: {len(documents)} documents, {text_bytes / 1e6:.1f} MB of text; "
              f"{len(data.queries)} queries")
        runs = {}
        # The baseline builds with its own default (format 1): engines before format 2 take no option.
        plan = ((f"baseline {revision}", baseline_root, ""), ("this code, format 1", ROOT, "1"),
                ("this code, format 2", ROOT, "2"), ("this code, format 3", ROOT, "3"),
                ("this code (default)", ROOT, ""))
        for number, (label, root, version) in enumerate(plan):
            out = scratch / f"build{number}"
            started = time.perf_counter()
            built = _run(_BUILD, root, str(dataset), str(out), version)
            build_s = time.perf_counter() - started
            runs[label] = {"sizes": _sizes(out), "build_s": build_s, "format": built["format"], "dir": out,
                           "root": root}
        # Measured twice each, alternating, keeping each figure's best: the machine is shared.
        for _ in range(2):
            for run in runs.values():
                measured = _run(_MEASURE, run["root"], str(run["dir"]), str(queries))
                for key in ("load_ms", "first_query_ms", "p50_ms", "p90_ms", "warm_p50_ms"):
                    run[key] = min(run.get(key, float("inf")), measured[key])
                run["rows"], run["scores"] = measured["rows"], measured["scores"]
    print(
        f"\n{'':<40} {'vocab.idx MB':>13} {'build MB':>9} {'build s':>8} {'load ms':>8} {'1st query ms':>13} "
        f"{'p50 ms':>7} {'p90 ms':>7} {'again p50':>10} {'recall@10':>10}"
    )
    for label, run in runs.items():
        sizes = run["sizes"]
        run["recall"] = np.mean([r in rows for r, rows in zip(relevant, run["rows"], strict=True)])
        label = f"{label} [format {run['format']}]"
        print(
            f"{label:<40} {sizes['vocab.idx'] / 1e6:>13.1f} {sum(sizes.values()) / 1e6:>9.1f} "
            f"{run['build_s']:>8.1f} {run['load_ms']:>8.1f} {run['first_query_ms']:>13.1f} "
            f"{run['p50_ms']:>7.2f} {run['p90_ms']:>7.2f} "
            f"{run['warm_p50_ms']:>10.2f} {run['recall']:>10.4f}"
        )
    old, stored = list(runs.values())[:2]
    for label, new in list(runs.items())[1:]:
        if label != "this code, format 1":
            same_stored = np.mean(
                [
                    a == b and c == d
                    for a, b, c, d in zip(
                        stored["rows"], new["rows"], stored["scores"], new["scores"], strict=True
                    )
                ]
            )
            print(f"\n{label} / this code, format 1: identical top-10 rows and scores: {same_stored:.3f}")
        same_rows = np.mean([a == b for a, b in zip(old["rows"], new["rows"], strict=True)])
        same_all = np.mean([a == b and c == d for a, b, c, d in
                            zip(old["rows"], new["rows"], old["scores"], new["scores"], strict=True)])
        overlap = np.mean([len(set(a) & set(b)) / max(1, len(a))
                           for a, b in zip(old["rows"], new["rows"], strict=True)])
        print(
            f"\n{label} / baseline: vocab.idx {new['sizes']['vocab.idx'] / old['sizes']['vocab.idx']:.4f}, "
            f"whole build {sum(new['sizes'].values()) / sum(old['sizes'].values()):.4f}; query p50 "
            f"{new['p50_ms'] / old['p50_ms']:.2f}x, p90 {new['p90_ms'] / old['p90_ms']:.2f}x, the queries "
            f"again p50 {new['warm_p50_ms'] / old['warm_p50_ms']:.2f}x, first query "
            f"{new['first_query_ms'] / old['first_query_ms']:.2f}x, load "
            f"{new['load_ms'] / max(old['load_ms'], 1e-9):.2f}x"
        )
        print(f"  top-10 identical (rows): {same_rows:.3f}; identical rows and scores: {same_all:.3f}; "
              f"mean top-10 overlap {overlap:.4f}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
