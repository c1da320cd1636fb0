"""A loaded, searchable build: bitmap index + vocabulary index + manifest, and the memory stores.

Build directory layout (written by `engine.build.build_index`):

    manifest.json          written last; its presence means the build completed and verified
    vocab.idx              vocabulary index (`engine.vocab`)
    corpus.idx             bitmap index (`engine.index`), plus corpus.idx.token_counts / .source_ids
    verify.npz             a seeded sample of rows and their token ids, re-encoded by `verify_build`
    memories.sqlite        memory text (only when the build ran without a caller's sink)

Loading memory-maps the two index files; nothing is read into RAM up front, so a process can
hold many corpora (the portal keeps them in `corpus.serving`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from engine.encoder import HDCEncoder
from engine.index import BitmapIndex
from engine.vocab import check_format_version, open_shared

MANIFEST = "manifest.json"
VOCAB_FILE = "vocab.idx"
INDEX_FILE = "corpus.idx"
VERIFY_FILE = "verify.npz"
MEMORIES_DB = "memories.sqlite"


class CorpusError(ValueError):
    """A build directory that cannot be loaded: missing manifest, mismatching files."""


@dataclass(frozen=True)
class MemoryRecord:
    """One memory as a store holds it.

    `hdv_idx`: its bitmap row (numbered across a state's segments); `content_hash`: the hash of its
    text that a build deduplicates by (the same text has the same hash in every build); `memory_id`:
    the row that stores it where the store is a database (the portal's `Memory` primary key), None
    in the CLI's store; `source_id`: the dataset it came from.
    """

    hdv_idx: int
    content_hash: str
    text: str
    token_count: int
    metadata: dict[str, Any] = field(default_factory=dict)
    source_id: int | None = None
    memory_id: int | None = None

    @classmethod
    def from_build(cls, record: dict[str, Any]) -> MemoryRecord:
        """A record as `engine.build.build_index` hands it to its sink ("id" is the content hash)."""
        return cls(hdv_idx=int(record["hdv_idx"]), content_hash=str(record["id"]), text=record["text"],
                   token_count=int(record["token_count"]), metadata=record.get("metadata") or {},
                   source_id=record.get("source_id"))


@runtime_checkable
class MemoryStore(Protocol):
    """Where memory text lives. Rows are bitmap rows (`hdv_idx`) of one build.

    `get_memories(rows)` returns {row: MemoryRecord} for the rows it knows; unknown rows are simply
    absent.
    """

    def get_memories(self, rows: list[int]) -> dict[int, MemoryRecord]: ...


class SqliteMemoryStore:
    """The CLI's store: `memories.sqlite` in the build directory (table `memories`)."""

    SCHEMA = (
        "CREATE TABLE IF NOT EXISTS memories (hdv_idx INTEGER PRIMARY KEY, id TEXT NOT NULL, "
        "text TEXT NOT NULL, source_id INTEGER NOT NULL, metadata TEXT NOT NULL, token_count INTEGER NOT "
        "NULL)"
    )

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def insert(self, records: Iterable[dict]) -> None:
        with sqlite3.connect(self.path) as db:
            db.execute(self.SCHEMA)
            db.executemany("INSERT INTO memories VALUES (?, ?, ?, ?, ?, ?)",
                           [(r["hdv_idx"], r["id"], r["text"], r["source_id"], json.dumps(r["metadata"]),
                             r["token_count"]) for r in records])
        db.close()

    def get_memories(self, rows: list[int]) -> dict[int, MemoryRecord]:
        if not rows:
            return {}
        if not self.path.exists():
            raise CorpusError(f"{self.path}: memory store missing")
        db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        try:
            found = {}
            wanted = sorted({int(r) for r in rows})
            for start in range(0, len(wanted), 500):
                part = wanted[start:start + 500]
                marks = ",".join("?" * len(part))
                for hdv_idx, content_hash, text, source_id, metadata, token_count in db.execute(
                        f"SELECT * FROM memories WHERE hdv_idx IN ({marks})", part):
                    found[hdv_idx] = MemoryRecord(hdv_idx=hdv_idx, content_hash=content_hash, text=text,
                                                  token_count=token_count, metadata=json.loads(metadata),
                                                  source_id=source_id)
            return found
        finally:
            db.close()


@dataclass
class LoadedIndex:
    """A searchable index: one build (`load_corpus`), or a state of segments (a build and its
    appends, `engine.segments.load_state`): `encoder` (vocabulary index) and `index` (bitmaps),
    memory-mapped.

    `store` is the build's own SQLite store when it has one; the portal passes its own store
    to the retriever instead. `source_names` maps source ids to dataset names.
    """

    encoder: HDCEncoder
    index: BitmapIndex
    manifest: dict[str, Any] = field(default_factory=dict)
    build_dir: Path | None = None
    store: MemoryStore | None = None
    # A state of several segments (`engine.segments.load_state`): the loaded segments, base first;
    # empty for one build.
    segments: tuple[LoadedIndex, ...] = ()

    @property
    def dims(self) -> int:
        return self.encoder.dims

    @property
    def count(self) -> int:
        return self.index.count

    @property
    def source_names(self) -> dict[int, str]:
        return {int(s["source_id"]): s["name"] for s in self.manifest.get("sources", [])}

    def source_counts(self) -> dict[str, int]:
        return {s["name"]: int(s["documents"]) for s in self.manifest.get("sources", [])}

    @property
    def key(self) -> str:
        """Identity of the build for caches (queries encoded for one build are not valid for another)."""
        return str(self.build_dir) if self.build_dir else f"memory:{id(self)}"


def read_manifest(build_dir: str | Path) -> dict[str, Any]:
    path = Path(build_dir) / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise CorpusError(f"{path}: no manifest (build incomplete, failed or cancelled)") from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise CorpusError(f"{path}: unreadable manifest: {exc}") from exc
    check_format_version(manifest, path, CorpusError)
    return manifest


def load_corpus(build_dir: str | Path) -> LoadedIndex:
    """Open a completed build. Raises CorpusError when the manifest and the files disagree."""
    build_dir = Path(build_dir).resolve()
    manifest = read_manifest(build_dir)
    encoder = HDCEncoder(open_shared(build_dir / VOCAB_FILE))
    index = BitmapIndex.open(build_dir / INDEX_FILE)
    expected = (manifest["dims"], manifest["ngram"], manifest["seed"], manifest["documents"])
    found = (encoder.dims, encoder.ngram, encoder.seed, index.count)
    if expected != found or index.dims != encoder.dims:
        raise CorpusError(
            f"{build_dir}: manifest (dims, ngram, seed, documents) = {expected}, files hold {found}"
        )
    store_path = build_dir / MEMORIES_DB
    store = SqliteMemoryStore(store_path) if store_path.exists() else None
    return LoadedIndex(encoder=encoder, index=index, manifest=manifest, build_dir=build_dir, store=store)

