"""The queue of turns into the LLM: its own cost per turn and its hand-over, in-process vs shared through
Redis.

    python -m bench.llm_queue [--turns 200] [--users 1,4,16] [--processes 2] [--redis redis://127.0.0.1:6379/0]
                              [--prefill-ms 5] [--decode-ms 20]

What runs: no LLM, only the queue (`prefill=1`, a slot for every user, no caps that bind). Two
arms: the in-process `chat.llm.queue.LLMQueue` (the baseline and the floor: a lock and a
future, the users on one event loop), and the shared `chat.llm.queue_redis.RedisLLMQueue`
on the real Redis of `--redis` (default: REDIS_URL, else the local one), its users on one process
and, spread round robin, on `--processes` OS processes (each its own queue object, event loop,
connections and listening thread: the web processes it is for).

* **cycle**: each user loops enter → wait (admitted) → streaming → close with no work between:
  the queue's own cost of a turn (per-turn wall time at 1 user; turns per second over all users).
* **hand-over**: each user loops enter → wait → `--prefill-ms` (the prompt being read) →
  streaming → `--decode-ms` → close. Hand-over: from the `streaming()` that let the next prompt
  in, to that waiter's `wait()` returning (the monotonic clock is one for every process). It is
  the time the LLM stands idle between two prompts on a CPU server.

Printed: hardware, then per arm and user count p50/p95, and the ratio to the in-process arm.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import redis  # noqa: E402

from bench._hw import print_hardware  # noqa: E402
from bench.answers import percentile  # noqa: E402
from chat.llm.queue import TurnQueue  # noqa: E402
from chat.llm.queue_redis import namespace, redacted  # noqa: E402


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200, help="turns per user count and arm, over all users")
    parser.add_argument("--users", default="1,4,16", help="comma-separated user counts")
    parser.add_argument("--processes", type=int, default=2, help="OS processes of the spread Redis arm")
    parser.add_argument("--redis", default=os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
    parser.add_argument("--prefill-ms", type=float, default=5.0)
    parser.add_argument("--decode-ms", type=float, default=20.0)
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # JSON: one process of an arm
    return parser.parse_args()


def _policy(users: int) -> dict[str, int]:
    """One prefill at a time, a slot for every user, no cap that binds."""
    return {"prefill": 1, "streams": users + 1, "limit": 10_000, "per_user": 2}


def _queue(arm: str, redis_url: str, server_url: str, users: int) -> TurnQueue:
    policy = _policy(users)
    if arm == "process":
        from chat.llm.queue import LLMQueue

        return LLMQueue(**policy)
    from chat.llm.queue_redis import RedisLLMQueue

    return RedisLLMQueue(redis_url=redis_url, server_url=server_url, **policy)


async def _users(job: dict) -> dict:
    """This process's users of one run: what each turn cost, when prefill was let go, and when a
    turn that waited was let in."""
    queue = _queue(job["arm"], job["redis"], job["server"], job["all_users"])
    prefill, decode = job["prefill_ms"] / 1000, job["decode_ms"] / 1000
    cycles: list[float] = []
    releases: list[float] = []
    admissions: list[float] = []

    async def user(name: str, turns: int) -> None:
        for _ in range(turns):
            waited = False

            async def on_wait(ahead: int) -> None:
                nonlocal waited
                waited = True

            started = time.perf_counter()
            ticket = queue.enter(name)
            await ticket.wait(on_wait)
            if waited:
                admissions.append(time.perf_counter())
            await asyncio.sleep(prefill)  # 0: the other users of this process get their turn
            releases.append(time.perf_counter())
            ticket.streaming()
            await asyncio.sleep(decode)
            ticket.close()
            cycles.append(time.perf_counter() - started)

    queue.snapshot()  # connected and warm before the clock starts
    await asyncio.sleep(max(0.0, job["start_at"] - time.perf_counter()))
    began = time.perf_counter()
    await asyncio.gather(*(user(name, turns) for name, turns in job["users"]))
    return {
        "cycles": cycles,
        "releases": releases,
        "admissions": admissions,
        "wall": time.perf_counter() - began,
    }


def _run(arm: str, processes: int, users: int, args: argparse.Namespace, *, work: bool) -> dict:
    """One arm at one user count, its users spread over `processes` (1: this process)."""
    per_user = max(1, args.turns // users)
    names = [(f"user{n}", per_user) for n in range(users)]
    job = {"arm": arm, "redis": args.redis, "server": f"http://bench-{uuid.uuid4().hex[:8]}.test:8081",
           "all_users": users, "prefill_ms": args.prefill_ms if work else 0.0,
           "decode_ms": args.decode_ms if work else 0.0}
    if processes == 1:
        results = [asyncio.run(_users({**job, "users": names, "start_at": 0.0}))]
    else:
        start_at = time.perf_counter() + 3.0  # every worker imported and connected by then
        workers = [subprocess.Popen([sys.executable, "-m", "bench.llm_queue", "--worker",
                                     json.dumps({**job, "users": names[p::processes], "start_at": start_at})],
                                    cwd=REPO, stdout=subprocess.PIPE, text=True) for p in range(processes)]
        results = [json.loads(worker.communicate()[0]) for worker in workers]
    if arm == "redis":  # only this run's keys: the Redis may be shared
        client = redis.Redis.from_url(args.redis)
        prefix = namespace(job["server"], **_policy(users))
        client.delete(*client.scan_iter(match=f"{prefix}:*"))
    releases = sorted(t for r in results for t in r["releases"])
    handovers = []
    for admitted in (t for r in results for t in r["admissions"]):
        before = bisect.bisect_right(releases, admitted)  # prefill=1: the last release let it in
        if before:
            handovers.append(admitted - releases[before - 1])
    cycles = [c for r in results for c in r["cycles"]]
    return {
        "cycles": cycles,
        "handovers": handovers,
        "turns_per_s": len(cycles) / max(r["wall"] for r in results),
    }


def _row(name: str, values: list[float], baseline: list[float] | None, extra: str = "") -> str:
    if not values:
        return f"  {name:<22} (no turn waited)"
    ratio = (
        f"   ratio p50 {statistics.median(values) / statistics.median(baseline):6.1f}x" if baseline else ""
    )
    return (
        f"  {name:<22} p50 {statistics.median(values) * 1e3:8.3f} ms   p95 "
        f"{percentile(values, 0.95) * 1e3:8.3f} ms"
        f"{ratio}{extra}"
    )


def main() -> None:
    args = _parse()
    if args.worker:
        print(json.dumps(asyncio.run(_users(json.loads(args.worker)))))
        return
    print_hardware()
    server = redis.Redis.from_url(args.redis).info("server")
    print(
        f"== setup ==\n  Redis {server['redis_version']} at {redacted(args.redis)}, {args.turns} turns per "
        f"run, hand-over work: prefill {args.prefill_ms:g} ms, decode {args.decode_ms:g} ms"
    )
    user_counts = [int(n) for n in args.users.split(",")]
    for title, work in (("cycle: enter -> admitted -> streaming -> close, no work", False),
                        ("hand-over: streaming() -> the next waiter's wait() returns", True)):
        print(f"== {title} ==")
        for users in user_counts:
            if work and users == 1:
                continue  # no one waits
            arms = [("in-process", "process", 1), ("redis, 1 process", "redis", 1)]
            if min(args.processes, users) > 1:
                arms.append(
                    (f"redis, {min(args.processes, users)} processes", "redis", min(args.processes, users))
                )
            print(f" {users} user{'s' if users != 1 else ''} at once")
            baseline = None
            for name, arm, processes in arms:
                result = _run(arm, processes, users, args, work=work)
                values = result["handovers"] if work else result["cycles"]
                print(
                    _row(name, values, baseline, "" if work else f"   {result['turns_per_s']:8.0f} turns/s")
                )
                baseline = baseline or values


if __name__ == "__main__":
    main()
