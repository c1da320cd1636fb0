"""Search quality after many syncs against a fresh build of the same documents.

    nice -n 10 .venv/bin/python -m bench.sync_quality --no-merge    # 600 documents, 20 syncs, no merge
    nice -n 10 .venv/bin/python -m bench.sync_quality               # merges as the portal's settings say

A folder source (corpus/sources/folder.py) of real text, two kinds of it: Linux manual pages (the
DESCRIPTION section of each; `manpages manpages-dev`) and the Python standard library's docstrings
(bench/data: the same sets as bench/retrieval_eval). Its corpus is built by the first sync, then
`--rounds` rounds each rewrite some documents with another text, edit some (a sentence added),
add new ones and delete some, and sync through the real path (`source_sync_start`, tasks inline as
a worker runs them: new documents appended, changed ones replacing theirs, removed ones deleted,
merges when the state is due one: with the default SEGMENT_LIMIT of 10, the 20th sync's append
is merged at once, so `--no-merge`, every append kept, is the case to measure). Then a second
corpus gets a folder source of the same final folder: its first sync is a fresh build of exactly
those documents (the baseline, same run).

Queries are known items drawn from the final documents (a manual page's NAME line, a docstring's
summary line; the known item is the document the query was taken from), searched in both corpora
with `memories_search` as the portal serves it (threshold, fusion, MMR; a token budget that
holds every kept memory) and as the index alone ranks it (`raw_limit`). Printed: recall@10 and MRR@10 of
both corpora, their difference, and the synced corpus's segments at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench._hw import print_hardware  # noqa: E402
from bench.data import manpages, pydocs  # noqa: E402
from bench.sync import DATABASE_URL, scratch_portal  # noqa: E402

K = 10
SOURCE_NAME = "docs"
TOKEN_BUDGET = 100_000  # enough for every kept memory: the ranking, not the prompt's size, is measured


@dataclass(frozen=True)
class Text:
    """A document's text and the query that should find it (None: a distractor only)."""

    text: str
    query: str | None
    kind: str  # "man" or "python"


def real_texts(per_kind: int, seed: int) -> list[Text]:
    """`per_kind` texts of each kind (fewer where the machine has fewer), interleaved, shuffled."""
    sets = {"man": manpages.known_item_set(manpages.manpage_entries(), per_kind, per_kind, seed=seed),
            "python": pydocs.known_item_set(pydocs.pydoc_entries(), per_kind, per_kind, seed=seed)}
    texts = []
    for kind, known in sets.items():
        queries = dict(zip(known.relevant, known.queries, strict=True))
        texts += [Text(text, queries.get(number), kind) for number, text in enumerate(known.documents)]
    random.Random(seed).shuffle(texts)
    return texts


class Folder:
    """The source's folder: path -> Text, written to disk as it changes."""

    def __init__(self, root: Path, pool: list[Text]) -> None:
        self.root, self.pool, self.files = root, pool, {}
        self.serial = 0

    def _write(self, path: str, text: Text) -> None:
        (self.root / path).parent.mkdir(parents=True, exist_ok=True)
        (self.root / path).write_text(text.text + "\n", encoding="utf-8")
        self.files[path] = text

    def add(self) -> None:
        text = self.pool.pop()
        self.serial += 1
        self._write(f"{text.kind}/doc-{self.serial:05d}.{'md' if text.kind == 'python' else 'txt'}", text)

    def rewrite(self, path: str) -> None:
        """The document at `path` now holds another text (its query is the new text's)."""
        self._write(path, self.pool.pop())

    def edit(self, path: str, round_number: int) -> None:
        """A sentence added at the end: another hash, nearly the same text (and the same query)."""
        old = self.files[path]
        self._write(
            path, Text(f"{old.text}\n\nRevised in round {round_number} after a review.", old.query, old.kind)
        )

    def remove(self, path: str) -> None:
        (self.root / path).unlink()
        del self.files[path]


