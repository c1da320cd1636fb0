"""The one atomic file write (engine.files.atomic_write, issue 30.10), through each of its callers.

Every file the engine and the portal write whole (a build's manifest, a vocabulary index written or
extended, a bitmap index finalized, the embeddings cache, an assembled or requantized model, a file
downloaded from the object store, a build's meaning rows) must leave its name holding either the
old file or the new one, never a half-written file and never a temporary beside it, and must be on
disk before its name points to it.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf.quants import quantize

from corpus.object_store import ObjectStore
from engine.build import _write_manifest
from engine.gguf import load_token_embeddings
from engine.index import BitmapIndex
from engine.meaning import MEANING_FILE, write_meaning
from engine.model_files import assemble_parts
from engine.requantize import requantize
from engine.vocab_writer import extend_vocab_index, write_vocab_index

OLD = b"the old file, which must survive a failed write"
EMBEDDINGS = np.random.default_rng(30).standard_normal((48, 16)).astype(np.float32)
TOKEN_IDS = np.arange(3, 40, dtype=np.int64)
IDF = np.ones(TOKEN_IDS.size, dtype=np.float32)
VOCAB = {"embeddings": EMBEDDINGS, "dims": 64, "ngram": 2, "seed": 0}

Write = Callable[[], object]


def _tiny_gguf(path: Path) -> None:
    """A small llama-architecture GGUF with a token embedding table and a quantized matrix."""
    rng = np.random.default_rng(3)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_string("general.name", "tiny")
    writer.add_tensor("token_embd.weight", rng.normal(size=(8, 32)).astype(np.float32))
    up = rng.normal(size=(8, 64)).astype(np.float32)
    writer.add_tensor("blk.0.ffn_up.weight", quantize(up, gguf.GGMLQuantizationType.Q5_0),
                      raw_dtype=gguf.GGMLQuantizationType.Q5_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def manifest(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Write:
    (directory / "manifest.json").write_bytes(OLD)
    return lambda: _write_manifest(directory, {"documents": 1})


def vocabulary(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Write:
    (directory / "vocab.idx").write_bytes(OLD)
    return lambda: write_vocab_index(directory / "vocab.idx", token_ids=TOKEN_IDS, idf=IDF, **VOCAB)


def vocabulary_extended(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Write:
    base = write_vocab_index(directory / "base.idx", token_ids=TOKEN_IDS, idf=IDF, **VOCAB)
    (directory / "vocab.idx").write_bytes(OLD)
    new = np.arange(40, 44, dtype=np.int64)
    rows = np.ascontiguousarray(EMBEDDINGS[new]).view(np.uint8)  # the F32 rows' own bytes
    return lambda: extend_vocab_index(base, directory / "vocab.idx", token_ids=new,
                                      idf=np.ones(new.size, dtype=np.float32), stored_rows=("F32", rows))


def bitmap_index(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Write:
    index = BitmapIndex.create(directory / "corpus.idx", dims=128)
    pos = np.random.default_rng(1).integers(0, 2**63, size=(5, 2), dtype=np.uint64)
    index.append(pos, np.zeros_like(pos))
    return index.finalize


def embeddings_cache(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Write:
    model = directory.parent / "tiny.gguf"
    _tiny_gguf(model)
    return lambda: load_token_embeddings(model, cache_dir=directory)


def assembled_model(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Write:
    import hashlib

    payload = b"GGUF" + bytes(range(256)) * 8
    parts = [directory.parent / "part0.bin", directory.parent / "part1.bin"]
    parts[0].write_bytes(payload[:1000])
    parts[1].write_bytes(payload[1000:])
    (directory / "model.gguf").write_bytes(OLD)
    return lambda: assemble_parts(parts, directory / "model.gguf", size=len(payload),
                                  sha256=hashlib.sha256(payload).hexdigest())


def requantized_model(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Write:
    source = directory.parent / "tiny.gguf"
    _tiny_gguf(source)
    (directory / "model.gguf").write_bytes(OLD)
    return lambda: requantize(source, directory / "model.gguf", {"Q5_0": "Q4_0"}, source_sha256="ab" * 32)


def object_store_download(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Write:
    class Client:  # what the store's boto3 client does: writes the object to the file name given
        def download_file(self, bucket: str, key: str, filename: str) -> None:
            Path(filename).write_bytes(b"the object's bytes")

    monkeypatch.setattr(ObjectStore, "client", property(lambda self: Client()))
    (directory / "vocab.idx").write_bytes(OLD)
    return lambda: ObjectStore("hdrag", "team").get("corpora/1/builds/2/vocab.idx", directory / "vocab.idx")


def meaning_rows(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Write:
    (directory / MEANING_FILE).write_bytes(OLD)
    return lambda: write_meaning(["A cat purrs.", "A compiler translates source code."], directory)


DURABLE = [manifest, vocabulary, vocabulary_extended, bitmap_index, assembled_model, requantized_model,
           object_store_download, meaning_rows]
WRITERS = [*DURABLE, embeddings_cache]  # the embeddings cache is rebuilt from the model: not fsynced


def _files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


@pytest.mark.parametrize("writer", WRITERS, ids=lambda writer: writer.__name__)
def test_a_failed_write_leaves_the_old_file_and_no_temporary(writer, tmp_path, monkeypatch):
    """The last step of the write, the rename, fails (as an I/O error would make it; a real failing
    disk cannot be produced here, so the fault is injected into os.replace for the folder written).
    The folder then holds exactly what it held before: the old file, byte for byte, and nothing
    else, however the caller had written its temporary."""
    directory = tmp_path / "files"
    directory.mkdir()
    write = writer(directory, monkeypatch)
    before = _files(directory)
    real_replace = os.replace

    def failing_replace(source, target, *args, **kwargs):  # noqa: ANN001, ANN202
        if Path(target).parent == directory:
            raise OSError(errno.EIO, "Input/output error (injected)", str(target))
        return real_replace(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="injected"):
        write()
    assert _files(directory) == before


@pytest.mark.parametrize("writer", DURABLE, ids=lambda writer: writer.__name__)
def test_a_file_is_on_disk_before_its_name_points_to_it(writer, tmp_path, monkeypatch):
    """A power cut after the rename must not leave the name on an empty or partial file: each
    durable writer fsyncs its temporary before renaming it over the target."""
    directory = tmp_path / "files"
    directory.mkdir()
    write = writer(directory, monkeypatch)
    synced: set[str] = set()
    renames: list[tuple[str, bool]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def recording_fsync(fd):  # noqa: ANN001, ANN202
        number = fd if isinstance(fd, int) else fd.fileno()
        synced.add(os.path.realpath(f"/proc/self/fd/{number}"))
        return real_fsync(fd)

    def recording_replace(source, target, *args, **kwargs):  # noqa: ANN001, ANN202
        if Path(target).parent == directory:
            renames.append((Path(target).name, os.path.realpath(source) in synced))
        return real_replace(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "replace", recording_replace)
    write()
    assert renames and all(was_synced for _, was_synced in renames), renames
