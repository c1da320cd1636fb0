"""Memory rows, a build's artefacts: the build's sink that inserts them, their deletion, the rows of
one build as the engine's `MemoryStore`, and counts per dataset. The memory app searches them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count

from core.errors import ApplicationError
from corpus.models import IndexBuild, Memory
from engine.loaded_build import MemoryRecord

_COLUMNS = (
    "corpus_id",
    "build_id",
    "hdv_idx",
    "content_hash",
    "text",
    "dataset_id",
    "metadata",
    "token_count",
)


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

    def __init__(
        self, *, build: IndexBuild, dataset_ids: Iterable[int], batch_size: int | None = None
    ) -> None:
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
            Memory.objects.bulk_create(
                [Memory(**dict(zip(_COLUMNS, row, strict=True))) for row in self.pending],
                batch_size=self.batch_size,
            )
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
class StateMemoryStore:
    """engine.loaded_build.MemoryStore over the Memory rows of a corpus's state: its full build and
    append segments, whose rows are numbered across the state (`engine.segments`)."""

    build_ids: tuple[int, ...]

    def get_memories(self, rows: list[int]) -> dict[int, MemoryRecord]:
        found: dict[int, MemoryRecord] = {}
        wanted = sorted({int(r) for r in rows})
        for start in range(0, len(wanted), 1000):
            for row in Memory.objects.filter(
                build_id__in=self.build_ids, hdv_idx__in=wanted[start : start + 1000]
            ).values("pk", "hdv_idx", "content_hash", "text", "metadata", "token_count", "dataset_id"):
                found[row["hdv_idx"]] = MemoryRecord(
                    hdv_idx=row["hdv_idx"],
                    content_hash=row["content_hash"],
                    text=row["text"],
                    token_count=row["token_count"],
                    metadata=row["metadata"] or {},
                    source_id=row["dataset_id"],
                    memory_id=row["pk"],
                )
        return found


class BuildMemoryStore(StateMemoryStore):
    """engine.loaded_build.MemoryStore over the Memory rows of one build."""

    def __init__(self, build_id: int) -> None:
        super().__init__((build_id,))


def build_memory_texts(*, build_id: int, first_row: int = 0) -> Iterator[str]:
    """Every memory text of a build in row order (rows first_row.., as its index holds them: an
    append's segment starts at its row offset), streamed. Raises ApplicationError where a row is missing."""
    rows = (Memory.objects.filter(build_id=build_id).order_by("hdv_idx").values_list("hdv_idx", "text")
            .iterator(chunk_size=2000))
    for expected, (row, text) in enumerate(rows, start=first_row):
        if row != expected:
            raise ApplicationError(f"build {build_id}: memory row {expected} is missing")
        yield text


def memory_hashes_among(*, build_ids: list[int], hashes: list[str], retiring: list[int] = ()) -> set[str]:
    """Which of `hashes` (content ids) the memory rows of those builds hold: an append's check for
    documents its state has already (one indexed lookup per batch, whatever the corpus's size).
    Rows of deleted datasets and of `retiring` ones (those the append's datasets replace) do not
    count: their documents leave searches, so a document they share must be appended again."""
    if not hashes:
        return set()
    return set(
        Memory.objects.filter(build_id__in=build_ids, content_hash__in=set(hashes), dataset__isnull=False)
        .exclude(dataset_id__in=list(retiring))
        .values_list("content_hash", flat=True)
    )


def memory_counts_by_dataset(*, build_ids: list[int]) -> dict[int, int]:
    """{dataset id: memories of those builds from it}; memories of a deleted dataset are left out."""
    if not build_ids:
        return {}
    rows = (Memory.objects.filter(build_id__in=build_ids, dataset__isnull=False).values("dataset_id")
            .annotate(n=Count("pk")).order_by())
    return {row["dataset_id"]: row["n"] for row in rows}
