"""Benchmark of the multi-vector store (engine/multivector) against the storage contract.

For each storage version (1.0: base64(gzip(float32)), 1.1: base64(float16)) it fills a
store with --records pages of (--seq, --dim) and times: a single add, a batch of 10 pages,
a batch of 50 chunks (64 rows), stage-1 top-100, get_full_embeddings, the full two-stage
search re-ranking 100 candidates, and delete_document. Each figure is printed beside the
contract's target, the goal (5x inside the target) and the ratio to the goal; version 1.0
is the baseline for 1.1. It also measures the contract's "4x compression" claim on random
normal and on model-like data (rows of the Gemma GGUF's token table, projected and
normalised), and vectorised MaxSim against a per-candidate loop.

    .venv/bin/python -m bench.multivector --records 1000
    .venv/bin/python -m bench.multivector --records 10000 --server
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._hw import print_hardware  # noqa: E402
from engine.multivector import ChromaClient, encode_embeddings, maxsim_scores  # noqa: E402
from engine.multivector.compression import decode_embeddings  # noqa: E402
from engine.multivector.late_interaction import concatenate_sequences  # noqa: E402

# operation → contract target in ms (the goal is 5x inside it)
TARGETS_MS = {
    "add single page": 50.0,
    "add batch 10 pages": 300.0,
    "add batch 50 chunks": 500.0,
    "stage-1 top-100": 200.0,
    "get_full_embeddings": 20.0,
    "two-stage, re-rank 100": 2000.0,
    "delete_document": 100.0,
}
GOAL_FACTOR = 5.0
BUILD_PAGES_PER_DOC = 100
QUERY_ROWS = 32
CHUNK_ROWS = 64


def timed(action: Callable[[], object], repeats: int) -> np.ndarray:
    """Wall times of `repeats` calls, in ms, after one untimed warm-up call (first calls
    after a burst of writes also pay for the server's catching up)."""
    action()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    return np.array(times)


def meta(filename: str = "bench.pdf") -> dict:
    return {"filename": filename, "source_path": f"/bench/{filename}", "text": "bench chunk text"}


def start_server(directory: Path) -> tuple[subprocess.Popen, str]:
    """A `chroma run` subprocess on a free port; returns (process, url) once it answers."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    log = open(directory / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
    server = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("chroma")),
            "run",
            "--path",
            str(directory / "server"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
    )
    deadline = time.monotonic() + 60
    while True:
        if server.poll() is not None:
            raise SystemExit(f"chroma run exited with {server.returncode}; see {directory / 'server.log'}")
        try:
            with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=1):
                return server, url
        except OSError:
            if time.monotonic() > deadline:
                server.kill()
                raise SystemExit(f"chroma run did not answer at {url} within 60 s") from None
            time.sleep(0.2)


def compression_report(args: argparse.Namespace) -> None:
    """Stored bytes per record and the gzip ratio behind the contract's 4x claim."""
    rng = np.random.default_rng(args.seed)
    datasets = {"random normal": rng.standard_normal((8, args.seq, args.dim)).astype(np.float32)}
    try:
        from engine.model_files import default_gguf_path
        from engine.multivector.model_like import gguf_token_sequences

        datasets["Gemma token rows"] = gguf_token_sequences(
            default_gguf_path(), 8, args.seq, args.dim, args.seed
        )
    except (ImportError, OSError, ValueError) as error:
        print(f"(model-like data unavailable: {error})")
    raw = args.seq * args.dim * 4
    print(f"\n== compression of one ({args.seq}, {args.dim}) record; raw float32 {raw / 1024:.0f} KiB ==")
    print(
        f"{'data':<18}{'gzip ratio':>11}{'1.0 stored':>12}{'1.1 stored':>12}{'1.0 enc+dec':>13}"
        f"{'1.1 enc+dec':>13}   contract: gzip 4x, 103 KB stored"
    )
    for name, sequences in datasets.items():
        ratio = raw / np.mean([len(gzip.compress(rows.tobytes(), 6)) for rows in sequences])
        sizes, costs = {}, {}
        for version in ("1.0", "1.1"):
            payloads = [encode_embeddings(rows, version) for rows in sequences]
            sizes[version] = np.mean([len(p) for p in payloads]) / 1000
            started = time.perf_counter()
            for rows, payload in zip(sequences, payloads, strict=True):
                encode_embeddings(rows, version)
                decode_embeddings(payload, rows.shape, version)
            costs[version] = (time.perf_counter() - started) * 1000 / len(sequences)
        print(
            f"{name:<18}{ratio:>10.2f}x{sizes['1.0']:>9.0f} KB{sizes['1.1']:>9.0f} KB"
            f"{costs['1.0']:>10.2f} ms{costs['1.1']:>10.2f} ms"
        )


def maxsim_report(args: argparse.Namespace) -> None:
    """Vectorised MaxSim over 100 candidates vs a loop per candidate (the baseline)."""
    rng = np.random.default_rng(args.seed)
    query = rng.standard_normal((QUERY_ROWS, args.dim)).astype(np.float32)
    candidates = [rng.standard_normal((args.seq, args.dim)).astype(np.float32) for _ in range(100)]
    concatenated, offsets = concatenate_sequences(candidates)

    def loop() -> list[float]:
        return [float((query @ rows.T).max(axis=1).sum()) for rows in candidates]

    fast = np.median(timed(lambda: maxsim_scores(query, concatenated, offsets), args.repeats))
    slow = np.median(timed(loop, max(3, args.repeats // 4)))
    print(f"\n== MaxSim, query ({QUERY_ROWS}, {args.dim}) x 100 candidates of {args.seq} rows ==")
    print(
        f"vectorised {fast:.2f} ms, loop per candidate {slow:.2f} ms (baseline), speed-up {slow / fast:.1f}x"
    )


def fill(store: ChromaClient, args: argparse.Namespace) -> float:
    """Add --records pages in batches (one document per batch); returns records/s."""
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    for first in range(0, args.records, BUILD_PAGES_PER_DOC):
        count = min(BUILD_PAGES_PER_DOC, args.records - first)
        pages = rng.standard_normal((count, args.seq, args.dim)).astype(np.float32)
        store.add_batch_visual(
            f"doc{first // BUILD_PAGES_PER_DOC:05d}", list(range(1, count + 1)), list(pages), meta()
        )
    return args.records / (time.perf_counter() - started)


def measure(store: ChromaClient, args: argparse.Namespace) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(args.seed + 1)
    figures = {}
    counter = iter(range(10**9))

    def add_single() -> None:
        store.add_visual_embedding(
            f"single{next(counter)}", 1, rng.standard_normal((args.seq, args.dim), dtype=np.float32), meta()
        )

    def add_pages() -> None:
        pages = list(rng.standard_normal((10, args.seq, args.dim), dtype=np.float32))
        store.add_batch_visual(f"pages{next(counter)}", list(range(1, 11)), pages, meta())

    def add_chunks() -> None:
        chunks = list(rng.standard_normal((50, CHUNK_ROWS, args.dim), dtype=np.float32))
        store.add_batch_text(f"chunks{next(counter)}", list(range(50)), chunks, meta())

    figures["add single page"] = timed(add_single, args.repeats)
    figures["add batch 10 pages"] = timed(add_pages, max(3, args.repeats // 4))
    figures["add batch 50 chunks"] = timed(add_chunks, max(3, args.repeats // 4))
    queries = [rng.standard_normal((QUERY_ROWS, args.dim), dtype=np.float32) for _ in range(args.repeats)]
    query_iter = itertools.cycle(queries)
    figures["stage-1 top-100"] = timed(
        lambda: store.search_visual(next(query_iter)[0], n_results=100), args.repeats
    )
    ids = [
        f"doc{i // BUILD_PAGES_PER_DOC:05d}-page{i % BUILD_PAGES_PER_DOC + 1:03d}"
        for i in rng.integers(0, args.records, size=args.repeats)
    ]
    id_iter = itertools.cycle(ids)
    figures["get_full_embeddings"] = timed(lambda: store.get_full_embeddings(next(id_iter)), args.repeats)
    query_iter = itertools.cycle(queries)
    figures["two-stage, re-rank 100"] = timed(
        lambda: store.search_visual_multivector(next(query_iter), n_candidates=100, n_results=10),
        args.repeats,
    )
    singles = iter(range(args.repeats + 1))
    figures["delete_document"] = timed(lambda: store.delete_document(f"single{next(singles)}"), args.repeats)
    return figures


def directory_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000, help="pages in the store (default 10000)")
    parser.add_argument("--seq", type=int, default=100, help="rows per page (default 100)")
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--versions", nargs="+", default=["1.0", "1.1"], choices=["1.0", "1.1"])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--server", action="store_true", help="use a `chroma run` server instead of embedded")
    parser.add_argument("--dir", type=Path, help="where to keep the stores (default: a temp dir, removed)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    print_hardware()
    print("note: the machine's cores are shared with other work; figures are wall-clock medians")
    compression_report(args)
    maxsim_report(args)

    workdir = args.dir or Path(tempfile.mkdtemp(prefix="bench-multivector-"))
    workdir.mkdir(parents=True, exist_ok=True)
    server, url = start_server(workdir) if args.server else (None, None)
    results: dict[str, dict[str, np.ndarray]] = {}
    try:
        for version in args.versions:
            names = {
                "visual_collection": f"bench-visual-{version}",
                "text_collection": f"bench-text-{version}",
            }
            if url:
                store = ChromaClient(url=url, dim=args.dim, storage_version=version, **names)
            else:
                store = ChromaClient(
                    path=workdir / f"embedded-{version}", dim=args.dim, storage_version=version, **names
                )
            if store.get_collection_stats()["visual_count"] < args.records:
                rate = fill(store, args)
                print(
                    f"\nv{version}: filled {args.records} pages of ({args.seq}, {args.dim}) at {rate:.0f} "
                    "pages/s"
                )
            results[version] = measure(store, args)
            if not url:
                store_dir = workdir / f"embedded-{version}"
                size = directory_mb(store_dir)
                # A store made before ChromaClient created new ones in WAL mode keeps its journal.
                journal = "WAL" if (store_dir / "chroma.sqlite3-wal").exists() else "rollback journal"
                print(
                    f"v{version}: on disk {size:.0f} MB ({size * 1000 / args.records:.0f} KB per page), "
                    f"SQLite {journal}"
                )
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)

    mode = f"server {url}" if url else "embedded"
    print(f"\n== latency, {mode}, {args.records} pages of ({args.seq}, {args.dim}); median (p95) ms ==")
    print(
        f"{'operation':<24}{'target':>8}{'goal':>7}"
        + "".join(f"{'v' + v:>18}{'/goal':>7}" for v in results)
        + ("   1.0/1.1" if len(results) == 2 else "")
    )
    for operation, target in TARGETS_MS.items():
        goal = target / GOAL_FACTOR
        line = f"{operation:<24}{target:>8.0f}{goal:>7.0f}"
        for figures in results.values():
            times = figures[operation]
            line += (
                f"{np.median(times):>9.1f} ({np.percentile(times, 95):>6.1f}){np.median(times) / goal:>7.2f}"
            )
        if len(results) == 2:
            line += f"{np.median(results['1.0'][operation]) / np.median(results['1.1'][operation]):>10.2f}x"
        print(line)
    print("(/goal < 1 means inside the 5x goal; /target is that times 1/5)")


if __name__ == "__main__":
    main()
