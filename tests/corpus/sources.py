"""Helpers for the source tests: sync inline, and what searches find."""

from __future__ import annotations

from corpus.models import Corpus
from corpus.sources.models import Source
from corpus.sources.services import source_sync_start
from memory.services import memories_search

# Four documents, then the change every kind's test makes: two changed, one deleted, one added.
DOCS = {
    "guide/install.md": "# Install\n\nThe quokka installer unpacks the tarball into the opt directory.\n",
    "guide/usage.md": "# Usage\n\nRun the zymurgy command to ferment the configuration files nightly.\n",
    "notes.txt": "The axolotl service restarts itself when the heartbeat file goes stale.\n",
    "faq.md": "# FAQ\n\nThe sextant dashboard shows the angle between releases and the horizon.\n",
}
CHANGED = {
    "guide/install.md": "# Install\n\nThe pangolin installer copies the binaries into the srv directory.\n",
    "guide/usage.md": "# Usage\n\nRun the kestrel command to compress the archived logs every week.\n",
}
DELETED = "notes.txt"
ADDED = {"new/cassowary.md": "# Cassowary\n\nThe cassowary relay forwards alerts to the night shift pager.\n"}
OLD_PHRASES = ["quokka installer unpacks the tarball", "zymurgy command to ferment"]
NEW_PHRASES = ["pangolin installer copies the binaries", "kestrel command to compress the archived logs",
               "cassowary relay forwards alerts"]
DELETED_PHRASE = "axolotl service restarts itself"
KEPT_PHRASE = "sextant dashboard shows the angle"


def sync(source: Source, capture, *, confirm: bool = False) -> Source:  # noqa: ANN001 - pytest fixture
    """Queue a sync and run it, and the job it queues, inline."""
    with capture(execute=True):
        source_sync_start(source=source, confirm=confirm)
    source.refresh_from_db()
    source.corpus.refresh_from_db()
    return source


def found(user, corpus: Corpus, phrase: str) -> bool:  # noqa: ANN001
    """Whether a search for the phrase returns a memory holding it."""
    corpus.refresh_from_db()
    if corpus.active_build_id is None:
        return False
    results = memories_search(user=user, corpus_ids=[corpus.pk], query=phrase, top_document=False)
    return any(phrase in r.memory.text for r in results)


def assert_first_sync(source: Source, user, corpus: Corpus) -> None:  # noqa: ANN001
    assert source.status == Source.Status.SUCCEEDED, source.error
    assert (source.added, source.changed, source.removed) == (len(DOCS), 0, 0), source.failures
    for phrase in [*OLD_PHRASES, DELETED_PHRASE, KEPT_PHRASE]:
        assert found(user, corpus, phrase), phrase


def assert_second_sync(source: Source, user, corpus: Corpus) -> None:  # noqa: ANN001
    assert source.status == Source.Status.SUCCEEDED, source.error
    assert (source.added, source.changed, source.removed) == (1, 2, 1), (source.failures, source.error)
    for phrase in [*NEW_PHRASES, KEPT_PHRASE]:
        assert found(user, corpus, phrase), phrase
    for phrase in [*OLD_PHRASES, DELETED_PHRASE]:
        assert not found(user, corpus, phrase), phrase
    names = set(corpus.datasets.values_list("name", flat=True))
    assert names == {f"{source.name}/{p}" for p in [*DOCS, *ADDED] if p != DELETED}


def assert_all_still_found(user, corpus: Corpus) -> None:  # noqa: ANN001
    for phrase in [*NEW_PHRASES, KEPT_PHRASE]:
        assert found(user, corpus, phrase), phrase
