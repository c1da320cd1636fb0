"""Readable text of HTML and XML documents, streamed: datasets index what a reader sees, not tags.

HTML drops scripts, styles, templates and SVG, and ends a line at every block element; XML ends a
line at every element outside mixed content. Whitespace runs collapse to one space.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from html.parser import HTMLParser
from typing import Any
from xml.parsers import expat


class MarkupError(ValueError):
    """The document cannot be read as the markup it claims to be."""


_HTML_BLOCKS = frozenset(
    {
        "address",
        "article",
        "aside",
        "blockquote",
        "br",
        "caption",
        "dd",
        "details",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hr",
        "li",
        "main",
        "nav",
        "ol",
        "p",
        "pre",
        "section",
        "summary",
        "table",
        "td",
        "th",
        "title",
        "tr",
        "ul",
    }
)
_HTML_DROPPED = frozenset({"script", "style", "template", "svg"})
_HTML_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
# Told (offset of the heading's line in the text, level 1-6, the heading's text) as headings end.
HeadingHandler = Callable[[int, int, str], None]


class _TextCollector:
    """Collects character data into lines: whitespace runs collapse, block boundaries end a line."""

    def __init__(self) -> None:
        self.pending: list[str] = []
        self.lines: list[str] = []
        self.offset = 0  # characters of the text in completed lines

    def data(self, text: str) -> None:
        self.pending.append(text)

    def boundary(self) -> tuple[int, str]:
        """End the line being collected → (its offset in the text, the line; "" when it is empty)."""
        line = " ".join("".join(self.pending).split())
        self.pending.clear()
        at = self.offset
        if line:
            self.lines.append(line)
            self.offset += len(line) + 1
        return at, line

    def take(self) -> str:
        """The completed lines since the last call, each ending in "\\n"."""
        text = "".join(line + "\n" for line in self.lines)
        self.lines.clear()
        return text


class _HTMLText(HTMLParser):
    def __init__(self, collector: _TextCollector, on_heading: HeadingHandler | None = None) -> None:
        super().__init__(convert_charrefs=True)
        self.collector = collector
        self.dropped_depth = 0
        self.on_heading = on_heading

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in _HTML_DROPPED:
            self.dropped_depth += 1
        elif tag in _HTML_BLOCKS:
            self.collector.boundary()

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        if tag in _HTML_BLOCKS:
            self.collector.boundary()

    def handle_endtag(self, tag: str) -> None:
        if tag in _HTML_DROPPED:
            self.dropped_depth = max(0, self.dropped_depth - 1)
        elif tag in _HTML_BLOCKS:
            at, line = self.collector.boundary()
            if line and tag in _HTML_HEADINGS and self.on_heading is not None:
                self.on_heading(at, _HTML_HEADINGS[tag], line)

    def handle_data(self, data: str) -> None:
        if not self.dropped_depth:
            self.collector.data(data)


def html_text(blocks: Iterable[str], on_heading: HeadingHandler | None = None) -> Iterator[str]:
    """Readable text of an HTML document given as text blocks, yielded as lines complete;
    `on_heading` is told each h1-h6 heading and where its line starts in that text."""
    collector = _TextCollector()
    parser = _HTMLText(collector, on_heading)
    for block in blocks:
        parser.feed(block)
        yield collector.take()
    parser.close()
    collector.boundary()
    yield collector.take()


def xml_text(blocks: Iterable[bytes]) -> Iterator[str]:
    """Readable text of an XML document given as byte blocks. An element ends a line unless it
    sits inside mixed content (its parent has text of its own), so ``<p>a <em>b</em> c</p>``
    stays one line. Raises MarkupError for invalid XML or entity declarations."""
    collector = _TextCollector()
    parser = expat.ParserCreate()
    mixed: list[bool] = []

    def start(name: str, attrs: dict) -> None:
        collector.data(" ")
        mixed.append(False)

    def end(name: str) -> None:
        mixed.pop()
        if mixed and mixed[-1]:
            collector.data(" ")
        else:
            collector.boundary()

    def data(text: str) -> None:
        if mixed and text.strip():
            mixed[-1] = True
        collector.data(text)

    def no_entities(*args: Any) -> None:
        # Entity declarations enable expansion bombs and external fetches; datasets do not need them.
        raise MarkupError("XML entity declarations are not allowed")

    parser.StartElementHandler, parser.EndElementHandler, parser.CharacterDataHandler = start, end, data
    parser.EntityDeclHandler = no_entities
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    try:
        for block in blocks:
            parser.Parse(block, False)
            yield collector.take()
        parser.Parse(b"", True)
    except expat.ExpatError as error:
        raise MarkupError(
            f"invalid XML at line {error.lineno} column {error.offset} "
            f"(byte offset {parser.ErrorByteIndex}): {expat.ErrorString(error.code)}"
        ) from None
    collector.boundary()
    yield collector.take()
