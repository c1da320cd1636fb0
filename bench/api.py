"""REST API search: requests/s and p50/p99 with concurrent clients, beside the engine alone.

    .venv/bin/python -m bench.api [--memories 100000] [--clients 16] [--requests 480] [--compare TREE]

What runs: the portal's ASGI app under Uvicorn (the production web server, one process, a child of
this one) on loopback, on SQLite in a scratch DATA_DIR; clients in this process, each authenticated
with a bearer API token: one kept-alive `http.client` connection one request at a time, httpx
(async) for the concurrent load. The corpus is bench.chat's synthetic 100,000-memory
index (three random sentences of Python's docs per memory), built once with the real pipeline and
cached under `.cache/bench/` (the first run spends a few minutes building it).

Measured in the same run (each path has its own query cache, so none reads another's):
  * engine alone: `Retriever.search` with its memory rows, on its own loaded copy of the build (the
    baseline);
  * service: `memory.services.memories_search` in process (access control, SQL, the search slot,
    what the view calls);
  * API, one client at a time: GET /api/v1/corpora/<id>/search/?q=... over HTTP, as the client
    times it (request sent, whole body read; decoding the JSON is the client's work, not timed),
    and per request its latency minus the server's own search time (its Server-Timing header);
  * the service with `--clients` threads at once, and the API with `--clients` clients at once
    (distinct queries): requests/s, p50 and p99 (waiting included).

One at a time, twice, on distinct queries:
  * steady: blocks of 10 queries, each path runs a whole block in turn (path order rotating from
    block to block), as a server answering a stream of searches does, its code and data warm;
  * busy: blocks of 1, every query follows the other paths' work (other processes' for the
    APIs), which evicts it from the CPU caches: the latency of a search on a busy machine, where
    the layered path (HTTP, Django, DRF, the service) loses more than the engine's tight loops.

Like with like. An index of format 2 derives a vocabulary row the first time a process's search
meets its token (`engine.vocab`, cached per loaded index), and the server is another process with
its own index. So before a block is timed, every path has searched its words in reverse order
(same tokens, a different text, so no path's query cache holds the query itself). The first sight
of the reversed words is printed as its own line ("cold"). The throttle runs at a rate no client
reaches, so its cache round trips are counted.

On a shared machine latencies wait for cores; the CPU time each serving process spent per search
(engine and service: this process; APIs: the server's, from /proc) is printed beside them.

"Added by the API" = the client's latency minus the engine-alone time of the same query (the
median of the per-query differences, and p50 minus p50), in both phases. Goal: under 5 ms, judged
on the steady phase; the busy figure is printed beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import http.client
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlencode, urlsplit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench._hw import print_hardware  # noqa: E402

GOAL_MS = 5.0
STEADY, BUSY = 10, 1  # queries per block in the two one-at-a-time phases (see _interleaved)


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=100_000, help="memories in the synthetic corpus")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients in the load phase")
    parser.add_argument("--requests", type=int, default=480, help="requests in the load phase")
    parser.add_argument("--sequential", type=int, default=60, help="queries per one-at-a-time phase")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compare", type=Path, metavar="TREE",
                        help="also serve the API from this checkout (e.g. a worktree of main) on the same "
                             "database, measured interleaved with this one")
    return parser.parse_args()


def _queries(count: int, seed: int) -> list[str]:
    """Distinct questions-like queries: 4-9 words drawn from the docs' sentences."""
    from pydoc_data.topics import topics

    words = sorted({w for text in topics.values() for w in re.findall(r"[a-z]{4,}", text.lower())})
    rng = random.Random(seed)
    found: list[str] = []
    seen = set()
    while len(found) < count:
        query = " ".join(rng.sample(words, rng.randint(4, 9)))
        if query not in seen:
            seen.add(query)
            found.append(query)
    return found


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def _timed(func, items: list) -> list[float]:  # noqa: ANN001 - a callable of one item
    times = []
    for item in items:
        started = time.perf_counter()
        func(item)
        times.append((time.perf_counter() - started) * 1000)
    return times


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` (all its threads), from /proc (10 ms ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _interleaved(paths: dict, cpu_clocks: dict, warm: list[str], queries: list[str], block: int
                 ) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Per path, the ms of each query (paths returning a float, the APIs' server time, or a
    callable giving it after the timing, also get "<name> took": latency minus it), and the mean
    CPU ms per query of the process that served it (`cpu_clocks[name]()`: seconds). Queries go
    in blocks of `block`: first every path searches the block's words reversed (same tokens, new
    text: derived rows warm, query caches cold), then each path runs the whole block, the paths'
    order rotating from block to block. With blocks of 10 each path runs as a server answering a
    stream of searches does, its code and data warm; with blocks of 1 every query follows the
    other paths' work (other processes', for the APIs), which evicts them from the caches: a
    latency on a busy machine."""
    for query in warm:
        for run in paths.values():
            run(query)
    names = list(paths)
    times: dict[str, list[float]] = {"cold": []}
    cpu: dict[str, float] = {}
    for number, start in enumerate(range(0, len(queries), block)):
        chunk = queries[start:start + block]
        for query in chunk:
            reversed_words = " ".join(reversed(query.split()))
            for name in names:
                started = time.perf_counter()
                paths[name](reversed_words)
                if name == "engine":
                    times["cold"].append((time.perf_counter() - started) * 1000)
        for name in names[number % len(names):] + names[:number % len(names)]:
            for query in chunk:
                cpu_before, started = cpu_clocks[name](), time.perf_counter()
                took = paths[name](query)
                elapsed = (time.perf_counter() - started) * 1000
                cpu[name] = cpu.get(name, 0.0) + cpu_clocks[name]() - cpu_before
                times.setdefault(name, []).append(elapsed)
                if callable(took):
                    took = took()
                if isinstance(took, float | int):
                    times.setdefault(name + " took", []).append(elapsed - took)
    # Each path's list holds the queries in the same order (blocks are run whole), so the
    # per-query differences below pair the same query.
    return times, {name: seconds * 1000 / len(queries) for name, seconds in cpu.items()}


def _threads_at_once(search, queries: list[str], threads: int) -> tuple[list[float], float]:  # noqa: ANN001
    """Latencies (ms, waiting included) and wall seconds of `queries` searched by `threads`
    threads at once, each thread taking the next query."""
    from django.db import connection

    pending = list(reversed(queries))
    latencies: list[float] = []

    def worker() -> None:
        try:
            while True:
                try:
                    query = pending.pop()
                except IndexError:  # another thread took the last one
                    return
                started = time.perf_counter()
                search(query)
                latencies.append((time.perf_counter() - started) * 1000)
        finally:
            connection.close()

    started = time.perf_counter()
    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    return latencies, time.perf_counter() - started


def _line(name: str, times: list[float]) -> None:
    print(f"{name:<44} n={len(times):<4} p50 {statistics.median(times):7.2f} ms   "
          f"p99 {_percentile(times, 99):7.2f} ms")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start_server(port: int, env: dict, tree: Path) -> subprocess.Popen:
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "hdrag_site.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"uvicorn exited: {server.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("uvicorn did not come up within 60 s")


async def _load(url: str, headers: dict, queries: list[str], clients: int) -> tuple[list[float], float]:
    import httpx

    latencies: list[float] = []
    pending = list(reversed(queries))

    async def client(http: httpx.AsyncClient) -> None:
        while pending:
            query = pending.pop()
            started = time.perf_counter()
            response = await http.get(url, params={"q": query})
            latencies.append((time.perf_counter() - started) * 1000)
            if response.status_code != 200:
                raise RuntimeError(f"{response.status_code}: {response.text[:300]}")

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(headers=headers, timeout=120, limits=limits) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        wall = time.perf_counter() - started
    return latencies, wall


def main() -> int:
    args = _parse()
    print_hardware()
    # Latencies here are only as quiet as the machine: say how busy it was.
    print(f"load average (1, 5, 15 min): {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    from bench.chat import corpus_build, corpus_rows
    from engine.model_files import default_gguf_path

    gguf_path = default_gguf_path()
    build_dir, records_file, dataset = corpus_build(args.memories, args.seed, gguf_path)
    with tempfile.TemporaryDirectory(prefix="bench-api-") as data_dir:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "hdrag_site.settings",
            "DATA_DIR": data_dir,
            "LOG_LEVEL": "WARNING",
            "API_THROTTLE_RATE": "1000000/min",
            "HDRAG_ENV": "development",
            "DEBUG": "0",
        }
        env.pop("DATABASE_URL", None)
        env.pop("REDIS_URL", None)
        os.environ.update(env)
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        from django.contrib.auth import get_user_model

        from accounts.services.tokens import api_token_create
        from core.runtime import default_gguf, engine_config
        from corpus.memory_rows import BuildMemoryStore
        from corpus.models import Corpus
        from corpus.serving import tokenizer_for
        from engine.loaded_build import load_corpus
        from engine.retrieval import Retriever, SearchTarget
        from memory.services import memories_search

        user = get_user_model().objects.create_user("bench")
        started = time.perf_counter()
        corpus_id = corpus_rows(build_dir, records_file, dataset, gguf_path, [user])
        print(f"{args.memories:,} memory rows inserted in {time.perf_counter() - started:.1f} s")
        secret = api_token_create(user=user, name="bench")[1]
        headers = {"Authorization": f"Bearer {secret}"}

        count = args.sequential
        queries = _queries(20 + 2 * count + args.requests, args.seed)
        warm, load_q = queries[:20], queries[20 + 2 * count:]
        # Distinct queries per phase: every path keeps a query cache.
        phases = {STEADY: queries[20:20 + count], BUSY: queries[20 + count:20 + 2 * count]}

        corpus = Corpus.objects.select_related("active_build").get(pk=corpus_id)
        # Its own copy of the build and its own Retriever, as the server process has its own: the
        # index's adaptive pruning state (a probe every few searches) and the derived vocabulary rows
        # are then the engine's alone, and the probe cannot fall on one path's searches only.
        loaded = load_corpus(corpus.active_build.build_dir)
        retriever = Retriever(tokenizer_for(default_gguf()), engine_config())
        target = SearchTarget(loaded, BuildMemoryStore(corpus.active_build_id), str(corpus_id),
                              enabled_sources=frozenset({1}))
        servers = {"API": REPO, **({f"API of {args.compare}": args.compare} if args.compare else {})}
        started_servers = {name: (_free_port(), tree) for name, tree in servers.items()}
        processes = [_start_server(port, env, tree) for port, tree in started_servers.values()]
        try:

            urls = {name: f"http://127.0.0.1:{port}/api/v1/corpora/{corpus_id}/search/"
                    for name, (port, _) in started_servers.items()}
            # One kept-alive HTTP/1.1 connection per server, from the standard library: the leanest
            # client, so that the client library's own work (httpx spends ~0.5 ms more per request
            # here) is not counted as the API's.
            connections = {name: http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                           for name, (port, _) in started_servers.items()}
            try:
                def api_search(name: str, query: str) -> float:
                    # The exchange, body read whole; the server's search time from its Server-Timing
                    # header, so the client's decoding of the body is not counted as the API's.
                    connection = connections[name]
                    connection.request("GET", f"{urlsplit(urls[name]).path}?{urlencode({'q': query})}",
                                       headers=headers)
                    response = connection.getresponse()
                    body = response.read()
                    if response.status != 200:
                        raise RuntimeError(f"{response.status}: {body[:300]!r}")
                    timing = response.getheader("Server-Timing")
                    if timing is None:  # a checkout from before the header (--compare): read after the timing
                        return lambda: json.loads(body)["took_ms"]
                    return float(timing.partition("dur=")[2])

                paths = {"engine": lambda q: retriever.search(q, [target]),
                         "service": lambda q: memories_search(user=user, corpus_ids=[corpus_id], query=q),
                         **{name: functools.partial(api_search, name) for name in urls}}
                clocks = {"engine": time.process_time, "service": time.process_time,
                          **{name: functools.partial(_cpu_seconds, process.pid)
                             for name, process in zip(urls, processes, strict=True)}}
                measured = {
                    block: _interleaved(paths, clocks, warm if block == STEADY else [], phase_q, block)
                    for block, phase_q in phases.items()
                }
            finally:
                for connection in connections.values():
                    connection.close()
            for block, (times, cpu) in measured.items():
                print(
                    f"\n== one search at a time ({args.memories:,} memories, {count} queries in blocks of "
                    f"{block}, {'each path in turn' if block == 1 else 'each path a whole block in turn'}, "
                    "order rotating, tokens warm in every process) =="
                )
                _line("engine, the query's tokens cold (first sight)", times["cold"])
                _line("engine Retriever.search (baseline)", times["engine"])
                _line("service memories_search (in process)", times["service"])
                for name in urls:
                    _line(f"{name} GET .../search/ over HTTP (1 client)", times[name])
                    _line(f"{name} minus the server's own search time", times[name + " took"])
                print("CPU per search (mean; the serving process's threads, 10 ms ticks summed): "
                      + ", ".join(f"{name} {ms:.1f} ms" for name, ms in cpu.items()))
            print(
                f"\n== service memories_search in process, {args.clients} threads at once, {len(load_q)} "
                "searches =="
            )
            latencies, wall = _threads_at_once(
                lambda q: memories_search(user=user, corpus_ids=[corpus_id], query=q), load_q, args.clients
            )
            _line(f"service, {args.clients} threads", latencies)
            print(f"throughput: {len(latencies) / wall:.1f} searches/s ({wall:.1f} s wall)")
            for name in urls:
                print(f"\n== {name}: {args.clients} clients at once, {len(load_q)} requests ==")
                latencies, wall = asyncio.run(_load(urls[name], headers, load_q, args.clients))
                _line(f"{name}, {args.clients} concurrent clients", latencies)
                print(f"throughput: {len(latencies) / wall:.1f} requests/s ({wall:.1f} s wall)")
        finally:
            for process in processes:
                process.terminate()
                process.wait(timeout=30)

        for block, (times, _) in measured.items():
            engine = times["engine"]
            label = "steady (blocks of 10)" if block == STEADY else "busy (blocks of 1)"
            service_layer = statistics.median([s - e for s, e in zip(times["service"], engine, strict=True)])
            print(f"\n{label}: service layer (access, SQL) over the engine alone, per query: "
                  f"median {service_layer:+.2f} ms")
            for name in urls:
                added = statistics.median([a - e for a, e in zip(times[name], engine, strict=True)])
                added_p50s = statistics.median(times[name]) - statistics.median(engine)
                verdict = "meets" if added < GOAL_MS else "MISSES"
                print(
                    f"{label}: {name} added (client latency - engine alone, same query): median {added:+.2f} "
                    f"ms (p50 - p50: {added_p50s:+.2f} ms; HTTP, auth, throttle, JSON beside the server's "
                    f"search: {statistics.median(times[name + ' took']):+.2f} ms); goal < {GOAL_MS:g} ms"
                    + (f": {verdict}" if block == STEADY else " (judged on the steady figure)")
                )
        print(f"load average after: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
