"""A corpus's multi-vector store as the portal shows it: stats, documents, deletions.

Access is decided by `corpus.selectors` before Chroma is touched (outsiders get a 404, read-only
members a 403 where they would delete). Chroma failures become `StoreUnavailable`, an
ApplicationError naming the store's location, so a page can show them inline and keep rendering.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from core.errors import ApplicationError
from corpus.chroma import collection_names, drop_store, store_exists, store_for, stored_corpus_ids
from corpus.models import Corpus
from corpus.selectors import get_corpus_for_user
from engine.multivector import DocumentNotFoundError, StorageError, ValidationError, doc_id_of

logger = logging.getLogger(__name__)

User = AbstractBaseUser | AnonymousUser
KINDS = ("visual", "text")


class StoreUnavailable(ApplicationError):
    """Chroma could not be reached or failed; the message says where."""

    code = "store_unavailable"
    status = 503


class StoreInvalid(ApplicationError):
    """The store refused the input (shape, dtype, metadata); nothing was written."""


class StoreRecordNotFound(ApplicationError):
    code = "not_found"
    status = 404


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
    with _store_call(f"deleting {doc_id!r}"):
        pages, chunks = store_for(corpus.pk).delete_document(doc_id) if store_exists(corpus.pk) else (0, 0)
    if not pages and not chunks:
        raise StoreRecordNotFound(f"No document {doc_id!r} in the store of {corpus.name!r}.",
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


@contextmanager
def _store_call(action: str) -> Iterator[None]:
    """Input errors (400) and unknown records (404) apart from an unreachable store (503)."""
    try:
        yield
    except DocumentNotFoundError as error:
        raise StoreRecordNotFound(str(error)) from error
    except ValidationError as error:
        raise StoreInvalid(str(error)) from error
    except StorageError as error:
        raise StoreUnavailable(f"The multi-vector store is unavailable ({action}): {error}",
                               details={"error": type(error).__name__}) from error


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ApplicationError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}.", {"kind": kind})
    return kind


def store_add(*, user: User, corpus_id: int, kind: str, doc_id: str, indices: Sequence[int],
              embeddings: Sequence[np.ndarray], metadata: Sequence[Mapping[str, Any]]) -> list[str]:
    """Add (upsert) pages ("visual", indices = page numbers) or chunks ("text", chunk ids) of one
    document to a corpus the user may write; all are validated before anything is written.

    Shapes: each embeddings[i] (seq_length, MULTIVECTOR_DIM) float32. Returns the record ids.
    """
    corpus = get_corpus_for_user(user, corpus_id, write=True)
    _check_kind(kind)
    with _store_call(f"adding {len(indices)} {kind} records"):
        store = store_for(corpus.pk)
        add = store.add_batch_visual if kind == "visual" else store.add_batch_text
        return add(doc_id, list(indices), list(embeddings), list(metadata))


def _public_hit(hit: dict[str, Any]) -> dict[str, Any]:
    """A search hit without its encoded sequence (fetch it with `store_embeddings_get`)."""
    metadata = {k: v for k, v in hit["metadata"].items() if k != "full_embeddings"}
    out = {"id": hit["id"], "score": hit["score"], "metadata": metadata}
    if "late_interaction_score" in hit:
        out["late_interaction_score"] = hit["late_interaction_score"]
    return out


def store_search(*, user: User, corpus_id: int, kind: str, query: np.ndarray, n_results: int,
                 filters: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Stage 1: records by cosine of their representative vector. Shapes: query (dim,)."""
    corpus = get_corpus_for_user(user, corpus_id)
    _check_kind(kind)
    with _store_call(f"searching {kind}"):
        if not store_exists(corpus.pk):  # reading creates no collections
            return []
        store = store_for(corpus.pk)
        search = store.search_visual if kind == "visual" else store.search_text
        return [_public_hit(hit) for hit in search(query, n_results=n_results, filters=filters)]


def store_search_multivector(
    *,
    user: User,
    corpus_id: int,
    kind: str,
    query: np.ndarray,
    n_candidates: int,
    n_results: int,
    filters: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Two-stage search: stage 1 on query[0], MaxSim re-rank. Shapes: query (q, dim)."""
    corpus = get_corpus_for_user(user, corpus_id)
    _check_kind(kind)
    with _store_call(f"searching {kind} (two-stage)"):
        if not store_exists(corpus.pk):
            return []
        store = store_for(corpus.pk)
        search = store.search_visual_multivector if kind == "visual" else store.search_text_multivector
        hits = search(query, n_candidates=n_candidates, n_results=n_results, filters=filters)
    return [_public_hit(hit) for hit in hits]


def store_embeddings_get(*, user: User, corpus_id: int, kind: str, embedding_id: str) -> np.ndarray:
    """The stored (seq_length, dim) float32 sequence of one record; StoreRecordNotFound if absent."""
    corpus = get_corpus_for_user(user, corpus_id)
    _check_kind(kind)
    with _store_call(f"reading {embedding_id!r}"):
        if not store_exists(corpus.pk):
            raise StoreRecordNotFound(f"No {kind} record {embedding_id!r}: the corpus's store is empty.")
        return store_for(corpus.pk).get_full_embeddings(embedding_id, collection=kind)


def store_orphans() -> dict[int, list[str]]:
    """{corpus id: collection names} of stores whose corpus no longer exists."""
    stored = stored_corpus_ids()
    existing = set(Corpus.objects.filter(pk__in=stored).values_list("pk", flat=True))
    return {corpus_id: names for corpus_id, names in stored.items() if corpus_id not in existing}


def store_orphans_drop(*, corpus_ids: list[int]) -> None:
    """Drop the stores of deleted corpora; ids of corpora that exist are refused."""
    alive = sorted(Corpus.objects.filter(pk__in=corpus_ids).values_list("pk", flat=True))
    if alive:
        raise ApplicationError(
            f"Corpora {alive} exist: their stores are not orphans.", details={"corpus_ids": alive}
        )
    for corpus_id in corpus_ids:
        drop_store(corpus_id)
