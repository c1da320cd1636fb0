"""Benchmark of the bitmap index search against the machine's memory read bandwidth.

Builds (or reuses) a synthetic ternary corpus of --docs x --dims in --dir, with 10
planted near-duplicates per query (the query with --flip of its dimensions sign-flipped),
then prints in one run: hardware, measured read bandwidth of the page-cached index body,
the exact full scan (numba) and a plain numpy `np.bitwise_count` scan as fractions of that
bandwidth, pruned search latency (p50/p95), recall@10 of pruned vs exact, and the peak
anonymous memory used by pruned search beyond the memory map.

    .venv/bin/python -m bench.search --docs 1000000 --dims 10000 --queries 20

`--real-text` replaces the synthetic corpus with ~518,000 memories of real text (Debian-packaged
dictionaries and manuals, bench/data/real_corpus.py) built once by the engine, and real questions
about entries. It measures, at the full size and on seeded random subsets of the rows: the exact
scan, today's retriever search (`search`, exact pruning) as the baseline, and the retriever's
search now (`search_auto`: `search_sampled` from `SAMPLED_SEARCH_MIN_ROWS` rows on), with recall of
the top 10 and of the retriever's top 500 against the exact scan; then a grid of `search_sampled`
settings at the full size:

    .venv/bin/python -m bench.search --real-text --queries 50 --dir .cache/bench

`--filter-half` also times the search with a dataset filter that leaves about half the rows (the
rows of the documents a person may read: `corpus.document_access`), paired with no filter, and
checks that the filtered top 10 are all allowed rows:

    .venv/bin/python -m bench.search --docs 200000 --queries 20 --filter-half

`--segments 10` then searches the same rows cut into 10 segments (`engine.segments`, appends not
yet merged): equal segments, and a base with nine small appends, against the one index:

    .venv/bin/python -m bench.search --docs 300000 --queries 20 --segments 10
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
from numba import njit, prange

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._hw import print_hardware, proc_status_kib  # noqa: E402
from engine import bits  # noqa: E402
from engine.index import BitmapIndex, IndexFileError  # noqa: E402
from engine.index_search import SAMPLED_SEARCH_MIN_ROWS  # noqa: E402

PLANTED_PER_QUERY = 10
BUILD_BATCH = 20000
RETRIEVER_CANDIDATES = 500


@njit(parallel=True, cache=True)
def _sum_words(flat):
    acc = np.uint64(0)
    for i in prange(flat.shape[0]):
        acc += flat[i]
    return acc


def random_bitmaps(rng: np.random.Generator, n: int, dims: int) -> tuple[np.ndarray, np.ndarray]:
    """(pos, neg) uint64 (n, words): each dimension +1 / -1 with probability 1/4, else 0."""
    mask = bits.mask64_for_dims(dims, bits.bstride(dims))
    shape = (n, bits.words(dims))
    a = rng.integers(0, 2**64, size=shape, dtype=np.uint64, endpoint=False)
    b = rng.integers(0, 2**64, size=shape, dtype=np.uint64, endpoint=False)
    return a & b & mask, a & ~b & mask


def flipped(rng: np.random.Generator, qp: np.ndarray, qn: np.ndarray, dims: int, rate: float):
    """Copy of the query with each dimension's sign flipped with probability `rate`."""
    flips = bits.pack_ternary((rng.random(dims) < rate).astype(np.int8))[0]
    return (qp & ~flips) | (qn & flips), (qn & ~flips) | (qp & flips)


