"""A known-item set from the Linux manual pages (Debian packages `manpages` and `manpages-dev`).

Document: one page's DESCRIPTION section as plain text (roff markup removed), cut at
`max_chars`. Query: the page's NAME line description ("fork \\- create a child process" gives
"create a child process"). Exactly one document is relevant. Pages that only redirect (`.so`),
pages without both sections and descriptions shared by several pages do not become queries;
every page with a description section can be a distractor.
"""

from __future__ import annotations

import gzip
import random
import re
import subprocess
from pathlib import Path

from bench.data.glossaries import KnownItemSet, pick_known_items

PACKAGES = ("manpages", "manpages-dev")
PACKAGE_HINT = "sudo apt-get install manpages manpages-dev"
_PAGE = re.compile(r"/usr/share/man/man\d/[^/]+\.\d\w*\.gz$")
_FONT_MACROS = {".B", ".I", ".R", ".BR", ".BI", ".IB", ".IR", ".RB", ".RI", ".SM", ".SB"}
_ESCAPES = (
    (re.compile(r"\\f(\[[^\]]*\]|\(..|.)"), ""),  # font changes
    (re.compile(r"\\\[(bu|em|en)\]"), " "), (re.compile(r"\\\[[a-z]{2}\]|\\\(..|\\\*\(..|\\\*."), ""),
    (re.compile(r"\\-"), "-"), (re.compile(r"\\e"), r"\\"), (re.compile(r"\\[&|^%:]"), ""),
    (re.compile(r"\\ "), " "), (re.compile(r"\\s[-+]?\d"), ""), (re.compile(r'\\"'), ""),
)
_ARGS = re.compile(r'"([^"]*)"|(\S+)')
_SPACES = re.compile(r"\s+")


class ManPagesMissing(FileNotFoundError):
    pass


def _plain(text: str) -> str:
    for pattern, replacement in _ESCAPES:
        text = pattern.sub(replacement, text)
    return text


def _line_text(line: str) -> str:
    """The words a roff line shows: font macros keep their arguments, other requests nothing."""
    if not line.startswith((".", "'")):
        return _plain(line)
    macro, _, rest = line.partition(" ")
    if macro in _FONT_MACROS:
        args = [quoted or bare for quoted, bare in _ARGS.findall(rest)]
        glue = " " if macro in (".B", ".I", ".R", ".SM", ".SB") else ""
        return _plain(glue.join(args))
    if macro in (".TP", ".IP") and rest and not rest.strip().isdigit():
        return _plain(rest.split(" ")[0].strip('"'))
    return ""


def read_page(path: Path) -> tuple[str, str] | None:
    """(NAME description, DESCRIPTION text) of one page, or None (a redirect, or a section missing)."""
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
        lines = handle.read().splitlines()
    sections: dict[str, list[str]] = {}
    current = None
    for line in lines:
        if line.startswith(".so "):
            return None
        if line.startswith((".\\\"", "'\\\"")):
            continue
        if line.startswith(".SH"):
            current = line[3:].strip().strip('"').upper()
            sections.setdefault(current, [])
        elif current is not None:
            sections[current].append(_line_text(line))
    name = _SPACES.sub(" ", " ".join(sections.get("NAME", []))).strip()
    body = _SPACES.sub(" ", " ".join(sections.get("DESCRIPTION", []))).strip()
    if " - " not in name or not body:
        return None
    return name.split(" - ", 1)[1].strip(), body


def manpage_entries(packages: tuple[str, ...] = PACKAGES) -> list[tuple[str, str]]:
    """(description, body) of every readable page the packages installed, in path order."""
    try:
        listing = subprocess.run(["dpkg", "-L", *packages], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        raise ManPagesMissing(f"manual pages not installed ({PACKAGE_HINT}): {error}") from error
    paths = sorted({line for line in listing.splitlines() if _PAGE.match(line) and Path(line).is_file()})
    if not paths:
        raise ManPagesMissing(f"no manual pages found ({PACKAGE_HINT})")
    return [page for page in (read_page(Path(path)) for path in paths) if page is not None]


def known_item_set(entries: list[tuple[str, str]], n_documents: int, n_queries: int, *, seed: int = 0,
                   min_words: int = 3, max_chars: int = 2000) -> KnownItemSet:
    """`n_queries` NAME-line queries over `n_documents` page bodies (the queries' pages plus random
    distractors), bodies cut at `max_chars`."""
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    for description, _ in entries:
        counts[description.lower()] = counts.get(description.lower(), 0) + 1
    usable = [i for i, (description, body) in enumerate(entries)
              if counts[description.lower()] == 1 and len(description.split()) >= min_words and len(body.split()) >= 10]
    chosen, picked, position = pick_known_items(rng, usable, list(range(len(entries))), n_queries=n_queries,
                                                n_documents=n_documents)
    return KnownItemSet(name="manpages", documents=[entries[i][1][:max_chars] for i in picked],
                        queries=[entries[i][0] for i in chosen], relevant=[position[i] for i in chosen])
