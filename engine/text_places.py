"""The place of each window of a chunked text (`engine.datasets`' text, Markdown and HTML): the
``lines`` it spans in the file (plain text and Markdown, whose readable text is the file's own) and
the ``headings`` of the section it starts in (Markdown's ATX and setext headings outside code
fences, HTML's h1-h6 as `engine.markup.html_text` reports them).

`TextPlaces` follows the text as it streams to the chunker and answers for windows in the order
they are cut (their starts never go back), so it holds only the text the chunker has read ahead,
never the whole file; the chunks' text and ids stay what they were without it.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_LINE_KEPT = 4096  # of a Markdown line, enough to tell a heading (a line of megabytes is never one)
_NOT_A_TITLE = re.compile(r" {0,3}(?:[-*+>]|\d+[.)])(?:[ \t]|$)")  # a list item or quote above "---"


class TextPlaces:
    """Lines and heading paths of a text's windows; `fmt` is the dataset format ("text",
    "markdown", "html", "xml": lines for the first two, headings for the middle two)."""

    def __init__(self, fmt: str) -> None:
        self.count_lines = fmt in ("text", "markdown")
        self.markdown = fmt == "markdown"
        self.pending: deque[str] = deque()  # text read ahead of the last window's start
        self.pending_pos = 0  # how far the first pending piece is counted
        self.at = 0  # offset in the text of the last window's start
        self.lines_before = 0  # line ends before `at`
        self.events: deque[tuple[int, int, str]] = deque()  # (offset, level, heading) ahead of `at`
        self.path: list[tuple[int, str]] = []  # the headings in force at `at`, outermost first
        self.line = ""  # Markdown: the line being read, its offset, the line before it
        self.line_at = 0
        self.previous: tuple[int, str] = (0, "")
        self.fence = ""
        self.front_matter = False
        self.read = 0

    def heading(self, offset: int, level: int, text: str) -> None:
        """A heading of `level` (1 outermost) whose line starts at `offset` of the text."""
        if text:
            self.events.append((offset, level, text))

    def watch(self, pieces: Iterable[str]) -> Iterator[str]:
        """`pieces` as they are, noting their line ends and Markdown headings on the way."""
        for piece in pieces:
            if self.count_lines:
                self.pending.append(piece)
            if self.markdown:
                self._scan(piece)
            self.read += len(piece)
            yield piece
        if self.markdown and self.line:
            self._markdown_line(self.line_at, self.line)

    def _scan(self, piece: str) -> None:
        start = 0
        while (end := piece.find("\n", start)) >= 0:
            self._markdown_line(self.line_at, self.line + piece[start:min(end, start + _LINE_KEPT)])
            self.line, self.line_at = "", self.read + end + 1
            start = end + 1
        if len(self.line) < _LINE_KEPT:
            self.line += piece[start:start + _LINE_KEPT]

    def _markdown_line(self, offset: int, line: str) -> None:
        line = line.rstrip("\r")
        if offset == 0 and line.strip() == "---":
            self.front_matter = True  # YAML front matter: its closing "---" is no heading's underline
        elif self.front_matter:
            self.front_matter = line.strip() != "---"
        elif fence := _FENCE.match(line):
            marker = fence.group(1)
            if not self.fence:
                self.fence = marker
            elif marker[0] == self.fence[0] and len(marker) >= len(self.fence):
                self.fence = "" if not line[fence.end():].strip() else self.fence
        elif not self.fence and self._markdown_heading(offset, line):
            line = ""  # a heading or its underline is not the title of a setext underline below it
        self.previous = (offset, "" if self.fence or self.front_matter else line)

    def _markdown_heading(self, offset: int, line: str) -> bool:
        if atx := _ATX.match(line):
            self.heading(offset, len(atx.group(1)), (atx.group(2) or "").strip())
            return True
        title = self.previous[1]
        if (setext := _SETEXT.match(line)) and title.strip() and not _NOT_A_TITLE.match(title):
            self.heading(self.previous[0], 1 if setext.group(1)[0] == "=" else 2, title.strip())
            return True
        return False

    def _advance(self, offset: int) -> None:
        while self.events and self.events[0][0] <= offset:
            _, level, text = self.events.popleft()
            self.path = [entry for entry in self.path if entry[0] < level] + [(level, text)]
        while self.count_lines and self.at < offset and self.pending:
            piece = self.pending[0]
            take = min(len(piece) - self.pending_pos, offset - self.at)
            self.lines_before += piece.count("\n", self.pending_pos, self.pending_pos + take)
            self.pending_pos += take
            self.at += take
            if self.pending_pos == len(piece):
                self.pending.popleft()
                self.pending_pos = 0
        self.at = max(self.at, offset)

    def place(self, char_start: int, chunk: str) -> dict[str, Any]:
        """The place of the window `chunk` starting at `char_start`: ``lines`` and ``headings``."""
        self._advance(char_start)
        place: dict[str, Any] = {}
        if self.path:
            place["headings"] = [text for _, text in self.path]
        if self.count_lines:
            first = self.lines_before + 1
            place["lines"] = [first, first + chunk.count("\n")]
        return place