def build_corpus(directory: Path, docs: int, dims: int, queries: int, flip: float, seed: int):
    """Write the corpus index and its queries; reuse them when the same parameters exist."""
    path = directory / f"bench_{docs}x{dims}_q{queries}_f{flip}_s{seed}.idx"
    query_file = path.with_suffix(".queries.npz")
    if path.exists() and query_file.exists():
        try:
            index = BitmapIndex.open(path)
            if index.finalized and index.count == docs:
                saved = np.load(query_file)
                print(f"reusing {path}")
                return index, saved["qp"], saved["qn"], saved["planted"]
        except IndexFileError as error:
            print(f"rebuilding: {error}")
        path.unlink()
    for stale in directory.glob(path.name + "*"):
        stale.unlink()
    rng = np.random.default_rng(seed)
    qp, qn = random_bitmaps(rng, queries, dims)
    planted = rng.choice(docs, size=(queries, PLANTED_PER_QUERY), replace=False)
    owner = {int(row): q for q in range(queries) for row in planted[q]}
    started = time.perf_counter()
    index = BitmapIndex.create(path, dims)
    for first in range(0, docs, BUILD_BATCH):
        n = min(BUILD_BATCH, docs - first)
        pos, neg = random_bitmaps(rng, n, dims)
        for row in [r for r in owner if first <= r < first + n]:
            pos[row - first], neg[row - first] = flipped(rng, qp[owner[row]], qn[owner[row]], dims, flip)
        index.append(pos, neg, source_ids=np.arange(first, first + n) % 4)
    appended = time.perf_counter()
    index.finalize()
    print(f"built {path}: append {appended - started:.1f} s, finalize {time.perf_counter() - appended:.1f} s")
    np.savez(query_file, qp=qp, qn=qn, planted=planted)
    return BitmapIndex.open(path), qp, qn, planted


def read_bandwidth(flat: np.ndarray, repeats: int = 3) -> float:
    """Best-of GB/s of a parallel (wrapping) uint64 sum over `flat` (read once per repeat)."""
    _sum_words(flat[:1024])
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        _sum_words(flat)
        best = min(best, time.perf_counter() - started)
    return flat.nbytes / best / 1e9


def numpy_scan(index: BitmapIndex, qp: np.ndarray, qn: np.ndarray) -> np.ndarray:
    """Baseline: the same chunked full scan with plain numpy `np.bitwise_count`."""
    scores = np.zeros(index.count, dtype=np.int32)
    for start, width in index._chunks():
        block = index._block(start, width)
        pos, neg = block[:, :width], block[:, width:]
        a, b = qp[start : start + width], qn[start : start + width]
        scores += np.bitwise_count((pos & a) | (neg & b)).sum(axis=1, dtype=np.int32)
        scores -= np.bitwise_count((pos & b) | (neg & a)).sum(axis=1, dtype=np.int32)
    return scores


def reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--dims", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument(
        "--flip", type=float, default=0.03, help="fraction of sign-flipped dims per planted doc"
    )
    parser.add_argument("--exact-queries", type=int, default=5, help="queries timed with the exact scan")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "hdrag-bench")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--real-text", action="store_true", help="real text and real questions (see above)")
    parser.add_argument("--sizes", default="50000,100000,200000",
                        help="--real-text: subset sizes measured besides the full index")
    parser.add_argument("--filter-half", action="store_true",
                        help="also search with a dataset filter that leaves about half the rows (a person's "
                             "readable documents, corpus.document_access), paired with no filter")
    parser.add_argument("--segments", type=int, default=0,
                        help="also search the corpus cut into this many segments (engine.segments), "
                             "against the same corpus in one, the baseline")
    args = parser.parse_args()

    print_hardware()
    print(f"numba threads  : {numba.get_num_threads()}")
    print(f"load average   : {' '.join(f'{x:.2f}' for x in os.getloadavg())} (start)")
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.real_text:
        index, qp, qn = real_text(args)
    else:
        index, qp, qn = synthetic(args)
    if args.filter_half:
        filter_comparison(index, qp, qn)
    if args.segments > 1:
        segments_comparison(index, qp, qn, args.dir, args.segments)
    print(f"\nload average   : {' '.join(f'{x:.2f}' for x in os.getloadavg())} (end)")


