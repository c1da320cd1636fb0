"""Each corpus's multi-vector store: a pair of Chroma collections of its own.

The pair is named after the corpus id, so no tenant reaches another's records through the
store itself; who may read or write a corpus is decided before, by `corpus.selectors`.
Chroma is the server at `settings.CHROMA_URL`, or embedded under `settings.CHROMA_PATH`.
"""

from __future__ import annotations

from django.conf import settings

from engine.multivector import ChromaClient, ChromaDBError
from engine.multivector.errors import ChromaDBConnectionError


def collection_names(corpus_id: int) -> tuple[str, str]:
    """(visual, text) collection names of a corpus."""
    return f"hdrag_corpus{corpus_id}_visual", f"hdrag_corpus{corpus_id}_text"


def _connection() -> dict:
    if settings.CHROMA_URL:
        return {"url": settings.CHROMA_URL}
    return {"path": settings.CHROMA_PATH}


def store_for(corpus_id: int) -> ChromaClient:
    """The corpus's store (collections created on first use). Callers check access first.

    Raises ChromaDBConnectionError naming the URL or path when Chroma cannot be reached.
    """
    visual, text = collection_names(corpus_id)
    return ChromaClient(visual_collection=visual, text_collection=text, dim=settings.MULTIVECTOR_DIM,
                        storage_version=settings.MULTIVECTOR_STORAGE_VERSION, **_connection())


def drop_store(corpus_id: int) -> None:
    """Delete both collections of a corpus (absent ones are fine)."""
    store_for(corpus_id).drop_collections()


__all__ = ["ChromaDBConnectionError", "ChromaDBError", "collection_names", "drop_store", "store_for"]
