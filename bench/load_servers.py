"""`python -m bench.load --servers N`: N llama.cpp servers of `--threads / N` threads each behind one
portal (`LLM_SERVERS`), against one server of `--threads` threads, the same users at once on both.

What runs: for each side, fresh llama.cpp servers (the packaged chat model; the one server has
`--parallel` slots, each of the N servers `--parallel / N`, so both sides have the same slots in
all) and one web process of the portal as `./portal run` starts it; every user opens a fresh
conversation and asks `--turns` questions of the set over the real websocket, all first questions
at once (`bench.load`'s users, plans and report). No floor: the two sides are each other's measure.

Printed side by side: answers per minute, TTFT p50/p95, time per output token, errors; then, on
paper, what a team of N servers would answer per minute from the measured rate per server of the
N-server side (each server its own machine with its threads: N times one server's rate, as long as
the users keep every server busy). On one machine the N servers share its cores, so that side
measures the split, not N machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from contextlib import ExitStack
from pathlib import Path

from bench.answers import DATA, SETS, build_corpus, portal_setup
from bench.load import (
    Phase,
    line,
    make_users,
    plan_turns,
    portal_phase,
    print_breakdown,
    print_row,
    start_web,
)

TEAMS = (1, 2, 4, 8)  # server counts of the paper projection


def _load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _side(name: str, data_dir: Path, corpus_id: int, args: argparse.Namespace, servers: int,
          questions: list[str]) -> Phase:
    """One side: `servers` fresh llama.cpp servers splitting the threads and slots, one web process."""
    from engine.llama_server import LlamaServer, free_port
    from engine.model_files import default_chat_gguf_path

    threads, slots = max(1, args.threads // servers), max(1, args.parallel // servers)
    with ExitStack() as running:
        urls = []
        for _ in range(servers):
            server = LlamaServer(
                default_chat_gguf_path(),
                port=free_port(),
                threads=threads,
                ctx_size=args.ctx_size,
                parallel=slots,
                batch=args.batch,
            )
            urls.append(running.enter_context(server).base_url)
        listed = json.dumps([{"url": url, "slots": slots} for url in urls]) if servers > 1 else ""
        web, host = start_web(data_dir, urls[0], "fcfs", args.parallel, args.web_nice, name=f"-{name}",
                              env={"LLM_SERVERS": listed})
        try:
            accounts = make_users(args.users_at_once, corpus_id, "ws")
            plans = plan_turns(args.users_at_once, args.turns, questions,
                               tuple(float(x) for x in args.think.split("-")), args.seed)
            print(f"\n== {name}: {servers} llama.cpp server{'s' if servers > 1 else ''} of {threads} thread"
                  f"{'s' if threads > 1 else ''} and {slots} slots each (load average {_load_average()}) ==")
            phase = asyncio.run(portal_phase(name, [host], accounts, plans, "ws"))
        finally:
            web.terminate()
            web.wait(timeout=30)
    row = line(phase, None)
    print_row(row)
    print_breakdown(phase)
    for turn in phase.turns:
        if turn.error:
            print(f"            error: user {turn.user} turn {turn.number}: {turn.error[:160]}")
    return phase


def main_servers(args: argparse.Namespace) -> int:
    """Both sides, then the comparison and the paper projection."""
    users = [int(n) for n in args.users.split(",")]
    if len(users) != 1:
        raise SystemExit("--servers: give one user count (--users 8)")
    args.users_at_once = users[0]
    source, _, make_corpus = SETS[args.set]
    questions = [question for question, _ in json.loads((DATA / source).read_text(encoding="utf-8"))]
    with tempfile.TemporaryDirectory(prefix="bench-load-servers-") as data_dir:
        print(
            f"set {args.set}; {users[0]} users at once, {args.turns} turns each, think {args.think} s; "
            f"answers up to {args.max_tokens} tokens; {args.threads} threads and {args.parallel} slots in "
            f"all on each side; load average {_load_average()}"
        )
        os.environ.pop("LLM_SERVERS", None)
        portal_setup(Path(data_dir), "http://127.0.0.1:1", args.max_tokens)
        _, corpus_id = build_corpus(make_corpus)
        several = _side(f"{args.servers}-servers", Path(data_dir), corpus_id, args, args.servers, questions)
        one = _side("1-server", Path(data_dir), corpus_id, args, 1, questions)
    rows = [line(several, None), line(one, None)]
    print(f"\n== side by side (load average {_load_average()}) ==")
    for row in rows:
        print(
            f"  {row['name']:<10} {row['per_minute']:6.1f} answers/min  TTFT p50 {row['p50'] or 0:6.1f} s  "
            f"p95 {row['p95'] or 0:6.1f} s  answered {row['answered']}/{row['turns']}  errors {row['errors']}"
        )
    per_server = rows[0]["per_minute"] / args.servers
    print(f"\n== on paper: a team of N servers like one of the {args.servers} "
          f"({max(1, args.threads // args.servers)} thread(s) each, each on its own machine) ==")
    print(f"  measured per server: {per_server:.1f} answers/min")
    for count in TEAMS:
        print(
            f"  {count} server{'s' if count > 1 else ' '}: {count * per_server:6.1f} answers/min, as long as "
            f"at least {count * max(1, args.parallel // args.servers)} users keep their slots busy"
        )
    return 0