def bandwidth_and_exact_scan(index: BitmapIndex, qp: np.ndarray, qn: np.ndarray,
                             queries: int) -> tuple[list, float, float]:
    """Prints the read bandwidth and the exact scan's share of it; returns the exact top-10 results, the
    median scan time (s) and the bandwidth (GB/s)."""
    body = index._body()
    gbytes = body.nbytes / 1e9
    print(
        f"\n== corpus == {index.count} docs x {index.dims} dims, body {gbytes:.2f} GB, chunk_words "
        f"{index.chunk_words}"
    )
    print(f"sparsity       : { {k: round(v, 4) for k, v in index.sparsity().items()} }")
    bandwidth = read_bandwidth(body)
    print("\n== baseline: memory read bandwidth (parallel uint64 sum of the page-cached body) ==")
    print(f"read bandwidth : {bandwidth:.1f} GB/s")
    index.search_exact(qp[0], qn[0], 10)
    exact_times, exact_results = [], []
    for q in range(queries):
        started = time.perf_counter()
        exact_results.append(index.search_exact(qp[q], qn[q], 10))
        exact_times.append(time.perf_counter() - started)
    exact_s = float(np.median(exact_times))
    print("\n== exact full scan (numba) ==")
    print(f"time           : {exact_s * 1e3:.1f} ms/query (median of {len(exact_times)})")
    print(
        f"throughput     : {gbytes / exact_s:.1f} GB/s = {gbytes / exact_s / bandwidth:.0%} of read bandwidth"
    )
    return exact_results, exact_s, bandwidth


def synthetic(args: argparse.Namespace) -> tuple[BitmapIndex, np.ndarray, np.ndarray]:
    index, qp, qn, planted = build_corpus(args.dir, args.docs, args.dims, args.queries, args.flip, args.seed)
    exact_results, exact_s, bandwidth = bandwidth_and_exact_scan(
        index, qp, qn, min(args.exact_queries, args.queries)
    )
    gbytes = index._body().nbytes / 1e9
    started = time.perf_counter()
    baseline_scores = numpy_scan(index, qp[0], qn[0])
    numpy_s = time.perf_counter() - started
    exact_rows, exact_scores = exact_results[0]
    assert np.array_equal(np.sort(baseline_scores)[::-1][:10], exact_scores), "numpy baseline disagrees"
    print("\n== baseline: plain numpy np.bitwise_count full scan ==")
    print(f"time           : {numpy_s * 1e3:.1f} ms/query")
    print(
        f"throughput     : {gbytes / numpy_s:.1f} GB/s = {gbytes / numpy_s / bandwidth:.0%} of read bandwidth"
    )
    print(f"numba speed-up : {numpy_s / exact_s:.1f}x")

    index.search(qp[0], qn[0], 10)
    rss_before = proc_status_kib("RssAnon")
    peak_reset = reset_peak_rss()
    pruned_times, recalls, planted_found = [], [], []
    for q in range(args.queries):
        started = time.perf_counter()
        rows, _ = index.search(qp[q], qn[q], 10)
        pruned_times.append(time.perf_counter() - started)
        planted_found.append(len(set(rows.tolist()) & set(planted[q].tolist())) / PLANTED_PER_QUERY)
        if q < len(exact_results):
            recalls.append(len(set(rows.tolist()) & set(exact_results[q][0].tolist())) / 10)
    peak_anon_mb = peak_extra_mb = None
    if peak_reset:
        # VmHWM counts the mapped file pages too; what is left after removing them is anonymous memory.
        peak_anon_kib = proc_status_kib("VmHWM") - proc_status_kib("RssFile") - proc_status_kib("RssShmem")
        peak_anon_mb, peak_extra_mb = peak_anon_kib / 1024, (peak_anon_kib - rss_before) / 1024
    times_ms = np.array(pruned_times) * 1e3
    print("\n== pruned search (exact progressive pruning, k = 10) ==")
    print(
        f"latency        : p50 {np.percentile(times_ms, 50):.1f} ms, p95 {np.percentile(times_ms, 95):.1f} "
        f"ms over {args.queries} queries"
    )
    print(f"vs exact scan  : {exact_s * 1e3 / np.percentile(times_ms, 50):.1f}x faster at p50")
    print(f"recall@10      : {np.mean(recalls):.3f} vs exact ({len(recalls)} queries); "
          f"planted found {np.mean(planted_found):.3f}")
    if peak_extra_mb is None:
        print("peak RSS       : unavailable (/proc/self/clear_refs not writable)")
    else:
        print(
            f"peak RSS       : {peak_anon_mb:.0f} MB anonymous (whole process, memmap excluded) during "
            f"pruned search, {peak_extra_mb:+.0f} MB over before it; search work arrays "
            f"~{index.count * 5 / 1e6:.0f} MB"
        )
    return index, qp, qn


