"""Source code: recognised by its file name ending (`LANGUAGE_BY_SUFFIX`, a declared table) or, without
one, by a shebang line naming an interpreter; read as parts of bounded size cut at line boundaries,
at the start of a top-level definition where one is near, each with its place ``lines``: [first,
last] (1-based) and the ``language``. The file's path is already the memory's source.

A top-level definition starts at an unindented line after a blank one (a function, a class, a
block of declarations, with the comment or decorator above it), which holds for the languages
below without parsing any of them. A part ends before one when it is full; a definition longer
than a part is cut at the line that fills it.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from engine.readers import DocumentError, Part, Reader, ReadOptions

LANGUAGE_BY_SUFFIX = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript",
    ".jsx": "javascript", ".ts": "typescript", ".tsx": "typescript", ".go": "go", ".rs": "rust",
    ".java": "java", ".kt": "kotlin", ".kts": "kotlin", ".scala": "scala", ".c": "c", ".h": "c",
    ".cc": "c++", ".cpp": "c++", ".cxx": "c++", ".hh": "c++", ".hpp": "c++", ".cs": "c#", ".swift": "swift",
    ".m": "objective-c", ".rb": "ruby", ".php": "php", ".pl": "perl", ".pm": "perl", ".lua": "lua",
    ".r": "r", ".jl": "julia", ".sh": "shell", ".bash": "shell", ".zsh": "shell", ".fish": "shell",
    ".ps1": "powershell", ".bat": "batch", ".sql": "sql", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml",
    ".ini": "ini", ".cfg": "ini", ".proto": "protobuf", ".graphql": "graphql", ".css": "css",
    ".scss": "scss", ".vue": "vue", ".svelte": "svelte", ".dart": "dart", ".ex": "elixir", ".exs": "elixir",
    ".erl": "erlang", ".hs": "haskell", ".ml": "ocaml", ".clj": "clojure", ".tf": "terraform",
    ".gradle": "groovy", ".groovy": "groovy", ".cmake": "cmake", ".mk": "make", ".dockerfile": "dockerfile",
}
# "#!/usr/bin/env python3", "#!/bin/sh -e": the interpreter's name, without a version.
_SHEBANG = re.compile(rb"#![ \t]*(?:/\S*/)?(?:env[ \t]+(?:-\S+[ \t]+)*)?([A-Za-z]+)")
LANGUAGE_BY_INTERPRETER = {
    "python": "python", "sh": "shell", "bash": "shell", "zsh": "shell", "dash": "shell", "ksh": "shell",
    "fish": "shell", "node": "javascript", "deno": "typescript", "perl": "perl", "ruby": "ruby",
    "php": "php", "lua": "lua", "Rscript": "r", "julia": "julia", "pwsh": "powershell",
}
MAX_PART_LINES = 80
MAX_PART_CHARS = 3000
_NOT_A_START = ("}", ")", "]", "end", "#endif", "</")


def _interpreter(head: bytes) -> str | None:
    match = _SHEBANG.match(head)
    return LANGUAGE_BY_INTERPRETER.get(match.group(1).decode("ascii")) if match else None


def _is_text(head: bytes) -> bool:
    if b"\x00" in head:
        return False
    try:
        codecs.getincrementaldecoder("utf-8-sig")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    return True


def sniff_code(head: bytes, suffix: str) -> bool:
    """Source code by its name ending, or, under no name ending, by a shebang naming an interpreter."""
    if suffix in LANGUAGE_BY_SUFFIX:
        if _is_text(head):
            return True
        raise DocumentError(f"a {suffix} file is read as {LANGUAGE_BY_SUFFIX[suffix]} source code, but "
                            f"this one holds binary data or text that is not UTF-8")
    return suffix == "" and _interpreter(head) is not None and _is_text(head)


def _starts_definition(line: str, previous: str) -> bool:
    return bool(line.strip()) and not line[0].isspace() and not previous.strip() \
        and not line.startswith(_NOT_A_START)


def code_parts(lines: Iterable[str], max_lines: int = MAX_PART_LINES,
               max_chars: int = MAX_PART_CHARS) -> Iterator[tuple[int, int, str]]:
    """(first, last, text) of the parts of a source file given as its lines (with their line ends):
    at most `max_lines` lines and, unless one line is longer, `max_chars` characters, cut before the
    latest top-level definition when the part is full. Blank lines at a part's ends are left out."""
    part: list[str] = []
    first, size, group = 1, 0, 0
    previous = ""
    for line in lines:
        if part and _starts_definition(line, previous):
            group = len(part)
        if part and (len(part) >= max_lines or size + len(line) > max_chars):
            cut = group or len(part)
            yield from _trimmed(first, part[:cut])
            part, first, group = part[cut:], first + cut, 0
            size = sum(map(len, part))
        part.append(line)
        size += len(line)
        previous = line
    yield from _trimmed(first, part)


def _trimmed(first: int, lines: list[str]) -> Iterator[tuple[int, int, str]]:
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    if start < end:
        yield first + start, first + end - 1, "".join(lines[start:end]).rstrip("\n")


def _lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8-sig", newline="") as handle:
        try:
            yield from handle
        except UnicodeDecodeError as error:
            raise DocumentError(f"source code that is not UTF-8 text (byte {error.start} of a block is "
                                f"{error.object[error.start:error.start + 1]!r}); save it as UTF-8") from None


def read_code(path: Path, options: ReadOptions) -> Iterator[Part]:
    """A source file's parts, each with ``lines`` and ``language``."""
    with open(path, "rb") as handle:
        head = handle.read(256)
    language = LANGUAGE_BY_SUFFIX.get(path.suffix.lower()) or _interpreter(head) or "text"
    size = max(1, path.stat().st_size)
    read, held = 0, None
    for first, last, text in code_parts(_lines(path)):
        if held is not None:
            yield Part(held[2], {"lines": [held[0], held[1]], "language": language}, min(0.99, read / size))
        read += len(text.encode("utf-8")) + 1
        held = (first, last, text)
    if held is not None:  # the last part says the whole file is read
        yield Part(held[2], {"lines": [held[0], held[1]], "language": language}, 1.0)

READERS = (Reader("code", tuple(LANGUAGE_BY_SUFFIX), sniff_code, read_code, "Source code"),)
