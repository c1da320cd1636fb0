"""A long run of the whole portal under `./portal run`, to find what grows: memory, file
descriptors, llama.cpp slots, database connections, files on disk.

    python -m bench.soak --minutes 60 [--sample-seconds 60] [--users 4] [--plot soak.png]

Starts `./portal run` on a fresh DATA_DIR (SQLite unless DATABASE_URL is set; the packaged chat
model), waits for the demo corpus, then drives a steady mix until the time is up: `--users` users
chatting over websockets (a question, the answer, 20-40 s of thought, again; a new conversation over
the API every `--turns-per-conversation` turns, as people start one per topic), an API search every
10 s, an upload to a corpus of its own every `--upload-minutes` (each becomes an append; appends
come to a merge by the portal's own rule, SEGMENT_MERGE_PERCENT), and one full build at half time.
Every `--sample-seconds` it samples each process of the portal (RSS, its private part, the part in its
allocator's heap and small mappings, and open descriptors from /proc), llama.cpp's slots in use
(/slots), the database's connections (PostgreSQL: pg_stat_activity; SQLite: descriptors open on its
file) and the sizes of DATA_DIR's segment store and spool. At the end it prints each series' growth per
hour after the first `--settle-minutes` (a least-squares line; RSS also in % an hour), every error, and
writes a PNG of the samples (a small writer of its own: no plotting library is installed), one panel per
series, colours listed beside the figures. The hardware is printed first; on a shared machine say so
beside the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = ["How does a generator pause at yield?", "What does the with statement do?",
             "How are exceptions chained?", "What is a decorator?", "How do I open a file for appending?",
             "What does the global statement do?", "How are default argument values evaluated?"]
ANSWER_SECONDS = 600  # a chat turn not done by then is an error of the soak (the user would have given up)
COLOURS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
           (227, 119, 194), (127, 127, 127)]


@dataclass
class Run:
    started: float = field(default_factory=time.monotonic)
    samples: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    turns: int = 0
    searches: int = 0
    uploads: int = 0
    conversations: int = 0  # opened during the run, beside each user's first

    def error(self, what: str) -> None:
        self.errors.append(f"{(time.monotonic() - self.started) / 60:6.1f} min  {what}")


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--sample-seconds", type=float, default=60.0)
    parser.add_argument("--settle-minutes", type=float, default=10.0)
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--upload-minutes", type=float, default=3.0)
    parser.add_argument(
        "--turns-per-conversation",
        type=_turn_range,
        default=(5, 15),
        help="LOW-HIGH: each user opens a new conversation after a number of turns drawn from "
        "this range; 0: one conversation for the whole run",
    )
    parser.add_argument("--plot", type=Path, default=Path("soak.png"))
    parser.add_argument("--data-dir", type=Path, default=None)
    return parser.parse_args()


def _turn_range(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    try:
        bounds = (int(low), int(high or low))
    except ValueError:
        bounds = (-1, -1)
    if bounds != (0, 0) and not 1 <= bounds[0] <= bounds[1]:
        raise argparse.ArgumentTypeError(f"expected 0, or LOW-HIGH with 1 <= LOW <= HIGH, got {text!r}")
    return bounds


# ------------------------------------------------------------------ the portal and its processes


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_portal(data_dir: Path) -> tuple[subprocess.Popen, dict]:
    ports = {"web": _free_port(), "llama": _free_port()}
    env = {
        **os.environ,
        "DATA_DIR": str(data_dir),
        "PORT": str(ports["web"]),
        "LLAMA_PORT": str(ports["llama"]),
        "HDRAG_ADMIN_USER": "admin",
        "HDRAG_ADMIN_PASSWORD": "soak-admin-password",
    }
    env.pop("LLM_BASE_URL", None)
    log = open(data_dir / "portal.log", "ab")  # noqa: SIM115 - open for the portal's whole life
    portal = subprocess.Popen(
        [str(REPO / "portal"), "run"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return portal, ports


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def portal_processes(root: int) -> dict[str, int]:
    """{name: pid} of every process under `root` (web, worker and its pool children, llama)."""
    tree, found, todo = _children(), {}, [root]
    while todo:
        pid = todo.pop()
        todo.extend(tree.get(pid, []))
        try:
            command = (Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")).decode(
                errors="replace"
            )
        except OSError:
            continue
        for name, marker in (("web", "uvicorn"), ("llama", "engine.llama_server"), ("worker", "celery")):
            if marker in command:
                key = name if name not in found else f"{name}-{pid}"
                found[key] = pid
    return found


def _memory_mb(pid: int) -> dict[str, float]:
    """{"rss": VmRSS, "anon": RssAnon} in MB. A leak grows the private (anonymous) part; the rest of
    RSS is file pages, chiefly a mapped model, which grows as more of the file is read (a token's
    embedding row is paged in the first time that token appears), is bounded by the file's size and
    is dropped by the kernel when memory is short."""
    wanted = {"VmRSS:": "rss", "RssAnon:": "anon"}
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    fields = {parts[0]: parts[1] for parts in (line.split() for line in lines) if len(parts) > 1}
    return {name: int(fields[key]) / 1024 for key, name in wanted.items() if key in fields}


BIG_MAPPING_KB = 256 * 1024


def _heap_mb(pid: int) -> float | None:
    """MB resident in the allocator's memory: the [heap] and the anonymous mappings smaller than
    256 MiB (malloc's arenas and the blocks it maps one by one). The rest of the private part is
    buffers allocated once and kept, chiefly llama.cpp's KV cache: if RSS grows while this stays
    flat, the growth is such a buffer being touched, not the allocator keeping freed blocks."""
    try:
        text = Path(f"/proc/{pid}/smaps").read_text()
    except OSError:
        return None
    total, counts, size = 0, False, 0
    for line in text.splitlines():
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):  # a mapping's first line
            counts = len(head) < 6 or head[5] == "[heap]"
        elif head[:1] == ["Size:"]:
            size = int(head[1])
        elif head[:1] == ["Rss:"] and counts and size < BIG_MAPPING_KB:
            total += int(head[1])
    return total / 1024


def _fds(pid: int) -> list[str]:
    try:
        return [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return []


def _dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6 if path.exists() else 0.0


def sample(root: int, ports: dict, data_dir: Path) -> dict:
    import httpx

    values: dict[str, float] = {}
    db_files = 0
    for name, pid in portal_processes(root).items():
        memory, fds = _memory_mb(pid), _fds(pid)
        if "rss" in memory:
            values[f"rss_mb:{name}"] = round(memory["rss"], 1)
            values[f"anon_mb:{name}"] = round(memory.get("anon", 0.0), 1)
            heap = _heap_mb(pid)
            if heap is not None:
                values[f"heap_mb:{name}"] = round(heap, 1)
            values[f"fds:{name}"] = len(fds)
            db_files += sum(1 for target in fds if target.endswith("portal.sqlite3"))
    try:
        slots = httpx.get(f"http://127.0.0.1:{ports['llama']}/slots", timeout=5).json()
        values["llama_slots_busy"] = sum(1 for slot in slots if slot.get("is_processing"))
    except (httpx.HTTPError, ValueError):
        pass
    values["db_connections"] = _pg_connections() if os.environ.get("DATABASE_URL") else db_files
    values["segments_mb"] = round(_dir_mb(data_dir / "corpora"), 2)
    values["spool_mb"] = round(_dir_mb(data_dir / "tmp"), 2)
    return values


def _pg_connections() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return int(cursor.fetchone()[0]) - 1  # not this bench's own


# ------------------------------------------------------------------ the mix


def setup_accounts(users: int) -> tuple[list[dict], str, int, int]:
    """Users with session cookies, API tokens and a first conversation over the demo corpus, and a
    corpus of the bench's own for uploads. Returns (accounts, token, demo corpus id, upload corpus id)."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    from accounts.services.tokens import api_token_create
    from chat.services import conversation_create
    from corpus.models import Corpus
    from corpus.services.corpora import corpus_create

    user_model = get_user_model()
    demo = Corpus.objects.exclude(active_build=None).order_by("pk").first()
    demo.visibility = "everyone"
    demo.save(update_fields=["visibility"])
    accounts = []
    for index in range(users):
        user = user_model.objects.create_user(f"soak-{index}", password="soak-user-password")
        client = Client()
        client.force_login(user)
        accounts.append(
            {
                "cookie": (
                    f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
                ),
                "token": api_token_create(user=user, name="soak")[1],
                "corpus": demo.pk,
                "conversation": conversation_create(user=user, corpus_ids=[demo.pk]).pk,
            }
        )
    owner = user_model.objects.get(username="soak-0")
    uploads = corpus_create(owner=owner, name="soak uploads", hdc_dimensions=1024)
    return accounts, accounts[0]["token"], demo.pk, uploads.pk


async def new_conversation(host: str, account: dict, run: Run) -> None:
    """A new conversation over the account's corpus, created through the API as a client would; on a
    failure the user goes on in the one they have (the failure is counted)."""
    import httpx

    try:
        async with httpx.AsyncClient(timeout=60) as api:
            made = await api.post(
                f"http://{host}/api/v1/conversations/",
                json={"corpora": [account["corpus"]]},
                headers={"Authorization": f"Bearer {account['token']}"},
            )
        if made.status_code == 201:
            account["conversation"] = made.json()["id"]
            run.conversations += 1
        else:
            run.error(f"new conversation: {made.status_code} {made.text[:200]}")
    except httpx.HTTPError as error:
        run.error(f"new conversation: {type(error).__name__}: {error}")


async def chat_user(
    host: str, account: dict, run: Run, until: float, seed: int, turns: tuple[int, int]
) -> None:
    from websockets.asyncio.client import connect

    rng = random.Random(seed)
    while time.monotonic() < until:
        left = rng.randint(*turns) if turns[1] else -1  # turns left in this conversation; -1: for ever
        try:
            async with connect(
                f"ws://{host}/ws/chat/{account['conversation']}/",
                open_timeout=60,
                additional_headers={"Cookie": account["cookie"], "Origin": f"http://{host}"},
            ) as socket:
                json.loads(await socket.recv())
                while time.monotonic() < until and left != 0:
                    await socket.send(json.dumps({"type": "chat.send", "content": rng.choice(QUESTIONS)}))
                    try:
                        async with asyncio.timeout(ANSWER_SECONDS):
                            while (event := json.loads(await socket.recv()))["type"] not in (
                                "chat.done",
                                "chat.error",
                            ):
                                pass
                    except TimeoutError:
                        raise TimeoutError(f"no answer within {ANSWER_SECONDS} s of the question") from None
                    run.turns, left = run.turns + 1, left - 1
                    if event["type"] == "chat.error":
                        run.error(f"chat: {event.get('code')}: {event.get('error')}")
                    await asyncio.sleep(rng.uniform(20, 40))
        except Exception as error:  # noqa: BLE001 - every failure is a finding of the soak, then it reconnects
            run.error(f"chat socket: {type(error).__name__}: {error}")
            await asyncio.sleep(5)
            continue
        if left == 0:
            await new_conversation(host, account, run)


async def api_mix(
    host: str, token: str, demo: int, uploads: int, run: Run, until: float, upload_minutes: float
) -> None:
    import httpx

    headers = {"Authorization": f"Bearer {token}"}
    next_upload, built, halfway = time.monotonic() + 30, False, run.started + (until - run.started) / 2
    async with httpx.AsyncClient(base_url=f"http://{host}/api/v1", headers=headers, timeout=120) as api:
        while time.monotonic() < until:
            try:
                found = await api.get(
                    "/search/", params={"q": random.choice(QUESTIONS), "corpora": str(demo)}
                )
                run.searches += 1
                if found.status_code != 200:
                    run.error(f"search: {found.status_code} {found.text[:200]}")
                if time.monotonic() >= next_upload:
                    lines = [
                        json.dumps(
                            {
                                "text": f"Soak note {run.uploads}-{i}: the "
                                        f"{random.choice(QUESTIONS).lower()} "
                                f"again, written at {time.time():.0f}."
                            }
                        )
                        for i in range(20)
                    ]
                    files = {
                        "file": (f"soak-{run.uploads}.jsonl", "\n".join(lines).encode(), "application/jsonl")
                    }
                    stored = await api.post(f"/corpora/{uploads}/datasets/", files=files)
                    run.uploads += 1
                    next_upload += upload_minutes * 60
                    if stored.status_code not in (200, 201):
                        run.error(f"upload: {stored.status_code} {stored.text[:200]}")
                if not built and time.monotonic() >= halfway:
                    built = True
                    started = await api.post(f"/corpora/{uploads}/builds/")
                    if started.status_code not in (201, 202, 409):
                        run.error(f"build: {started.status_code} {started.text[:200]}")
            except httpx.HTTPError as error:
                run.error(f"api: {type(error).__name__}: {error}")
            await asyncio.sleep(10)


async def sampler(root: int, ports: dict, data_dir: Path, run: Run, until: float, every: float) -> None:
    while time.monotonic() < until:
        values = await asyncio.to_thread(sample, root, ports, data_dir)
        run.samples.append({"minute": round((time.monotonic() - run.started) / 60, 2), **values})
        print(json.dumps(run.samples[-1]), flush=True)
        await asyncio.sleep(every)


# ------------------------------------------------------------------ figures and the plot


def growth(run: Run, settle: float) -> dict[str, tuple[float, float, float]]:
    """{series: (first value, slope per hour, % per hour of the mean)} over the samples after `settle`
    minutes."""
    names = sorted({k for s in run.samples for k in s if k != "minute"})
    result = {}
    for name in names:
        points = [(s["minute"] / 60, s[name]) for s in run.samples if s["minute"] >= settle and name in s]
        if len(points) < 2:
            continue
        mean_x = sum(x for x, _ in points) / len(points)
        mean_y = sum(y for _, y in points) / len(points)
        spread = sum((x - mean_x) ** 2 for x, _ in points)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0
        result[name] = (points[0][1], slope, 100 * slope / mean_y if mean_y else 0.0)
    return result


def write_png(path: Path, run: Run, width: int = 900, panel: int = 140) -> list[str]:
    """One panel per kind of series (rss_mb, fds, the rest each alone), lines in COLOURS; returns
    the legend lines ("panel: colour = series")."""
    groups: dict[str, list[str]] = {}
    for name in sorted({k for s in run.samples for k in s if k != "minute"}):
        groups.setdefault(name.split(":")[0], []).append(name)
    height = panel * max(1, len(groups))
    pixels = bytearray(b"\xff" * (width * height * 3))
    legend = []
    span = max((s["minute"] for s in run.samples), default=1.0) or 1.0
    for row, (group, names) in enumerate(groups.items()):
        top = row * panel
        for x in range(width):
            _dot(pixels, width, x, top + panel - 1, (0, 0, 0))
        values = [s[n] for s in run.samples for n in names if n in s]
        low, high = min(values), max(values)
        high = high if high > low else low + 1
        for index, name in enumerate(names):
            colour = COLOURS[index % len(COLOURS)]
            legend.append(f"panel {row + 1} ({group}, {low:g}..{high:g}): rgb{colour} = {name}")
            points = [(int(s["minute"] / span * (width - 11)) + 5,
                       top + panel - 6 - int((s[name] - low) / (high - low) * (panel - 12)))
                      for s in run.samples if name in s]
            for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
                for step in range(max(abs(x1 - x0), abs(y1 - y0), 1) + 1):
                    t = step / max(abs(x1 - x0), abs(y1 - y0), 1)
                    _dot(pixels, width, round(x0 + (x1 - x0) * t), round(y0 + (y1 - y0) * t), colour)
    raw = b"".join(b"\x00" + bytes(pixels[y * width * 3:(y + 1) * width * 3]) for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )
    return legend


def _dot(pixels: bytearray, width: int, x: int, y: int, colour: tuple[int, int, int]) -> None:
    if 0 <= x < width and 0 <= y * width * 3 < len(pixels):
        offset = (y * width + x) * 3
        pixels[offset:offset + 3] = bytes(colour)


def report(run: Run, args: argparse.Namespace) -> None:
    print(f"\nload average at the end (1, 5, 15 min): {os.getloadavg()} on {os.cpu_count()} CPUs")
    print(
        f"{args.minutes:g} min run: {run.turns} chat turns, {run.searches} API searches, {run.uploads} "
        f"uploads, {run.conversations} new conversations, "
        f"{len(run.samples)} samples; growth after the first {args.settle_minutes:g} min (least squares):"
    )
    for name, (first, slope, percent) in growth(run, args.settle_minutes).items():
        print(f"  {name:28s} first {first:10.1f}  {slope:+10.2f} /hour  ({percent:+6.1f} %/hour)")
    print(f"errors: {len(run.errors)}")
    for line in run.errors:
        print("  " + line)
    for line in write_png(args.plot, run):
        print("  " + line)
    print(f"plot: {args.plot}")


def _exit_on_sigterm() -> None:
    """SIGTERM (a `kill`, a CI timeout) ends the soak as Ctrl-C would, through `main`'s cleanup, so the
    portal it started stops with it; Python's default would end the process there and leave the
    portal's processes running."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def main() -> int:
    args = _parse()
    _exit_on_sigterm()
    sys.path.insert(0, str(REPO))
    from bench._hw import print_hardware

    print_hardware()
    print(f"load average at the start (1, 5, 15 min): {os.getloadavg()}")
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="hdrag-soak-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    os.environ.update(DATA_DIR=str(data_dir), DJANGO_SETTINGS_MODULE="hdrag_site.settings")
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request would bury the samples
    portal, ports = start_portal(data_dir)
    try:
        import django
        import httpx

        deadline = time.monotonic() + 900
        while True:
            if portal.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the portal did not start; see {data_dir / 'portal.log'}")
            try:
                httpx.get(f"http://127.0.0.1:{ports['web']}/accounts/login/", timeout=2)
                django.setup()
                from corpus.models import Corpus

                if Corpus.objects.exclude(active_build=None).exists():
                    break
            except Exception:  # noqa: BLE001 - not up yet (no server, no tables, no demo build)
                pass
            time.sleep(3)
        accounts, token, demo, uploads = setup_accounts(args.users)
        run = Run()
        until = run.started + args.minutes * 60
        host = f"127.0.0.1:{ports['web']}"

        async def everything() -> None:
            tasks = [
                asyncio.create_task(work)
                for work in (
                    sampler(portal.pid, ports, data_dir, run, until, args.sample_seconds),
                    api_mix(host, token, demo, uploads, run, until, args.upload_minutes),
                    *(
                        chat_user(host, a, run, until, i, args.turns_per_conversation)
                        for i, a in enumerate(accounts)
                    ),
                )
            ]
            # A turn still streaming when the time is up is left unfinished, not waited for.
            _, late = await asyncio.wait(tasks, timeout=until - time.monotonic() + 5)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

        asyncio.run(everything())
        report(run, args)
    finally:
        os.killpg(portal.pid, signal.SIGTERM)
        try:
            portal.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(portal.pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
