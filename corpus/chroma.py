"""Each corpus's multi-vector store: a pair of Chroma collections of its own.

The pair is named after the corpus id, so no tenant reaches another's records through the
store itself; who may read or write a corpus is decided before, by `corpus.selectors`.
Chroma is the server at `settings.CHROMA_URL`, or embedded under `settings.CHROMA_PATH`.
"""

from __future__ import annotations

import re

from django.conf import settings

from corpus import serving
from engine.multivector import ChromaClient, ChromaDBError
from engine.multivector.client import guarded
from engine.multivector.errors import ChromaDBConnectionError

_COLLECTION = re.compile(r"^hdrag_corpus(\d+)_(visual|text)$")


def collection_names(corpus_id: int) -> tuple[str, str]:
    """(visual, text) collection names of a corpus."""
    return f"hdrag_corpus{corpus_id}_visual", f"hdrag_corpus{corpus_id}_text"


def store_for(corpus_id: int) -> ChromaClient:
    """The corpus's store, for a write or a search (collections created on first use); on the
    process's one Chroma connection (`corpus.serving.chroma_client`). Callers check access first.

    Raises ChromaDBConnectionError naming the URL or path when Chroma cannot be reached.
    """
    visual, text = collection_names(corpus_id)
    return ChromaClient(visual_collection=visual, text_collection=text, dim=settings.MULTIVECTOR_DIM,
                        storage_version=settings.MULTIVECTOR_STORAGE_VERSION, client=serving.chroma_client())


def store_exists(corpus_id: int) -> bool:
    """Whether the corpus has a store yet, asked without creating one (pages only read)."""
    names = set(collection_names(corpus_id))
    return any(_name(c) in names for c in _collections())


def drop_store(corpus_id: int) -> None:
    """Delete both collections of a corpus (absent ones are fine)."""
    if store_exists(corpus_id):
        store_for(corpus_id).drop_collections()


def stored_corpus_ids() -> dict[int, list[str]]:
    """{corpus id: its collection names} for every portal collection on the Chroma server or store."""
    found: dict[int, list[str]] = {}
    for collection in _collections():
        match = _COLLECTION.match(_name(collection))
        if match:
            found.setdefault(int(match.group(1)), []).append(match.group(0))
    return found


def _collections() -> list:
    """Every collection on the process's Chroma; a server that went away (or died mid-request) is
    ChromaDBConnectionError naming it, as for every other call (the client connects again next time)."""
    client = serving.chroma_client()
    with guarded("list collections", client.hdrag_location):
        return client.list_collections()


def _name(collection: object) -> str:
    return (
        collection if isinstance(collection, str) else collection.name
    )  # chromadb 1.x gives Collection objects


__all__ = ["ChromaDBConnectionError", "ChromaDBError", "collection_names", "drop_store", "store_exists",
           "store_for", "stored_corpus_ids"]
