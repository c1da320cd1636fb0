"""Sources kept in sync (corpus/sources/, docs/sources.md): how soon a changed document is
searchable after a sync starts, and what a sync with nothing changed costs.

    .venv/bin/python bench/sync.py                                 # 100,000 memories, 1,000-document sources
    .venv/bin/python bench/sync.py --docs 5000 --source-docs 200   # a quick look

Creates a scratch PostgreSQL database on the server of $DATABASE_URL, builds a corpus of `--docs`
synthetic memories (bench.build's sentences), then adds two sources of `--source-docs` Markdown
documents each: a folder under a scratch SOURCE_ROOTS, and a Git repository served over smart HTTP
by `git http-backend` on loopback (tests/corpus/source_servers.py). For each: the first sync
(every document read and appended), a sync with nothing changed, then `--changed` documents
rewritten (a new fact sentence in each) and a sync, timed from its start until every changed
document's new sentence is the top hit of its search and its old sentence is found nowhere. The
baseline, in the same run: a full build of the corpus with both sources in it. Tasks run inline, as
a worker runs them.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402

import psycopg  # noqa: E402

from bench._hw import print_hardware  # noqa: E402
from bench.build import synthetic_docs  # noqa: E402

DATABASE_URL = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres"
ANIMALS = ["quokka", "axolotl", "narwhal", "pangolin", "okapi", "tardigrade", "capybara", "kakapo", "margay",
           "dugong", "fossa", "saiga"]


_WORDS = re.compile(r"\w+")
SYLLABLES = ["ba", "ko", "ri", "zu", "me", "ta", "vo", "ly", "qui", "do", "ne", "fa", "xi", "po", "gu", "sha",
             "wen", "tor", "mil", "cra"]


def made_up(number: int, salt: int) -> str:
    """A word of its own for each (number, salt): the facts of two documents share no rare word."""
    digits = [(number * 7 + salt) % 20, (number // 20 + salt * 3) % 20, (number // 400 + salt * 11) % 20]
    return "".join(SYLLABLES[d] for d in digits) + SYLLABLES[salt % 20]


def document(kind: str, number: int, version: int, body: str) -> tuple[str, str]:
    """A Markdown document with one made-up fact (the sentence a search must find), and that fact."""
    animal = ANIMALS[number % len(ANIMALS)]
    salt = 2 * version + (kind == "git")
    fact = (f"The {made_up(number, salt)} {animal} of {made_up(number, salt + 7)} counted "
            f"{made_up(number, salt + 13)} crates.")
    return f"# Note {number}\n\n{body}\n\n{fact}\n", fact


def write_docs(folder: Path, kind: str, bodies: list[str], versions: dict[int, int]) -> dict[int, str]:
    facts = {}
    for number, body in enumerate(bodies):
        text, fact = document(kind, number, versions.get(number, 0), body)
        path = folder / f"section-{number % 10}" / f"note-{number}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        facts[number] = fact
    return facts


def holds(text: str, sentence: str) -> bool:
    """Whether a memory's `text` holds the fact `sentence`: every word of it (a document a little
    longer than a chunk ends in a window of its last tokens, and the search may serve the previous
    window, which holds the whole fact but its final full stop: dedup keeps the fuller text)."""
    return set(_WORDS.findall(sentence.lower())) <= set(_WORDS.findall(text.lower()))


def timed_sync(source, *, wait_for: list[str] = (), gone: list[str] = ()) -> tuple[float, object]:  # noqa: ANN001
    """Seconds from the sync's start until every `wait_for` sentence is found (tasks run
    inline, so the sync and its append have ended when the call returns) and no `gone` one is found."""
    from corpus.sources.services import source_sync_start
    from memory.services import memories_search

    started = time.perf_counter()
    source_sync_start(source=source)  # autocommit: on_commit runs the (eager) task now
    source.refresh_from_db()
    if source.status != "succeeded":
        raise SystemExit(f"sync of {source.name}: {source.status}: {source.error}")
    owner = source.corpus.owner
    top = 0
    for sentence in wait_for:
        results = memories_search(
            user=owner, corpus_ids=[source.corpus_id], query=sentence, top_document=False
        )
        texts = [r.memory.text for r in results]
        if not any(holds(text, sentence) for text in texts):
            raise SystemExit(f"not found after the sync: {sentence!r}")
        top += holds(texts[0], sentence)
    elapsed = time.perf_counter() - started
    if wait_for:
        print(f"  {top} of {len(wait_for)} changed sentences the top hit, every one found")
    for sentence in gone:
        results = memories_search(
            user=owner, corpus_ids=[source.corpus_id], query=sentence, top_document=False
        )
        if any(holds(r.memory.text, sentence) for r in results):
            raise SystemExit(f"the old sentence is still found: {sentence!r}")
    return elapsed, source


def run(args: argparse.Namespace, scratch: Path) -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.core.files import File
    from django.core.management import call_command

    from corpus.services.builds import build_start
    from corpus.services.corpora import corpus_create, dataset_upload
    from corpus.sources.services import source_create
    from tests.corpus.source_servers import git_server

    call_command("migrate", verbosity=0)
    print_hardware()
    settings.SOURCE_ROOTS = [str(scratch / "roots")]
    path = scratch / "base.jsonl"
    path.write_text(
        "".join(json.dumps({"text": d}) + "\n" for d in synthetic_docs(args.docs)), encoding="utf-8"
    )
    owner = User.objects.create_user("bench")
    corpus = corpus_create(owner=owner, name="bench", hdc_dimensions=args.dims)
    with open(path, "rb") as handle:
        dataset_upload(corpus=corpus, user=owner, uploaded_file=File(handle, name=path.name))
    started = time.perf_counter()
    build = build_start(corpus=corpus, user=owner)
    build.refresh_from_db()
    print(
        f"PostgreSQL; base corpus: {build.documents:,} memories built in {time.perf_counter() - started:.1f} "
        f"s; dims {args.dims}; sources of {args.source_docs:,} documents, {args.changed} changed"
    )
    sentences = synthetic_docs(3 * args.source_docs, seed=10_000)
    bodies = [" ".join(sentences[3 * n:3 * n + 3]) for n in range(args.source_docs)]
    changed = list(range(0, args.source_docs, max(1, args.source_docs // args.changed)))[:args.changed]
    figures = {}
    with git_server(scratch / "git") as server:
        work = server.repository("docs", {"README.md": "# Docs\n\nThe team's documents.\n"})
        sources = {"folder": (scratch / "roots" / "docs", None), "git": (work / "notes", work)}
        for kind, (folder, repo) in sources.items():
            old = write_docs(folder, kind, bodies, {})
            if repo is not None:
                server.commit(repo, {}, message="notes")
                source = source_create(
                    corpus=corpus, user=owner, name=kind, kind="git", location=server.url("docs")
                )
            else:
                source = source_create(
                    corpus=corpus, user=owner, name=kind, kind="folder", location=str(folder)
                )
            first, source = timed_sync(source)
            unchanged, source = timed_sync(source)
            new = write_docs(folder, kind, bodies, dict.fromkeys(changed, 1))
            if repo is not None:
                server.commit(repo, {}, message="ten changes")
            ten, source = timed_sync(
                source, wait_for=[new[n] for n in changed], gone=[old[n] for n in changed]
            )
            assert source.changed == len(changed), (source.changed, source.failures)
            figures[kind] = (first, unchanged, ten)
            print(
                f"{kind}: first sync (read and append {source.documents.count():,} documents) {first:.2f} s; "
                f"nothing changed {unchanged:.2f} s; {len(changed)} changed: searchable {ten:.2f} s after "
                f"the sync started"
            )
    started = time.perf_counter()
    build = build_start(corpus=corpus, user=owner)
    build.refresh_from_db()
    full = time.perf_counter() - started
    print(f"baseline: a full rebuild of the corpus ({build.documents:,} memories) {full:.1f} s")
    for kind, (_, unchanged, ten) in figures.items():
        print(
            f"  {kind}: {len(changed)} changed searchable in {ten:.2f} s ({full / ten:.0f}x faster than the "
            f"rebuild; goal <= 10 s); nothing changed {unchanged:.2f} s (goal <= 2 s)"
        )


@contextmanager
def scratch_portal(database_url: str) -> Iterator[Path]:
    """A scratch PostgreSQL database on the server of `database_url` and a scratch DATA_DIR, with
    tasks run inline as a worker runs them; both are dropped at the end. Yields the DATA_DIR."""
    server, _, _ = database_url.rpartition("/")
    name = f"hdrag_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    scratch = tempfile.TemporaryDirectory(prefix="hdrag-bench-sync-")
    os.environ.update(DJANGO_SETTINGS_MODULE="hdrag_site.settings", DATABASE_URL=f"{server}/{name}",
                      DATA_DIR=scratch.name, CELERY_TASK_ALWAYS_EAGER="1", HDRAG_ENV="development")
    os.environ.pop("REDIS_URL", None)
    try:
        yield Path(scratch.name)
    finally:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(f"{server}/postgres", autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        scratch.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000, help="memories of the corpus before the sources")
    parser.add_argument("--source-docs", type=int, default=1000)
    parser.add_argument("--changed", type=int, default=10)
    parser.add_argument("--dims", type=int, default=10_000)
    parser.add_argument("--database-url", default=DATABASE_URL)
    args = parser.parse_args()
    with scratch_portal(args.database_url) as scratch:
        run(args, scratch)


if __name__ == "__main__":
    main()
