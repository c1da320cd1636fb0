"""Memory writes (bulk insert during a build, deletion of a build's rows) and search.

Search applies access control before retrieval: only corpora the user may read, with an active
build, are loaded and searched, and only their enabled datasets pass the index's source filter.
Loaded builds (memory-mapped index files) are cached per process by `engine.corpus.cached_corpus`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connection

from corpus.models import Corpus, IndexBuild
from corpus.selectors import corpora_visible_to
from corpus.stores import store_for
from engine.corpus import LoadedCorpus, cached_corpus
from engine.fusion import FusionWeights
from engine.multivector import StorageError
from engine.multivector.token_vectors import TokenVectorEncoder
from engine.retrieval import BlendState, Retriever, SearchTarget
from engine.text_store import text_encoder_for, text_store_rank
from hdrag_site.errors import ApplicationError
from hdrag_site.runtime import engine_config, tokenizer_for
from memory.models import Memory

logger = logging.getLogger(__name__)
_COLUMNS = ("corpus_id", "build_id", "hdv_idx", "content_hash", "text", "dataset_id", "metadata", "token_count")


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    return value


def _json_without_nul(value: Any) -> str:
    """JSON for a jsonb column, which (like text) cannot hold NUL characters."""
    dumped = json.dumps(value, ensure_ascii=False)
    return json.dumps(_without_nul(value), ensure_ascii=False) if "\\u0000" in dumped else dumped


class MemoryWriter:
    """The build's sink: buffers engine records and inserts them as Memory rows in large batches.

    On PostgreSQL the batches go through COPY (about 3x the rows/s of a multi-row INSERT, which
    spends its time building statements and model instances); elsewhere through bulk_create.
    Records arrive in the engine's small encode batches; buffering makes the insert rate
    independent of that batch size.
    """

    def __init__(self, *, build: IndexBuild, dataset_ids: Iterable[int], batch_size: int | None = None) -> None:
        self.build_id = build.pk
        self.corpus_id = build.corpus_id
        self.dataset_ids = frozenset(dataset_ids)
        self.batch_size = batch_size or settings.MEMORY_INSERT_BATCH
        self.pending: list[tuple] = []
        self.inserted = 0
        self.seconds = 0.0

    def add(self, records: list[dict]) -> None:
        for record in records:
            source = int(record["source_id"])
            self.pending.append((
                self.corpus_id, self.build_id, int(record["hdv_idx"]), record["id"],
                # PostgreSQL text cannot hold NUL; the index was built from the text with it.
                record["text"].replace("\x00", "\ufffd"),
                source if source in self.dataset_ids else None,
                record.get("metadata") or {}, int(record["token_count"])))
        if len(self.pending) >= self.batch_size:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        started = time.perf_counter()
        if connection.vendor == "postgresql":
            self._copy(self.pending)
        else:
            Memory.objects.bulk_create([Memory(**dict(zip(_COLUMNS, row, strict=True))) for row in self.pending],
                                       batch_size=self.batch_size)
        self.seconds += time.perf_counter() - started
        self.inserted += len(self.pending)
        self.pending = []

    @staticmethod
    def _copy(rows: list[tuple]) -> None:
        columns = ", ".join(connection.ops.quote_name(c) for c in _COLUMNS)
        table = connection.ops.quote_name(Memory._meta.db_table)
        with connection.cursor() as cursor, cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row((*row[:6], _json_without_nul(row[6]), row[7]))

    @property
    def rows_per_second(self) -> float:
        return self.inserted / self.seconds if self.seconds else 0.0


def memories_delete_for_build(*, build_id: int, chunk: int = 10000) -> int:
    """Delete a build's memories in chunks (deferred fields: the texts are never loaded)."""
    deleted = 0
    while True:
        ids = list(Memory.objects.filter(build_id=build_id).order_by().values_list("pk", flat=True)[:chunk])
        if not ids:
            return deleted
        Memory.objects.filter(pk__in=ids).only("pk").delete()
        deleted += len(ids)


@dataclass(frozen=True)
class BuildMemoryStore:
    """engine.corpus.MemoryStore over the Memory rows of one build."""

    build_id: int

    def get_memories(self, rows: list[int]) -> dict[int, dict]:
        found: dict[int, dict] = {}
        wanted = sorted({int(r) for r in rows})
        for start in range(0, len(wanted), 1000):
            for row in (Memory.objects.filter(build_id=self.build_id, hdv_idx__in=wanted[start:start + 1000])
                        .values("pk", "hdv_idx", "content_hash", "text", "metadata", "token_count", "dataset_id")):
                found[row["hdv_idx"]] = {
                    "id": row["content_hash"], "pk": row["pk"], "text": row["text"], "hdv_idx": row["hdv_idx"],
                    "metadata": row["metadata"], "token_count": row["token_count"], "dataset_id": row["dataset_id"]}
        return found


_retrievers: dict[str, Retriever] = {}
_retrievers_lock = threading.Lock()


def _retriever(gguf_path: str) -> Retriever:
    with _retrievers_lock:
        if gguf_path not in _retrievers:
            _retrievers[gguf_path] = Retriever(tokenizer_for(gguf_path), engine_config())
        return _retrievers[gguf_path]