def mutate(
    folder: Folder, rng: random.Random, round_number: int, args: argparse.Namespace
) -> tuple[int, int, int]:
    """One round's changes; returns the (added, changed, removed) a sync should report."""
    paths = sorted(folder.files)
    touched = rng.sample(paths, args.rewrite + args.edit + args.remove)
    for path in touched[:args.rewrite]:
        folder.rewrite(path)
    for path in touched[args.rewrite:args.rewrite + args.edit]:
        folder.edit(path, round_number)
    for path in touched[args.rewrite + args.edit:]:
        folder.remove(path)
    for _ in range(args.add):
        folder.add()
    return args.add, args.rewrite + args.edit, args.remove


def sync(source):  # noqa: ANN001, ANN201 - a Source row
    from corpus.sources.services import source_sync_start

    source_sync_start(source=source)  # autocommit: on_commit runs the (eager) task now
    source.refresh_from_db()
    if source.status != "succeeded" or source.failures:
        raise SystemExit(f"sync of {source.name}: {source.status}: {source.error} {source.failures}")
    return source


def ranked_paths(owner, corpus_id: int, query: str, *, raw: bool) -> list[str]:  # noqa: ANN001 - a User
    """The first K distinct documents (their paths at the source) a search returns."""
    from memory.services import memories_search

    if raw:
        results = memories_search(user=owner, corpus_ids=[corpus_id], query=query, raw_limit=4 * K)
    else:
        results = memories_search(user=owner, corpus_ids=[corpus_id], query=query, token_budget=TOKEN_BUDGET)
    paths: list[str] = []
    for result in results:
        path = result.dataset_name.removeprefix(f"{SOURCE_NAME}/")
        if path not in paths:
            paths.append(path)
    return paths[:K]


def quality(owner, corpus_id: int, queries: list[tuple[str, str]], *, raw: bool) -> tuple[float, float, list]:  # noqa: ANN001
    """recall@K, MRR@K and the rankings of (query, known path) pairs."""
    found = reciprocal = 0.0
    rankings = []
    for query, path in queries:
        ranking = ranked_paths(owner, corpus_id, query, raw=raw)
        rankings.append(ranking)
        if path in ranking:
            found += 1
            reciprocal += 1 / (ranking.index(path) + 1)
    return found / len(queries), reciprocal / len(queries), rankings


def build_synced(args: argparse.Namespace, folder: Folder, owner):  # noqa: ANN001, ANN201
    """The corpus built by the first sync and changed by `--rounds` syncs."""
    from corpus.services.corpora import corpus_create
    from corpus.sources.services import source_create

    corpus = corpus_create(owner=owner, name="synced", hdc_dimensions=args.dims)
    source = source_create(
        corpus=corpus, user=owner, name=SOURCE_NAME, kind="folder", location=str(folder.root)
    )
    started = time.perf_counter()
    source = sync(source)
    print(f"first sync: {source.added:,} documents read and built in {time.perf_counter() - started:.1f} s")
    rng = random.Random(args.seed)
    seconds = []
    for round_number in range(1, args.rounds + 1):
        expected = mutate(folder, rng, round_number, args)
        started = time.perf_counter()
        source = sync(source)
        seconds.append(time.perf_counter() - started)
        if (source.added, source.changed, source.removed) != expected:
            raise SystemExit(
                f"round {round_number}: the sync reported {source.added, source.changed, source.removed}"
                f", the folder changed by {expected}"
            )
    corpus.refresh_from_db()
    full_builds = corpus.builds.filter(kind="build", status="succeeded").count()
    print(f"{args.rounds} syncs (each: {args.rewrite} rewritten, {args.edit} edited, {args.add} added, "
          f"{args.remove} removed): {sum(seconds):.1f} s, median {sorted(seconds)[len(seconds) // 2]:.2f} s; "
          f"{full_builds - 1} merges; the state now: {len(corpus.serving_build_ids)} segments")
    return corpus


