"""BuildParameters: every shape `IndexBuild.parameters` holds reads through it, and what it writes reads
back."""

from __future__ import annotations

import json

import pytest

from corpus.build_parameters import VERSION, BuildParameters
from corpus.models import IndexBuild
from engine.fusion import FusionChoice

# A full build's row as builds wrote it before the version key and the model's identity existed.
OLD_BUILD = {
    "hdc_dimensions": 1024,
    "hdc_seed": 7,
    "hdc_ngram": 3,
    "chunk_size": 64,
    "gguf_path": "/m/gemma.gguf",
    "late_interaction": True,
    "text_records": 12,
    "text_rows_skipped": 0,
    "fusion": {"hdc": 1.0, "late": 0.0},
}  # RRF weights, stored before fusion rules
OLD_APPEND = {
    "hdc_dimensions": 1024,
    "hdc_seed": 7,
    "hdc_ngram": 3,
    "chunk_size": 64,
    "gguf_path": "/m/gemma.gguf",
    "dataset_ids": ["4", 5],
    "base_build": 3,
    "word_channel": True,
    "segment": {"kind": "append", "row_offset": 9, "new_tokens": 2},
    "published": {},
}


def test_an_old_build_row_reads_with_defaults_for_what_it_lacks():
    params = IndexBuild(parameters=OLD_BUILD).params
    assert (params.hdc_dimensions, params.hdc_seed, params.hdc_ngram, params.chunk_size) == (1024, 7, 3, 64)
    assert params.late_interaction is True and params.text_records == 12
    assert params.fusion == FusionChoice(rule="hdc")  # the stored weights, read as the rule they meant
    assert params.hdc_drop_components is None and params.model_sha256 is None and params.word_fusion is None
    assert params.dataset_ids is None  # not recorded, which appends.covered_dataset_ids tells from "none"
    assert params.previous == () and params.base_build is None and params.published is None
    assert params.model_key == "/m/gemma.gguf"  # no identity recorded: the model is its path


def test_an_old_append_row_reads_typed():
    params = BuildParameters.from_json(OLD_APPEND)
    assert params.dataset_ids == (4, 5) and params.base_build == 3 and params.previous == ()
    assert params.word_channel is True and params.segment["new_tokens"] == 2 and params.published == {}


@pytest.mark.parametrize("stored", [None, {}, {"version": VERSION}])
def test_an_empty_row_reads_as_nothing_recorded(stored):
    params = BuildParameters.from_json(stored)
    assert params == BuildParameters() and params.gguf_path == "" and params.late_interaction is False
    assert params.to_json()["version"] == VERSION and BuildParameters.from_json(params.to_json()) == params


def test_what_it_writes_reads_back_as_plain_json_and_keeps_unknown_keys():
    params = BuildParameters.from_json({**OLD_APPEND, "from_a_newer_version": [1, 2]}).replace(
        model_name="gemma.gguf",
        model_sha256="ab" * 32,
        word_fusion=FusionChoice(rule="z:1", evidence={"n": 3}),
    )
    stored = json.loads(json.dumps(params.to_json()))
    assert stored["version"] == VERSION and stored["from_a_newer_version"] == [1, 2]
    assert stored["dataset_ids"] == [4, 5] and stored["word_fusion"] == {"rule": "z:1", "evidence": {"n": 3}}
    assert "fusion" not in stored and "text_records" not in stored  # unset fields stay out of the row
    assert BuildParameters.from_json(stored) == params
    assert params.model_key == "ab" * 32


def test_an_append_inherits_the_encoding_of_its_base():
    base = BuildParameters.from_json(OLD_BUILD).replace(hdc_drop_components=16, model_sha256="cd" * 32,
                                                       word_fusion=FusionChoice())
    append = base.for_append(dataset_ids=[8], base_build=3, previous=[5, 6])
    assert (append.hdc_dimensions, append.hdc_drop_components, append.model_sha256) == (1024, 16, "cd" * 32)
    assert append.dataset_ids == (8,) and append.previous == (5, 6) and append.word_channel is True
    assert append.fusion is None and append.text_records is None  # the base's evidence is not the segment's


@pytest.mark.parametrize(("key", "value"), [("dataset_ids", ["x"]), ("fusion", {"rule": "nonsense"}),
                                            ("previous", 5)])
def test_a_value_that_cannot_be_read_names_its_key(key, value):
    with pytest.raises(ValueError, match=key):
        BuildParameters.from_json({key: value})
