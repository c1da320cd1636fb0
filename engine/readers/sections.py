"""A document's body as sections under their heading path: DOCX and ODT give (heading level or None,
text) blocks in order, and each section becomes one part with place {"headings": [outermost, ...]}."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from engine.readers import Part


def heading_sections(blocks: Sequence[tuple[int | None, str]]) -> Iterator[Part]:
    """A heading (level n >= 1) starts a new section and replaces the path from level n down; a
    document without headings is one section (one part, even when empty, so the caller sees it)."""
    above: list[str] = []
    section: list[str] = []
    for number, (level, text) in enumerate(blocks, start=1):
        text = text.strip()
        if level is not None and text:
            if section:
                yield Part("\n\n".join(section), _place(above), (number - 1) / len(blocks))
            above = above[:max(0, level - 1)] + [text]
            section = []
        if text:
            section.append(text)
    if section or not blocks:
        yield Part("\n\n".join(section), _place(above), 1.0)


def _place(headings: list[str]) -> dict:
    return {"headings": list(headings)} if headings else {}