def run(args: argparse.Namespace, scratch: Path) -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from corpus.services.corpora import corpus_create
    from corpus.sources.services import source_create

    call_command("migrate", verbosity=0)
    print_hardware()
    print(
        f"load average at the start: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
        f"{os.getloadavg()[2]:.2f}"
    )
    settings.SOURCE_ROOTS = [str(scratch / "roots")]
    if args.no_merge:
        settings.SEGMENT_LIMIT, settings.SEGMENT_MERGE_PERCENT = 10_000, 10_000
    merges = "off (every append kept)" if args.no_merge else (
        f"SEGMENT_LIMIT {settings.SEGMENT_LIMIT}, SEGMENT_MERGE_PERCENT {settings.SEGMENT_MERGE_PERCENT}")
    per_round = args.add + args.rewrite
    pool = real_texts((args.docs + args.rounds * per_round) // 2 + 1, args.seed)
    folder = Folder(scratch / "roots" / "docs", pool)
    for _ in range(min(args.docs, len(pool) - args.rounds * per_round)):
        folder.add()
    kinds = {kind: sum(t.kind == kind for t in folder.files.values()) for kind in ("man", "python")}
    print(f"PostgreSQL; dims {args.dims}; merges {merges}; {len(folder.files):,} documents "
          f"({kinds['man']:,} manual pages, {kinds['python']:,} docstrings)")
    owner = User.objects.create_user("bench")
    synced = build_synced(args, folder, owner)
    fresh = corpus_create(owner=owner, name="fresh", hdc_dimensions=args.dims)
    started = time.perf_counter()
    sync(source_create(corpus=fresh, user=owner, name=SOURCE_NAME, kind="folder", location=str(folder.root)))
    print(f"fresh build of the same {len(folder.files):,} documents: {time.perf_counter() - started:.1f} s")
    known = [(text.query, path) for path, text in sorted(folder.files.items()) if text.query]
    queries = random.Random(args.seed + 1).sample(known, min(args.queries, len(known)))
    print(f"{len(queries)} known-item queries from the final documents")
    worst = 0.0
    for label, raw in (("search as served", False), ("index alone (raw)", True)):
        recall_s, mrr_s, ranked_s = quality(owner, synced.pk, queries, raw=raw)
        recall_f, mrr_f, ranked_f = quality(owner, fresh.pk, queries, raw=raw)
        same = sum(a == b for a, b in zip(ranked_s, ranked_f, strict=True))
        worst = max(worst, abs(recall_s - recall_f), abs(mrr_s - mrr_f))
        print(
            f"{label}: synced recall@{K} {recall_s:.4f} MRR@{K} {mrr_s:.4f} | fresh recall@{K} "
            f"{recall_f:.4f} MRR@{K} {mrr_f:.4f} | difference recall {recall_s - recall_f:+.4f} MRR "
            f"{mrr_s - mrr_f:+.4f}; {same} of {len(queries)} top-{K} lists identical"
        )
    load = os.getloadavg()
    print(
        f"largest difference {worst:.4f} ({'within' if worst <= 0.01 else 'OVER'} 0.01); load average at the "
        f"end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} CPUs)"
    )
    print(subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=600, help="documents of the source at the first sync")
    parser.add_argument("--rounds", type=int, default=20, help="syncs after the first")
    parser.add_argument("--rewrite", type=int, default=3, help="documents given another text, each round")
    parser.add_argument("--edit", type=int, default=3, help="documents given an added sentence, each round")
    parser.add_argument("--add", type=int, default=4, help="new documents, each round")
    parser.add_argument("--remove", type=int, default=2, help="documents deleted, each round")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--dims", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-merge", action="store_true", help="keep every append a segment (no merge)")
    parser.add_argument("--database-url", default=DATABASE_URL)
    args = parser.parse_args()
    with scratch_portal(args.database_url) as scratch:
        run(args, scratch)


if __name__ == "__main__":
    main()
