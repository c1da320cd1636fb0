"""engine.model_files: packaged models assembled from parts, refused unless they are the pinned file."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from engine.gguf import read_metadata
from engine.llama_server import resolve_chat_template
from engine.model_files import (
    CHAT_MODEL,
    CHAT_REQUANTIZE_PLAN,
    ModelAssemblyError,
    PackagedModel,
    assemble_parts,
    default_chat_gguf_path,
    packaged_model_path,
)
from engine.requantize import plan_text, requantized_from


def _parts(tmp_path: Path, payload: bytes, pieces: int = 3) -> list[Path]:
    size = -(-len(payload) // pieces)
    paths = []
    for number in range(pieces):
        path = tmp_path / f"part{number:02d}.bin"
        path.write_bytes(payload[number * size:(number + 1) * size])
        paths.append(path)
    return paths


PAYLOAD = b"GGUF" + bytes(range(256)) * 40


def test_parts_concatenate_in_order_into_the_pinned_file(tmp_path):
    parts = _parts(tmp_path, PAYLOAD)
    target = assemble_parts(parts, tmp_path / "out" / "model.gguf", size=len(PAYLOAD),
                            sha256=hashlib.sha256(PAYLOAD).hexdigest())
    assert target.read_bytes() == PAYLOAD
    assert [p.name for p in target.parent.iterdir()] == ["model.gguf"]  # no temporary left behind


def test_a_corrupt_part_is_refused_and_leaves_nothing(tmp_path):
    parts = _parts(tmp_path, PAYLOAD)
    parts[1].write_bytes(b"\x00" * parts[1].stat().st_size)  # same size, other bytes
    target = tmp_path / "out" / "model.gguf"
    with pytest.raises(ModelAssemblyError, match="sha256 .* expected .*refusing"):
        assemble_parts(parts, target, size=len(PAYLOAD), sha256=hashlib.sha256(PAYLOAD).hexdigest())
    assert not target.exists() and list(target.parent.iterdir()) == []


def test_a_truncated_or_reordered_part_is_refused(tmp_path):
    parts = _parts(tmp_path, PAYLOAD)
    digest = hashlib.sha256(PAYLOAD).hexdigest()
    with pytest.raises(ModelAssemblyError, match="hold .* bytes, expected"):
        assemble_parts(parts[:2], tmp_path / "a.gguf", size=len(PAYLOAD), sha256=digest)
    with pytest.raises(ModelAssemblyError, match="sha256"):
        assemble_parts(list(reversed(parts)), tmp_path / "b.gguf", size=len(PAYLOAD), sha256=digest)


def test_a_file_that_is_not_gguf_is_refused_even_with_its_checksum(tmp_path):
    payload = b"PK\x03\x04" + PAYLOAD[4:]
    parts = _parts(tmp_path, payload)
    with pytest.raises(ModelAssemblyError, match="not a GGUF"):
        assemble_parts(
            parts, tmp_path / "m.gguf", size=len(payload), sha256=hashlib.sha256(payload).hexdigest()
        )


def test_a_missing_part_names_the_package_to_install(tmp_path):
    model = PackagedModel(
        file_name="m.gguf",
        parts=(("json", "nothing-here.bin"), ("no_such_pkg_xyz", "a.bin")),
        size=1,
        sha256="0" * 64,
    )
    with pytest.raises(ModelAssemblyError, match="json/nothing-here.bin .* pip install json"):
        packaged_model_path(model, tmp_path)


@pytest.mark.slow
def test_the_packaged_chat_model_is_the_pinned_instruct_model_with_its_own_template():
    packaged = default_chat_gguf_path(packaged=True)
    assert packaged.stat().st_size == CHAT_MODEL.size
    path = default_chat_gguf_path()  # what llama.cpp serves: re-encoded from the pinned file
    assert requantized_from(path) == (CHAT_MODEL.sha256, plan_text(CHAT_REQUANTIZE_PLAN))
    assert path.stat().st_mtime == default_chat_gguf_path().stat().st_mtime  # made once, then reused
    metadata = read_metadata(path)
    assert metadata.fields["general.name"] == read_metadata(packaged).fields["general.name"]
    assert "Instruct" in metadata.fields["general.name"]
    assert metadata.chat_template and "<|im_start|>" in metadata.chat_template
    # Its own (Jinja) template is used; the Gemma base model, which has none, gets the built-in one.
    assert resolve_chat_template(path, "auto") is None
    assert resolve_chat_template(path, "chatml") == "chatml"


def test_the_base_model_gets_its_architectures_builtin_template(gemma_gguf):
    assert resolve_chat_template(gemma_gguf, "auto") == "gemma"
    assert resolve_chat_template(gemma_gguf, None) is None
