"""Source code: found by name ending and by shebang, cut at top-level definitions into parts of bounded
size, each with its line range; this repository's own files are the real code."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus.sources.reading import READABLE_SUFFIXES, PathFilter
from engine.datasets import DatasetError, iter_dataset, sniff_format
from engine.readers import ReadOptions
from engine.readers.code import LANGUAGE_BY_SUFFIX, MAX_PART_CHARS, MAX_PART_LINES, code_parts, read_code

ROOT = Path(__file__).resolve().parents[2]
REAL_CODE = sorted((ROOT / "engine").glob("*.py")) + [ROOT / "static" / "chat" / "chat.js", ROOT / "portal"]


@pytest.mark.parametrize("path", REAL_CODE, ids=lambda path: path.name)
def test_parts_are_the_files_own_lines_and_cover_every_line_with_text(path):
    lines = path.read_text().split("\n")
    parts = list(read_code(path, ReadOptions()))
    covered = set()
    for part in parts:
        first, last = part.place["lines"]
        assert part.text == "\n".join(lines[first - 1:last])
        assert last - first < MAX_PART_LINES
        assert len(part.text) <= MAX_PART_CHARS or last == first
        covered.update(range(first, last + 1))
    assert {number for number, line in enumerate(lines, start=1) if line.strip()} <= covered
    assert [part.place["lines"][0] for part in parts] == sorted(part.place["lines"][0] for part in parts)
    assert parts[-1].share == 1.0


def test_parts_start_at_top_level_definitions_where_one_is_near():
    path = ROOT / "engine" / "datasets.py"
    lines = path.read_text().split("\n")
    starts = [part.place["lines"][0] for part in read_code(path, ReadOptions())][1:]
    assert starts
    for start in starts:
        assert not lines[start - 1][0].isspace() and not lines[start - 2].strip()


def test_a_definition_longer_than_a_part_is_cut_at_line_boundaries():
    lines = ["def long():\n"] + [f"    value_{i} = {i}\n" for i in range(200)]
    parts = list(code_parts(lines, max_lines=50))
    spans = [(first, last) for first, last, _ in parts]
    assert spans == [(1, 50), (51, 100), (101, 150), (151, 200), (201, 201)]
    assert "".join(text + "\n" for _, _, text in parts) == "".join(lines)


def test_code_is_sniffed_by_name_ending_and_by_shebang(tmp_path):
    assert sniff_format(ROOT / "engine" / "datasets.py") == "code"
    assert sniff_format(ROOT / "static" / "chat" / "chat.js") == "code"
    assert sniff_format(ROOT / "portal") == "code"  # a bash script without a name ending
    records = list(iter_dataset(ROOT / "portal", chunk_size=4096))
    assert {record["metadata"]["language"] for record in records} == {"shell"}
    assert records[0]["metadata"]["lines"][0] == 1 and records[0]["text"].startswith("#!/usr/bin/env bash")
    (tmp_path / "notes.txt").write_text("#!/bin/sh is how a shell script starts.\n")
    assert sniff_format(tmp_path / "notes.txt") == "text"


def test_records_narrow_a_parts_lines_to_their_window():
    path = ROOT / "engine" / "datasets.py"
    lines = path.read_text().split("\n")
    records = list(iter_dataset(path, chunk_size=64))
    assert len(records) > len(list(read_code(path, ReadOptions())))
    for record in records:
        first, last = record["metadata"]["lines"]
        assert record["text"] in "\n".join(lines[first - 1:last])
        assert record["text"].count("\n") == last - first
        assert record["metadata"]["source"] == "datasets.py" and record["metadata"]["format"] == "code"


def test_a_code_name_on_binary_content_is_refused_with_the_reason(tmp_path):
    video = tmp_path / "clip.ts"  # an MPEG transport stream shares TypeScript's name ending
    video.write_bytes(bytes([0x47, 0x40, 0x00, 0x10, 0x00]) * 40)
    with pytest.raises(DatasetError, match="binary data or text that is not UTF-8"):
        sniff_format(video)


def test_sources_and_uploads_take_code_files():
    assert {".py", ".js", ".go", ".rs", ".sql", ".yaml", ".toml"} <= READABLE_SUFFIXES
    assert {".eml", ".mbox", ".msg"} <= READABLE_SUFFIXES
    assert set(LANGUAGE_BY_SUFFIX) <= READABLE_SUFFIXES
    filters = PathFilter()
    assert filters.wants("src/app/main.py") and filters.wants("deploy/values.yaml")
