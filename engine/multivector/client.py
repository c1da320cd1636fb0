"""ChromaClient: the storage contract's multi-vector store on ChromaDB.

Each page (visual) or chunk (text) is one Chroma record: its first row is the
representative vector in the collection's cosine HNSW index, the full (seq_length, dim)
sequence is encoded in the `full_embeddings` metadata field (see compression.py for the
storage versions, records.py for who fills which metadata field).

The same code runs embedded (`path=` → chromadb.PersistentClient), against a server
(`host`/`port` or `url=` → chromadb.HttpClient) or on a chromadb client the caller made
(`client=`). Each instance owns one pair of collections, so a corpus per pair keeps
tenants apart on one server. A new embedded store is created in SQLite WAL mode (see
create_in_wal_mode: a single add costs a third of the fsyncs).

Adds are upserts: writing a page or chunk id again replaces the record, so re-ingesting a
document is idempotent.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, closing, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np

from engine.multivector.compression import check_version, decode_metadata
from engine.multivector.errors import (
    ChromaDBConnectionError,
    ChromaDBError,
    DocumentNotFoundError,
    EmbeddingValidationError,
    MetadataValidationError,
    StorageError,
)
from engine.multivector.late_interaction import concatenate_sequences, maxsim_scores
from engine.multivector.records import (
    KINDS,
    build_record,
    check_doc_id,
    check_kind,
    filters_to_where,
    validate_embeddings,
    validate_query_vector,
)

DEFAULT_DIM = 768
_ID_SUFFIX = re.compile(r"-(?:page\d{3,}|chunk\d{4,})$")
_PAGE_SIZE = 5000
# Chroma replays every log entry written since the HNSW index was last persisted on each
# write, payload included; at its default (1000) a 200 KB-per-record store pays ~0.4 ms per
# unpersisted record on every add (hundreds of ms). Persisting every 10 adds bounds that.
_HNSW_SYNC = {"sync_threshold": 10, "batch_size": 10}
_SQLITE_FILE = "chroma.sqlite3"  # the embedded store's database, inside its directory
_STATS_SAMPLE = 32  # records read per collection for the size estimate (each carries its payload)
_INDEX_FIELD = {"visual": "page", "text": "chunk_id"}

logger = logging.getLogger(__name__)


def _settings() -> Any:
    """A fresh chromadb Settings per client: chromadb.HttpClient writes its host and API class into
    the Settings it is given, so a shared one would turn later embedded clients remote."""
    from chromadb.config import Settings
    return Settings(anonymized_telemetry=False)


def create_in_wal_mode(path: Path) -> None:
    """Create the SQLite file of a new embedded store at `path` (a directory, made if missing)
    in WAL mode; an existing store is left as it is.

    Chroma 1.5 makes its file in the default rollback-journal mode, where each of the three
    transactions of one write (log append, metadata apply, log purge) costs ~3 fsyncs; in WAL
    mode a commit costs one, and the 200 KB payload is appended to the WAL instead of being
    journalled and rewritten. Chroma keeps SQLite's synchronous=FULL, so a committed add is as
    durable as before. The mode is stored in the file, so Chroma's connections use it. Switching
    a store that a Chroma client already has open makes that client's writes fail with "database
    is locked", hence new files only (convert an old one with `PRAGMA journal_mode=WAL` while no
    process has it open). Python's sqlite3 is a second SQLite library beside Chroma's, so it must
    not open a file Chroma has open in this process either: closing it would drop Chroma's POSIX
    locks. A backup copies the whole directory, its -wal and -shm files included.
    """
    database_path = path / _SQLITE_FILE
    if database_path.exists():
        return
    path.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(database_path)) as database:
        database.execute("PRAGMA journal_mode=WAL")


def connect_chroma(*, url: str | None = None, path: str | Path | None = None, host: str = "chromadb",
                   port: int = 8000, ssl: bool = False, timeout: float | None = None) -> Any:
    """A connected chromadb client: embedded at `path` (made in WAL mode when new), else the server
    at `url` or `host`/`port`. `timeout` bounds each HTTP request (chromadb's own client waits
    forever, so a server that drops packets would stall its caller). Raises
    ChromaDBConnectionError naming the location when the heartbeat fails."""
    import chromadb  # here, not at the top: a process that never opens a store starts without it
    if path is not None:
        location = f"embedded store {Path(path)}"

        def factory() -> Any:
            create_in_wal_mode(Path(path))
            return chromadb.PersistentClient(path=str(path), settings=_settings())
    else:
        if url is not None:
            host, port, ssl = _parse_url(url)
        location = f"{'https' if ssl else 'http'}://{host}:{port}"

        def factory() -> Any:
            if timeout is not None:
                # chromadb's client makes requests with no timeout while it is constructed
                # (tenant and database checks): ask the server first, within the timeout.
                httpx.get(f"{location}/api/v2/heartbeat", timeout=timeout).raise_for_status()
            client = chromadb.HttpClient(host=host, port=port, ssl=ssl, settings=_settings())
            # chromadb (pinned) has no public timeout: its client's httpx session is private, and
            # tests/site/test_pinned_libraries.py fails, naming it, when an upgrade changes that.
            session = getattr(getattr(client, "_server", None), "_session", None)
            if timeout is not None and isinstance(session, httpx.Client):
                session.timeout = httpx.Timeout(timeout, connect=min(timeout, 5.0))
            elif timeout is not None:
                logger.warning("chromadb's client has no httpx session to bound: requests to %s wait without "
                               "a timeout", location)
            return client
    try:
        chroma = factory()
        chroma.heartbeat()
    except Exception as error:  # chromadb raises bare ValueError/httpx errors here
        raise ChromaDBConnectionError(f"cannot connect to Chroma at {location}: {error}") from error
    chroma.hdrag_location = location
    return chroma


@contextmanager
def guarded(action: str, location: str) -> Iterator[None]:
    """Context for calls on a chromadb client: transport failures (the server down or killed mid-request;
    the client's next request connects again) → ChromaDBConnectionError, Chroma's errors → ChromaDBError."""
    from chromadb.errors import ChromaError
    try:
        yield
    except StorageError:
        raise
    except (httpx.TransportError, ConnectionError) as error:
        raise ChromaDBConnectionError(f"{action}: lost Chroma at {location}: {error}") from error
    except (ChromaError, ValueError) as error:
        raise ChromaDBError(f"{action} failed on Chroma at {location}: {error}") from error


def doc_id_of(embedding_id: str) -> str:
    """ "a1b2-page001" → "a1b2": the doc_id inside a contract id (the id itself otherwise)."""
    return _ID_SUFFIX.sub("", embedding_id)


class ChromaClient:
    """ChromaDB client wrapper with multi-vector storage support (storage contract).

    Connection (one of): `host`/`port` (the contract's default "chromadb":8000), `url`
    ("http://127.0.0.1:8000", "https://..."), `path` (embedded PersistentClient directory)
    or `client` (an existing chromadb client). `dim` is the embedding width of every
    record; `storage_version` picks the write format ("1.0" contract, "1.1" float16),
    records of either version are always readable.

    Raises ChromaDBConnectionError (naming the URL or path) when Chroma cannot be reached,
    StorageError when an existing collection is not cosine or has another `dim`.
    """

    def __init__(
        self,
        host: str = "chromadb",
        port: int = 8000,
        visual_collection: str = "visual_collection",
        text_collection: str = "text_collection",
        *,
        url: str | None = None,
        path: str | Path | None = None,
        client: Any = None,
        ssl: bool = False,
        dim: int = DEFAULT_DIM,
        storage_version: str = "1.0",
    ) -> None:
        if sum(option is not None for option in (url, path, client)) > 1:
            raise ValueError("give at most one of url=, path= and client=")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        if visual_collection == text_collection:
            raise ValueError(f"visual and text collections must differ, both are {visual_collection!r}")
        self.dim = dim
        self.storage_version = check_version(storage_version)
        self.collection_names = {"visual": visual_collection, "text": text_collection}
        if client is None:
            client = connect_chroma(url=url, path=path, host=host, port=port, ssl=ssl)
        self.location = getattr(client, "hdrag_location", f"given {type(client).__name__}")
        self._client = client
        self._collections = {kind: self._open_collection(kind) for kind in KINDS}

    def guarded(self, action: str) -> AbstractContextManager[None]:  # `guarded` at this store's location
        return guarded(action, self.location)

    def _open_collection(self, kind: str) -> Any:
        name = self.collection_names[kind]
        with self.guarded(f"open collection {name!r}"):
            collection = self._client.get_or_create_collection(
                name=name,
                configuration={"hnsw": {"space": "cosine", **_HNSW_SYNC}},
                metadata={"multivector_kind": kind, "multivector_dim": self.dim},
                embedding_function=None,
            )
        hnsw = (collection.configuration or {}).get("hnsw") or {}
        space = hnsw.get("space")
        if space is not None and space != "cosine":
            raise StorageError(f"collection {name!r} at {self.location} uses {space!r} distance, not cosine")
        if hnsw.get("sync_threshold", 0) > _HNSW_SYNC["sync_threshold"]:
            with self.guarded(f"tune collection {name!r}"):
                collection.modify(configuration={"hnsw": dict(_HNSW_SYNC)})
        found_dim = (collection.metadata or {}).get("multivector_dim", self.dim)
        if found_dim != self.dim:
            raise StorageError(
                f"collection {name!r} at {self.location} holds dim {found_dim}, this store uses {self.dim}"
            )
        return collection

    def chroma_collection(self, kind: str) -> Any:
        """The underlying chromadb Collection of "visual" or "text" (for tools like migrate)."""
        return self._collections[check_kind(kind)]

    # --- writes ---------------------------------------------------------------------

    def add_visual_embedding(
        self, doc_id: str, page: int, full_embeddings: np.ndarray, metadata: Mapping[str, Any]
    ) -> str:
        """Store one page: full_embeddings (seq_length, dim) float32/float16 → "{doc_id}-page{page:03d}"."""
        return self._add("visual", doc_id, [page], [full_embeddings], [metadata])[0]

    def add_text_embedding(
        self, doc_id: str, chunk_id: int, full_embeddings: np.ndarray, metadata: Mapping[str, Any]
    ) -> str:
        """Store one chunk: full_embeddings (seq_length, dim) → "{doc_id}-chunk{chunk_id:04d}"."""
        return self._add("text", doc_id, [chunk_id], [full_embeddings], [metadata])[0]

    def add_batch_visual(
        self,
        doc_id: str,
        pages: Sequence[int],
        full_embeddings: Sequence[np.ndarray],
        metadata: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    ) -> list[str]:
        """Store several pages of one document in one Chroma call; all are validated first.

        `metadata` is one dict shared by every page, or one dict per page.
        """
        return self._add("visual", doc_id, pages, full_embeddings, metadata)

    def add_batch_text(
        self,
        doc_id: str,
        chunk_ids: Sequence[int],
        full_embeddings: Sequence[np.ndarray],
        metadata: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    ) -> list[str]:
        """Store several chunks of one document in one Chroma call (see add_batch_visual)."""
        return self._add("text", doc_id, chunk_ids, full_embeddings, metadata)

    def _add(
        self,
        kind: str,
        doc_id: str,
        indices: Sequence[int],
        sequences: Sequence[np.ndarray],
        metadata: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    ) -> list[str]:
        if isinstance(metadata, Mapping):
            metadata = [metadata] * len(indices)
        if not (len(indices) == len(sequences) == len(metadata)) or not indices:
            raise MetadataValidationError(
                f"a batch needs equal, non-zero numbers of {_INDEX_FIELD[kind]}s ({len(indices)}), "
                f"embeddings ({len(sequences)}) and metadata dicts ({len(metadata)})"
            )
        records = [
            build_record(
                kind, doc_id, index, rows, fields, dim=self.dim, storage_version=self.storage_version
            )
            for index, rows, fields in zip(indices, sequences, metadata, strict=True)
        ]
        ids = [record[0] for record in records]
        if len(set(ids)) != len(ids):
            raise MetadataValidationError(f"duplicate {_INDEX_FIELD[kind]}s in batch: {sorted(indices)}")
        with self.guarded(f"add {len(ids)} {kind} records"):
            self._collections[kind].upsert(
                ids=ids,
                embeddings=np.stack([record[1] for record in records]),
                metadatas=[record[2] for record in records],
            )
        return ids

    def delete_document(self, doc_id: str) -> tuple[int, int]:
        """Delete every page and chunk of `doc_id` → (visual_count, text_count) deleted.

        An unknown doc_id deletes nothing and returns (0, 0).
        """
        check_doc_id(doc_id)
        counts = []
        for kind in KINDS:
            with self.guarded(f"delete {kind} records of {doc_id!r}"):
                ids = self._collections[kind].get(where={"doc_id": doc_id}, include=[])["ids"]
                if ids:
                    self._collections[kind].delete(ids=ids)
            counts.append(len(ids))
        return counts[0], counts[1]

    def drop_collections(self) -> None:
        """Delete both collections with every record in them; this client is unusable after."""
        for kind, name in self.collection_names.items():
            with self.guarded(f"delete the {kind} collection {name!r}"):
                self._client.delete_collection(name)
        self._collections = {}

    # --- reads ----------------------------------------------------------------------

    def search_visual(
        self, query_embedding: np.ndarray, n_results: int = 100, filters: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Stage 1: top `n_results` pages by cosine of representative vectors, best first.

        Shapes: query_embedding (dim,). Each hit is {"id", "score" (cosine similarity,
        1 - cosine distance, in [-1, 1]), "metadata" (with full_embeddings),
        "representative_vector" (list of dim floats)}. `filters` maps metadata fields to
        values or Chroma operators ({"page": {"$gte": 2}}); several keys must all hold.
        """
        return self._search("visual", validate_query_vector(query_embedding, self.dim), n_results, filters)

    def search_text(
        self, query_embedding: np.ndarray, n_results: int = 100, filters: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Stage 1 on the text collection; same interface as search_visual."""
        return self._search("text", validate_query_vector(query_embedding, self.dim), n_results, filters)

    def _search(
        self, kind: str, query: np.ndarray, n_results: int, filters: Mapping[str, Any] | None
    ) -> list[dict]:
        if isinstance(n_results, bool) or not isinstance(n_results, int) or n_results < 1:
            raise MetadataValidationError(f"n_results must be an int >= 1, got {n_results!r}")
        where = filters_to_where(filters)
        with self.guarded(f"search {kind}"):
            found = self._collections[kind].query(
                query_embeddings=query.reshape(1, -1),
                n_results=n_results,
                where=where,
                include=["metadatas", "embeddings", "distances"],
            )
        vectors = found["embeddings"][0] if found["embeddings"] else []
        return [
            {
                "id": embedding_id,
                "score": 1.0 - float(distance),
                "metadata": metadata,
                "representative_vector": np.asarray(vector, dtype=np.float32).tolist(),
            }
            for embedding_id, distance, metadata, vector in zip(
                found["ids"][0], found["distances"][0], found["metadatas"][0], vectors, strict=True
            )
        ]

    def search_visual_multivector(
        self,
        query_embeddings: np.ndarray,
        n_candidates: int = 100,
        n_results: int = 10,
        filters: Mapping[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Two-stage search: stage 1 on query_embeddings[0], then MaxSim re-rank.

        Shapes: query_embeddings (q, dim). Returns up to n_results hits of search_visual's
        shape plus "late_interaction_score", sorted by it (best first).
        """
        return self._search_multivector("visual", query_embeddings, n_candidates, n_results, filters)

    def search_text_multivector(
        self,
        query_embeddings: np.ndarray,
        n_candidates: int = 100,
        n_results: int = 10,
        filters: Mapping[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Two-stage search on the text collection; see search_visual_multivector."""
        return self._search_multivector("text", query_embeddings, n_candidates, n_results, filters)

    def _search_multivector(
        self,
        kind: str,
        query_embeddings: np.ndarray,
        n_candidates: int,
        n_results: int,
        filters: Mapping[str, Any] | None,
    ) -> list[dict[str, Any]]:
        query = validate_embeddings(query_embeddings, self.dim, "query_embeddings")
        if isinstance(n_results, bool) or not isinstance(n_results, int) or n_results < 1:
            raise MetadataValidationError(f"n_results must be an int >= 1, got {n_results!r}")
        if not np.any(query[0]):
            raise EmbeddingValidationError("query_embeddings[0] is all zeros; stage 1 cosine is undefined")
        candidates = self._search(kind, query[0], n_candidates, filters)
        if not candidates:
            return []
        concatenated, offsets = concatenate_sequences(
            [self._decode(kind, hit["id"], hit["metadata"]) for hit in candidates]
        )
        scores = maxsim_scores(query, concatenated, offsets)
        order = np.argsort(-scores, kind="stable")[:n_results]
        return [{**candidates[i], "late_interaction_score": float(scores[i])} for i in order]

    def _decode(self, kind: str, embedding_id: str, metadata: Mapping[str, Any]) -> np.ndarray:
        try:
            return decode_metadata(metadata)
        except StorageError as error:
            raise type(error)(f"{kind} record {embedding_id!r} at {self.location}: {error}") from None

    def get_full_embeddings(self, embedding_id: str, collection: str = "visual") -> np.ndarray:
        """The stored (seq_length, dim) float32 sequence of `embedding_id`.

        Raises DocumentNotFoundError (a ValueError) for an unknown id, DecompressionError
        (a MetadataCompressionError) for a corrupt payload.
        """
        kind = check_kind(collection)
        with self.guarded(f"get {kind} record {embedding_id!r}"):
            found = self._collections[kind].get(ids=[embedding_id], include=["metadatas"])
        if not found["ids"]:
            raise DocumentNotFoundError(
                f"no {kind} record {embedding_id!r} in collection {self.collection_names[kind]!r} at "
                f"{self.location}"
            )
        return self._decode(kind, embedding_id, found["metadatas"][0])

    def get_document_records(self, doc_id: str, collection: str = "visual") -> list[dict[str, Any]]:
        """Every record of `doc_id` in one collection as {"id", "metadata"}, in page/chunk order."""
        kind = check_kind(collection)
        check_doc_id(doc_id)
        with self.guarded(f"get {kind} records of {doc_id!r}"):
            found = self._collections[kind].get(where={"doc_id": doc_id}, include=["metadatas"])
        records = [{"id": i, "metadata": m} for i, m in zip(found["ids"], found["metadatas"], strict=True)]
        return sorted(records, key=lambda record: record["metadata"][_INDEX_FIELD[kind]])

    def iter_ids(self, kind: str, page_size: int = _PAGE_SIZE) -> Iterator[list[str]]:
        """All record ids of one collection, in pages of at most `page_size`."""
        collection = self.chroma_collection(kind)
        offset = 0
        while True:
            with self.guarded(f"list {kind} ids"):
                ids = collection.get(include=[], limit=page_size, offset=offset)["ids"]
            if not ids:
                return
            yield ids
            offset += len(ids)

    def get_collection_stats(self) -> dict[str, Any]:
        """{"visual_count", "text_count", "total_documents", "storage_size_mb"}.

        total_documents counts unique doc_ids across both collections (read from the
        ids, so no payload is fetched). storage_size_mb estimates the stored bytes
        (metadata strings and numbers plus the float32 representative vector) from up to
        `_STATS_SAMPLE` evenly spaced records per collection, exact for smaller ones; Chroma's
        own overhead (SQLite indexes, HNSW graph, log) is not included.
        """
        stats: dict[str, Any] = {}
        doc_ids: set[str] = set()
        size_bytes = 0.0
        for kind in KINDS:
            ids = [embedding_id for page in self.iter_ids(kind) for embedding_id in page]
            stats[f"{kind}_count"] = len(ids)
            doc_ids.update(doc_id_of(embedding_id) for embedding_id in ids)
            if ids:
                sample = [
                    ids[i] for i in np.linspace(0, len(ids) - 1, min(len(ids), _STATS_SAMPLE)).astype(int)
                ]
                with self.guarded(f"sample {kind} records"):
                    metadatas = self._collections[kind].get(ids=sample, include=["metadatas"])["metadatas"]
                mean = float(np.mean([_record_bytes(metadata, self.dim) for metadata in metadatas]))
                size_bytes += mean * len(ids)
        stats["total_documents"] = len(doc_ids)
        stats["storage_size_mb"] = size_bytes / 1e6
        return stats


def _record_bytes(metadata: Mapping[str, Any], dim: int) -> int:
    text = sum(len(key) + (len(value) if isinstance(value, str) else 8) for key, value in metadata.items())
    return text + 4 * dim


def _parse_url(url: str) -> tuple[str, int, bool]:
    """ "http://host:port" → (host, port, ssl). Raises ValueError naming the URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"Chroma url must look like http://host:port, got {url!r}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 8000)
    except ValueError:
        raise ValueError(f"Chroma url has an invalid port: {url!r}") from None
    return parts.hostname, port, parts.scheme == "https"
