"""Heading paths and line ranges of chunked text: Markdown checked against markdown-it-py's parse of this
repository's own docs, HTML rendered from them by markdown-it-py, plain text across segment borders;
the memories' text and ids stay what they were without places."""

from __future__ import annotations

from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from engine.dataset_chunks import _chunk_stream
from engine.datasets import iter_dataset
from engine.markup import html_text
from engine.places import place_label
from engine.text_places import TextPlaces

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def reference_headings(text: str) -> list[tuple[int, int, str]]:
    """(1-based line, level, text) of every heading markdown-it-py finds outside containers."""
    tokens = MarkdownIt().parse(text)
    found = []
    for index, token in enumerate(tokens):
        if token.type == "heading_open" and token.level == 0:
            found.append((token.map[0] + 1, int(token.tag[1]), tokens[index + 1].content.strip()))
    return found


def path_at(headings: list[tuple[int, int, str]], line: int) -> list[str]:
    path: list[tuple[int, str]] = []
    for at, level, text in headings:
        if at > line:
            break
        path = [entry for entry in path if entry[0] < level] + [(level, text)]
    return [text for _, text in path]


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_markdown_windows_carry_the_heading_path_and_lines_markdown_it_finds(doc):
    text = doc.read_text()
    lines, headings = text.split("\n"), reference_headings(text)
    records = list(iter_dataset(doc, chunk_size=48))
    for record in records:
        first, last = record["metadata"]["lines"]
        assert record["text"] in "\n".join(lines[first - 1:last])
        assert record["text"].count("\n") == last - first
        assert record["metadata"].get("headings", []) == path_at(headings, first)
    assert any(record["metadata"].get("headings") for record in records)


def test_places_change_no_memorys_text_or_id():
    text = (ROOT / "docs" / "guide.md").read_text()
    plain = [(start, chunk) for start, chunk, _, _ in _chunk_stream([text], None, 48)]
    records = list(iter_dataset(ROOT / "docs" / "guide.md", chunk_size=48))
    assert [(r["metadata"]["char_start"], r["text"]) for r in records] == plain


def test_html_headings_rendered_by_a_real_renderer_become_the_heading_path(tmp_path):
    markdown = (ROOT / "docs" / "guide.md").read_text()
    html = f"<!doctype html><html><body>{MarkdownIt().render(markdown)}</body></html>"
    path = tmp_path / "guide.html"
    path.write_text(html)
    readable = "".join(html_text([html]))
    by_offset, at = [], 0
    for _, level, heading in reference_headings(markdown):  # each heading is a line of the readable text
        at = readable.index(f"{heading}\n", at)
        by_offset.append((at, level, heading))
    records = list(iter_dataset(path, chunk_size=48))
    for record in records:
        assert record["metadata"].get("headings", []) == path_at(by_offset, record["metadata"]["char_start"])
        assert "lines" not in record["metadata"]  # HTML's readable text has no source lines
    assert len({tuple(record["metadata"].get("headings", [])) for record in records}) == len(by_offset)
    assert place_label(records[-1]["metadata"]).startswith(by_offset[0][2] + " › ")


def test_plain_text_lines_hold_across_the_chunkers_segments(tmp_path):
    text = "".join(f"{doc.read_text()}\n" for doc in DOCS) * 3  # several segments of 256 KiB
    path = tmp_path / "all-docs.txt"
    path.write_text(text)
    lines = text.split("\n")
    records = list(iter_dataset(path, chunk_size=2048))
    assert records[-1]["metadata"]["char_end"] > 600_000
    for record in records:
        first, last = record["metadata"]["lines"]
        assert record["text"] in "\n".join(lines[first - 1:last])
        assert record["text"].count("\n") == last - first
        assert "headings" not in record["metadata"]


def test_fences_front_matter_and_setext_headings():
    places = TextPlaces("markdown")
    text = ("---\ntitle: Notes\n---\n# Top\n\n```python\n# not a heading\n```\nSub part\n--------\n"
            "- item\n---\nTail\n")
    for _ in places.watch([text[:20], text[20:]]):
        pass
    assert places.place(text.index("# not"), "x") == {"headings": ["Top"], "lines": [7, 7]}
    assert places.place(text.index("Tail"), "Tail")["headings"] == ["Top", "Sub part"]