def _recall(found: np.ndarray, exact: np.ndarray) -> float:
    return len(set(found.tolist()) & set(exact.tolist())) / max(1, exact.shape[0])


def _timed(search, qp: np.ndarray, qn: np.ndarray) -> tuple[np.ndarray, list]:
    search(qp[0], qn[0])
    times, results = [], []
    for q in range(len(qp)):
        started = time.perf_counter()
        results.append(search(qp[q], qn[q])[0])
        times.append(time.perf_counter() - started)
    return np.array(times) * 1e3, results


def subset_index(index: BitmapIndex, directory: Path, size: int, seed: int) -> BitmapIndex:
    """An index of `size` seeded random rows of `index` (kept in order), built once in `directory`."""
    path = directory / f"{index.path.parent.name}_subset_{size}_s{seed}.idx"
    try:
        subset = BitmapIndex.open(path)
        if subset.finalized and subset.count == size:
            return subset
    except IndexFileError:
        pass
    for stale in directory.glob(path.name + "*"):
        stale.unlink()
    rows = np.sort(np.random.default_rng(seed).choice(index.count, size=size, replace=False))
    subset = BitmapIndex.create(path, index.dims)
    for start in range(0, size, BUILD_BATCH):
        pos, neg = index.get_bitmaps(rows[start : start + BUILD_BATCH])
        subset.append(pos, neg)
    subset.finalize()
    return BitmapIndex.open(path)


def real_text(args: argparse.Namespace) -> tuple[BitmapIndex, np.ndarray, np.ndarray]:
    from bench.data.real_index import real_text_index

    index, qp, qn, questions = real_text_index(args.dir, queries=args.queries, dims=args.dims, seed=args.seed)
    print(f"real text      : {index.count} memories built by the engine from Debian-packaged text, "
          f"{len(questions)} questions, e.g. {questions[:4]}")
    bandwidth_and_exact_scan(index, qp, qn, len(qp))
    k = RETRIEVER_CANDIDATES
    sizes = sorted({int(s) for s in args.sizes.split(",") if 0 < int(s) < index.count} | {index.count})
    print(f"\n== retriever search (k = {k}): today's `search` (baseline) vs `search_auto` (sampled from "
          f"{SAMPLED_SEARCH_MIN_ROWS} rows on) ==")
    print(
        f"{'rows':>8} {'exact p50':>10} {'baseline p50':>13} {'p95':>7} {'new p50':>8} {'p95':>7} "
        f"{'ratio':>6} {'recall@10':>10} {'recall@500':>11}"
    )
    for size in sizes:
        sub = index if size == index.count else subset_index(index, args.dir, size, args.seed)
        exact_ms, exact = _timed(lambda p, n, sub=sub: sub.search_exact(p, n, k), qp, qn)
        base_ms, _ = _timed(lambda p, n, sub=sub: sub.search(p, n, k), qp, qn)
        new_ms, new = _timed(lambda p, n, sub=sub: sub.search_auto(p, n, k), qp, qn)
        recall10 = np.mean([_recall(a[:10], b[:10]) for a, b in zip(new, exact, strict=True)])
        recall500 = np.mean([_recall(a, b) for a, b in zip(new, exact, strict=True)])
        print(
            f"{size:>8} {np.median(exact_ms):>10.1f} {np.median(base_ms):>13.1f} "
            f"{np.percentile(base_ms, 95):>7.1f} "
            f"{np.median(new_ms):>8.1f} {np.percentile(new_ms, 95):>7.1f} "
            f"{np.median(base_ms) / np.median(new_ms):>5.1f}x {recall10:>10.3f} {recall500:>11.3f}"
        )
    sampled_grid(index, qp, qn)
    return index, qp, qn


