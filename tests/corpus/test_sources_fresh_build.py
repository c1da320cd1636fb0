"""Syncs keep search as a fresh build of the same documents has it: a folder source of real text
(the Python language reference's topics, which every install ships) changed and synced a few
times through appends and replacements, then compared, query by query, with a second corpus built
once from the final folder. bench/sync_quality.py measures the same at scale."""

from __future__ import annotations

from pathlib import Path
from pydoc_data.topics import topics

from corpus.services.builds import build_start
from corpus.services.corpora import corpus_create
from corpus.sources.services import source_create
from memory.services import memories_search
from tests.corpus.sources import sync
from tests.plugins.portal import SMALL_HDC

FIRST = ["assert", "break", "continue", "pass", "del", "return", "global", "import"]
ADDED = ["raise", "while"]
REWRITTEN_TO = ["try", "lambda"]


def title(topic: str) -> str:
    """The topic's heading ('The "assert" statement'): the query that should find its document."""
    return topics[topic].strip().splitlines()[0]


def write(folder: Path, path: str, topic: str, extra: str = "") -> None:
    (folder / path).parent.mkdir(parents=True, exist_ok=True)
    (folder / path).write_text(topics[topic].strip()[:1200] + extra + "\n")


def ranked(user, corpus, query: str, *, raw: bool = False) -> list[str]:  # noqa: ANN001
    """The documents (paths at the source) a search returns, best first; `raw`: the index's own
    top rows (no threshold, fusion or MMR)."""
    paths: list[str] = []
    for result in memories_search(
        user=user, corpus_ids=[corpus.pk], query=query, raw_limit=20 if raw else None
    ):
        path = result.dataset_name.removeprefix("reference/")
        if path not in paths:
            paths.append(path)
    return paths


def test_synced_search_equals_fresh_build(
    settings, corpus, owner, tmp_path, django_capture_on_commit_callbacks
):
    settings.SOURCE_ROOTS = [str(tmp_path / "roots")]
    settings.SEGMENT_MERGE_PERCENT = (
        10_000  # keep every append a segment: the appended state is what is compared
    )
    folder = tmp_path / "roots" / "reference"
    held = {f"{topic}.txt": topic for topic in FIRST}  # path -> the topic it holds now
    for path, topic in held.items():
        write(folder, path, topic)
    source = source_create(corpus=corpus, user=owner, name="reference", kind="folder", location=str(folder))
    sync(source, django_capture_on_commit_callbacks)
    # Each round: one document given another topic, one edited, one deleted, one added.
    rounds = [("break.txt", "pass.txt", "del.txt"), ("global.txt", "assert.txt", "return.txt")]
    for number, (rewritten, edited, removed) in enumerate(rounds):
        held[rewritten] = REWRITTEN_TO[number]
        write(folder, rewritten, held[rewritten])
        write(folder, edited, held[edited], f"\n\nRevised in round {number + 1}.")
        (folder / removed).unlink()
        del held[removed]
        held[f"{ADDED[number]}.txt"] = ADDED[number]
        write(folder, f"{ADDED[number]}.txt", ADDED[number])
        sync(source, django_capture_on_commit_callbacks)
        assert (source.status, source.added, source.changed, source.removed) == ("succeeded", 1, 2, 1), (
            source.error
        )
    corpus.refresh_from_db()
    assert len(corpus.serving_build_ids) == 1 + len(rounds)  # the base build and one append per sync

    fresh = corpus_create(owner=owner, name="Fresh", **SMALL_HDC)
    baseline = source_create(corpus=fresh, user=owner, name="reference", kind="folder", location=str(folder))
    sync(baseline, django_capture_on_commit_callbacks)
    fresh.refresh_from_db()
    assert len(fresh.serving_build_ids) == 1 and baseline.added == len(held)

    # The appended state: each query's document is its first hit, as in the fresh build, and
    # only documents the folder holds are found (the tail may differ: appends keep the base's
    # word statistics until a merge).
    for path, topic in sorted(held.items()):
        synced_ranking = ranked(owner, corpus, title(topic))
        assert synced_ranking[:1] == ranked(owner, fresh, title(topic))[:1] == [path], topic
        assert set(synced_ranking) <= set(held), (topic, synced_ranking)
    # The replaced and deleted documents' text is found by neither.
    for gone in ["break", "global", "del", "return"]:
        for searched in (corpus, fresh):
            results = memories_search(user=owner, corpus_ids=[searched.pk], query=title(gone))
            assert not any(title(gone) in r.memory.text for r in results), (gone, searched.name)
    # Merged (a full build of the corpus), the synced corpus searches exactly as the fresh build.
    with django_capture_on_commit_callbacks(execute=True):
        build_start(corpus=corpus, user=owner)
    corpus.refresh_from_db()
    assert len(corpus.serving_build_ids) == 1
    for topic in sorted(held.values()):
        assert ranked(owner, corpus, title(topic)) == ranked(owner, fresh, title(topic)), topic
        assert ranked(owner, corpus, title(topic), raw=True) == ranked(
            owner, fresh, title(topic), raw=True
        ), topic