# Token-vector encoders of late-interaction builds, one per (build directory, model). Making one
# costs the isotropy correction of the build's vocabulary (an SVD); each holds ~4 MB (IDF table,
# projection) beside the memory-mapped embeddings, so only the most recently used few are kept.
TEXT_ENCODER_CACHE_SIZE = 8
_text_encoders: OrderedDict[tuple[str, str], TokenVectorEncoder] = OrderedDict()
_text_encoders_lock = threading.Lock()


def _text_encoder(corpus: LoadedCorpus, gguf_path: str) -> TokenVectorEncoder:
    """The encoder a late-interaction build was filled with (made the same way as in the build)."""
    key = (str(corpus.build_dir), gguf_path)
    # One lock for lookups and construction: two searches of a new build make its encoder once.
    with _text_encoders_lock:
        encoder = _text_encoders.get(key)
        if encoder is None:
            encoder = text_encoder_for(corpus, gguf_path=gguf_path, tokenizer=tokenizer_for(gguf_path),
                                       cache_dir=settings.EMBEDDING_CACHE_DIR, dim=settings.MULTIVECTOR_DIM)
            _text_encoders[key] = encoder
            while len(_text_encoders) > TEXT_ENCODER_CACHE_SIZE:
                _text_encoders.popitem(last=False)
        _text_encoders.move_to_end(key)
        return encoder


def _late_ranker(*, corpus_id: int, build_id: int, corpus: LoadedCorpus, gguf_path: str,
                 enabled: frozenset[int]) -> Callable[[str], list[tuple[int, float]] | None]:
    """SearchTarget.late of a late-interaction build: its rows ranked through the corpus's store,
    or None while the store is unavailable (the search then runs on HDC alone)."""

    def rank(query: str) -> list[tuple[int, float]] | None:
        try:
            return text_store_rank(store=store_for(corpus_id), encoder=_text_encoder(corpus, gguf_path),
                                   tokenizer=tokenizer_for(gguf_path), query=query, build_id=build_id,
                                   allowed_sources=enabled)
        except StorageError as error:
            logger.warning("corpus %s: late-interaction search unavailable, HDC alone: %s", corpus_id, error)
            return None

    return rank


def memories_search(*, user: AbstractBaseUser | AnonymousUser, corpus_ids: Iterable[int], query: str,
                    blend: BlendState | None = None, token_budget: int | None = None,
                    top_document: bool = False) -> list[dict[str, Any]]:
    """Retrieve memories for `query` from the corpora in `corpus_ids` that `user` may read.

    Ids the user may not read, or of corpora without an active build, are ignored (an outsider
    cannot tell them from missing ones). Returns, best first:
    [{"memory": {"id", "pk", "text", "hdv_idx", "metadata", "token_count", "dataset_id"},
      "hdc_score": float, "late_score": float or None, "fused_score": float or None, "corpus_id": int,
      "corpus": name, "dataset": dataset name or ""}].
    Corpora whose active build used late interaction are also ranked through their multi-vector
    store and fused with HDC; while that store is down they are searched by HDC alone.
    Raises ApplicationError when the chosen corpora cannot be searched together (different model
    or HDC dimensions).
    """
    if not query.strip():
        return []
    ids = {int(i) for i in corpus_ids}
    corpora = list(corpora_visible_to(user).filter(pk__in=ids, active_build__isnull=False)
                   .select_related("active_build").prefetch_related("datasets").order_by("pk"))
    if not corpora:
        return []
    models = {c.active_build.parameters.get("gguf_path", "") for c in corpora}
    dims = {c.active_build.parameters.get("hdc_dimensions") for c in corpora}
    if len(models) != 1 or len(dims) != 1:
        names = ", ".join(f"{c.name} ({c.active_build.parameters.get('hdc_dimensions')} dims, "
                          f"{Path(c.active_build.parameters.get('gguf_path', '')).name})" for c in corpora)
        raise ApplicationError(f"These corpora use different models or HDC dimensions and cannot be searched "
                               f"together: {names}.", {"corpus_ids": sorted(c.pk for c in corpora)})
    gguf_path = models.pop()
    targets = []
    for corpus in corpora:
        enabled = frozenset(d.pk for d in corpus.datasets.all() if d.enabled)
        loaded = cached_corpus(corpus.active_build.build_dir)
        late = fusion = None
        parameters = corpus.active_build.parameters
        if parameters.get("late_interaction"):
            late = _late_ranker(corpus_id=corpus.pk, build_id=corpus.active_build_id, corpus=loaded,
                                gguf_path=gguf_path, enabled=enabled)
            # Weights measured on the build's own self-queries; a build made before they were
            # measured has none, and gets HDC alone: unweighted fusion lowered recall on real text.
            fusion = FusionWeights.from_dict(parameters["fusion"]) if "fusion" in parameters else \
                FusionWeights(hdc=1.0, late=0.0)
        targets.append(SearchTarget(corpus=loaded, store=BuildMemoryStore(corpus.active_build_id),
                                    name=str(corpus.pk), enabled_sources=enabled, late=late, fusion=fusion))
    results = _retriever(gguf_path).search(query, targets, blend=blend, token_budget=token_budget,
                                               top_document=top_document)
    by_id: dict[int, Corpus] = {c.pk: c for c in corpora}
    dataset_names = {d.pk: d.name for c in corpora for d in c.datasets.all()}
    return [{**result, "corpus_id": int(result["corpus"]), "corpus": by_id[int(result["corpus"])].name,
             "dataset": dataset_names.get(result["memory"].get("dataset_id"), "")} for result in results]