def half_sources(index: BitmapIndex) -> frozenset[int]:
    """Source ids (datasets) that together hold about half the rows, largest first."""
    ids, counts = np.unique(index.source_ids, return_counts=True)
    chosen, rows = set(), 0
    for source, count in sorted(zip(ids.tolist(), counts.tolist(), strict=True), key=lambda item: -item[1]):
        if rows + count <= index.count / 2 or not chosen:
            chosen.add(source)
            rows += count
    return frozenset(chosen)


def filter_comparison(index: BitmapIndex, qp: np.ndarray, qn: np.ndarray,
                      k: int = RETRIEVER_CANDIDATES) -> None:
    """The search (`search_auto`) with a dataset filter leaving about half the rows against none,
    query by query in alternating order (a loaded machine slows both alike); the filtered top 10
    must all be allowed rows, and its recall is against the exact filtered scan."""
    allowed = half_sources(index)
    kept = np.isin(index.source_ids, np.fromiter(allowed, dtype=np.int64))
    index.search_auto(qp[0], qn[0], k)
    index.search_auto(qp[0], qn[0], k, allowed_sources=allowed)
    plain_ms, filtered_ms, recalls, readable = [], [], {False: [], True: []}, True
    for q in range(len(qp)):
        for filtered in ((False, True) if q % 2 == 0 else (True, False)):
            sources = allowed if filtered else None
            started = time.perf_counter()
            rows, _ = index.search_auto(qp[q], qn[q], k, allowed_sources=sources)
            (filtered_ms if filtered else plain_ms).append((time.perf_counter() - started) * 1e3)
            readable &= not filtered or (bool(kept[rows[:10]].all()) and len(rows) >= 10)
            exact, _ = index.search_exact(qp[q], qn[q], 10, allowed_sources=sources)
            recalls[filtered].append(_recall(rows[:10], exact[:10]))
    plain, half = np.median(plain_ms), np.median(filtered_ms)
    print(f"\n== dataset filter leaving {kept.mean():.1%} of {index.count} rows (sources {sorted(allowed)}), "
          f"k = {k}, {len(qp)} queries, paired ==")
    print(f"no filter      : p50 {plain:.1f} ms, p95 {np.percentile(plain_ms, 95):.1f} ms")
    print(f"half the rows  : p50 {half:.1f} ms, p95 {np.percentile(filtered_ms, 95):.1f} ms "
          f"(p50 ratio {half / plain:.2f})")
    print(f"top 10         : all allowed rows: {readable}; recall@10 vs the exact scan with the same filter: "
          f"{np.mean(recalls[True]):.3f} filtered, {np.mean(recalls[False]):.3f} unfiltered")


def row_range_index(index: BitmapIndex, directory: Path, start: int, stop: int) -> BitmapIndex:
    """An index of rows [start, stop) of `index`, built once in `directory`."""
    path = directory / f"{index.path.stem}_rows_{start}_{stop}.idx"
    try:
        part = BitmapIndex.open(path)
        if part.finalized and part.count == stop - start:
            return part
    except IndexFileError:
        pass
    for stale in directory.glob(path.name + "*"):
        stale.unlink()
    part = BitmapIndex.create(path, index.dims)
    for lo in range(start, stop, BUILD_BATCH):
        rows = np.arange(lo, min(stop, lo + BUILD_BATCH))
        part.append(
            *index.get_bitmaps(rows), token_counts=index.token_counts[rows], source_ids=index.source_ids[rows]
        )
    part.finalize()
    return BitmapIndex.open(path)


