"""A corpus's multi-vector store as the portal shows it: stats, documents, deletions.

Access is decided by `corpus.selectors` before Chroma is touched (outsiders get a 404, read-only
members a 403 where they would delete). Chroma failures become `StoreUnavailable`, an
ApplicationError naming the store's location, so a page can show them inline and keep rendering.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from corpus.models import Corpus
from corpus.selectors import get_corpus_for_user
from corpus.stores import collection_names, drop_store, store_exists, store_for, stored_corpus_ids
from engine.multivector import StorageError, doc_id_of
from hdrag_site.errors import ApplicationError

logger = logging.getLogger(__name__)

User = AbstractBaseUser | AnonymousUser
KINDS = ("visual", "text")


class StoreUnavailable(ApplicationError):
    """Chroma could not be reached or failed; the message says where."""


@dataclass(frozen=True)
class StoreStats:
    visual_count: int
    text_count: int
    total_documents: int
    storage_size_mb: float

    @property
    def empty(self) -> bool:
        return self.visual_count == 0 and self.text_count == 0


@dataclass(frozen=True)
class StoreDocument:
    doc_id: str
    pages: int
    chunks: int


@contextmanager
def _chroma(action: str) -> Iterator[None]:
    try:
        yield
    except StorageError as error:
        raise StoreUnavailable(f"The multi-vector store is unavailable ({action}): {error}",
                               details={"error": type(error).__name__}) from error


def store_collection_stats(*, corpus_id: int) -> StoreStats:
    """Stats of a corpus's store; the caller has checked access (the admin does, by permission).
    A corpus without a store yet has empty stats: reading creates no collections."""
    with _chroma("reading its stats"):
        if not store_exists(corpus_id):
            return StoreStats(visual_count=0, text_count=0, total_documents=0, storage_size_mb=0.0)
        stats = store_for(corpus_id).get_collection_stats()
    return StoreStats(visual_count=stats["visual_count"], text_count=stats["text_count"],
                      total_documents=stats["total_documents"], storage_size_mb=stats["storage_size_mb"])


def store_stats(*, user: User, corpus_id: int) -> StoreStats:
    """Record counts, distinct documents and approximate size of a corpus the user may read."""
    corpus = get_corpus_for_user(user, corpus_id)
    return store_collection_stats(corpus_id=corpus.pk)


def store_documents(*, user: User, corpus_id: int) -> list[StoreDocument]:
    """Every doc_id in a readable corpus's store with its page and chunk counts, sorted by doc_id.

    Read from the record ids alone (no payloads), once per call.
    """
    corpus = get_corpus_for_user(user, corpus_id)
    counts: dict[str, Counter[str]] = {kind: Counter() for kind in KINDS}
    with _chroma("listing its documents"):
        if not store_exists(corpus.pk):
            return []
        store = store_for(corpus.pk)
        for kind in KINDS:
            for ids in store.iter_ids(kind):
                counts[kind].update(doc_id_of(embedding_id) for embedding_id in ids)
    doc_ids = sorted(counts["visual"].keys() | counts["text"].keys())
    return [StoreDocument(doc_id=doc_id, pages=counts["visual"][doc_id], chunks=counts["text"][doc_id])
            for doc_id in doc_ids]


def store_document_delete(*, user: User, corpus_id: int, doc_id: str) -> tuple[int, int]:
    """Delete a document's pages and chunks (both collections) from a corpus the user may write.

    Returns (pages, chunks) deleted. Raises ApplicationError for an empty or unknown doc_id.
    """
    corpus = get_corpus_for_user(user, corpus_id, write=True)
    if not isinstance(doc_id, str) or not doc_id.strip():
        raise ApplicationError("Name the document to delete (its doc_id).")
    with _chroma(f"deleting {doc_id!r}"):
        pages, chunks = store_for(corpus.pk).delete_document(doc_id)
    if not pages and not chunks:
        raise ApplicationError(f"No document {doc_id!r} in the store of {corpus.name!r}.",
                               details={"doc_id": doc_id})
    return pages, chunks


def store_drop(*, corpus_id: int) -> bool:
    """Drop both collections of a deleted corpus; False (logged, naming them) when Chroma failed.

    Called after the corpus row's deletion has committed (corpus.signals). A failure is logged,
    not raised: the deletion is already final, and a cascade (a bulk admin delete) cannot be
    refused per corpus, so raising would only turn a finished deletion into an error page.
    Collection names come from the corpus id, which is never reused (PostgreSQL sequences,
    SQLite AUTOINCREMENT), so orphans never show up in another corpus; the log names them for
    removal (`manage.py chroma_orphans --drop`).
    """
    try:
        drop_store(corpus_id)
    except StorageError as error:
        visual, text = collection_names(corpus_id)
        logger.error("corpus %s deleted but its multi-vector store was not: orphan Chroma collections "
                     "%r and %r remain (%s)", corpus_id, visual, text, error)
        return False
    return True


def store_orphans() -> dict[int, list[str]]:
    """{corpus id: collection names} of stores whose corpus no longer exists."""
    stored = stored_corpus_ids()
    existing = set(Corpus.objects.filter(pk__in=stored).values_list("pk", flat=True))
    return {corpus_id: names for corpus_id, names in stored.items() if corpus_id not in existing}


def store_orphans_drop(*, corpus_ids: list[int]) -> None:
    """Drop the stores of deleted corpora; ids of corpora that exist are refused."""
    alive = sorted(Corpus.objects.filter(pk__in=corpus_ids).values_list("pk", flat=True))
    if alive:
        raise ApplicationError(f"Corpora {alive} exist: their stores are not orphans.", details={"corpus_ids": alive})
    for corpus_id in corpus_ids:
        drop_store(corpus_id)