def segments_comparison(
    index: BitmapIndex, qp: np.ndarray, qn: np.ndarray, directory: Path, count: int
) -> None:
    """The retriever's search (`search_auto`, k = 500) over the corpus cut into `count` segments
    (`engine.segments.SegmentedIndex`), in two shapes: equal segments (after a merge-free run of
    large appends), and one base with small appends of 0.1 % of the rows each (new documents added
    to a large corpus), against the same rows in one index (the baseline)."""
    from engine.segments import SegmentedIndex

    n, k = index.count, RETRIEVER_CANDIDATES
    small = max(1, n // 1000)
    shapes = {"equal segments": np.linspace(0, n, count + 1).astype(int),
              "base + small appends": np.array([0, *range(n - small * (count - 1), n + 1, small)])}
    one_ms, one = _timed(lambda p, q: index.search_auto(p, q, k), qp, qn)
    print(f"\n== search over {count} segments (search_auto, k = {k}) vs one index of the same {n} rows ==")
    print(f"{'shape':<22} {'p50 ms':>8} {'p95 ms':>8} {'ratio p50':>10} {'recall@500 vs one':>18}")
    print(
        f"{'one index (baseline)':<22} {np.median(one_ms):>8.1f} {np.percentile(one_ms, 95):>8.1f} "
        f"{1.0:>9.2f}x "
        f"{1.0:>18.3f}"
    )
    for name, bounds in shapes.items():
        parts = [
            row_range_index(index, directory, int(a), int(b))
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ]
        state = SegmentedIndex(parts)
        ms, found = _timed(lambda p, q, state=state: state.search_auto(p, q, k), qp, qn)
        recall = np.mean([_recall(a, b) for a, b in zip(found, one, strict=True)])
        print(f"{name:<22} {np.median(ms):>8.1f} {np.percentile(ms, 95):>8.1f} "
              f"{np.median(ms) / np.median(one_ms):>9.2f}x {recall:>18.3f}")


def sampled_grid(index: BitmapIndex, qp: np.ndarray, qn: np.ndarray) -> None:
    """`search_sampled` latency and recall against the exact scan at the full size, over a grid of
    settings."""
    chunks = len(index._chunks())
    exact10 = [index.search_exact(qp[q], qn[q], 10)[0] for q in range(len(qp))]
    exact500 = [index.search_exact(qp[q], qn[q], RETRIEVER_CANDIDATES)[0] for q in range(len(qp))]
    print(f"\n== sampled search at {index.count} rows (first pass on a subset of the {chunks} column chunks, "
          f"exact re-rank of a shortlist) ==")
    print(
        f"{'chunks':>6} {'shortlist':>9} {'k=10 p50 ms':>12} {'recall@10':>10} {'k=500 p50 ms':>13} "
        f"{'recall@500':>11}"
    )
    for sample_chunks in (4, 6, 8):
        for shortlist in (1000, 2000):
            ms10, found10 = _timed(lambda p, n, c=sample_chunks, s=shortlist: index.search_sampled(
                p, n, 10, sample_chunks=c, shortlist=s), qp, qn)
            ms500, found500 = _timed(lambda p, n, c=sample_chunks, s=shortlist: index.search_sampled(
                p, n, RETRIEVER_CANDIDATES, sample_chunks=c, shortlist=s), qp, qn)
            r10 = np.mean([_recall(a, b) for a, b in zip(found10, exact10, strict=True)])
            r500 = np.mean([_recall(a, b) for a, b in zip(found500, exact500, strict=True)])
            print(
                f"{sample_chunks:>6} {shortlist:>9} {np.median(ms10):>12.1f} {r10:>10.3f} "
                f"{np.median(ms500):>13.1f} "
                f"{r500:>11.3f}"
            )


if __name__ == "__main__":
    main()
