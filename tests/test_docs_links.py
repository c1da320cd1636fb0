"""The README stays one page and every link in it and in docs/ leads somewhere.

The README holds what a new user needs (what the portal is, the run and test commands, first
steps) and an index of docs/; everything else lives in docs/. These checks keep that true as
docs are added: a docs page the index does not list, a link to a file or heading that is gone,
or a README that grows back past one page fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 200
README_MAX_LINE_CHARS = 300

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def prose(text: str) -> str:
    """`text` without fenced code blocks and code spans, where brackets are not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(path: Path) -> list[str]:
    return LINK.findall(prose(path.read_text(encoding="utf-8")))


def relative_links(path: Path) -> list[str]:
    return [target for target in links(path) if not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE)]


def heading_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    seen: dict[str, int] = {}
    found = set(EXPLICIT_ANCHOR.findall(text))
    for heading in HEADING.findall(FENCE.sub("", text)):
        slug = heading_slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def test_heading_slug_follows_github() -> None:
    assert heading_slug("One machine: `./portal run`") == "one-machine-portal-run"
    assert heading_slug("REST API and chat websocket") == "rest-api-and-chat-websocket"
    assert heading_slug("Answers, measured") == "answers-measured"
    assert heading_slug("5. The exact-word channel against bm25s (issue 30.11)") == \
        "5-the-exact-word-channel-against-bm25s-issue-3011"


def test_link_finder_skips_code() -> None:
    text = "[a](one.md) `[b](two.md)`\n```\n[c](three.md)\n```\n![d](four.png \"title\")\n"
    assert LINK.findall(prose(text)) == ["one.md", "four.png"]


def test_readme_is_one_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"
    long = [number for number, line in enumerate(lines, 1) if len(line) > README_MAX_LINE_CHARS]
    assert not long, f"README.md lines over {README_MAX_LINE_CHARS} characters: {long}"


def test_readme_keeps_its_two_commands() -> None:
    """The run and test commands are what CI and the portal script say they are."""
    readme = README.read_text(encoding="utf-8")
    assert "```bash\n./portal run\n```" in readme
    assert "```bash\n./portal test\n```" in readme
    portal = (ROOT / "portal").read_text(encoding="utf-8")
    assert re.search(r"^\s+run\) shift; run ", portal, re.MULTILINE)
    assert re.search(r"^\s+test\)$", portal, re.MULTILINE)
    assert (ROOT / ".ci" / "run").read_text(encoding="utf-8").rstrip().endswith("exec ./portal test -q")


def test_readme_shows_the_chat_picture() -> None:
    assert "docs/portal-chat.png" in [target for target in links(README)]
    assert (DOCS / "portal-chat.png").is_file()


@pytest.mark.parametrize("path", markdown_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    """Every relative link names an existing file, and its #anchor a heading of that file."""
    broken = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(ROOT)}")
    assert not broken, f"{path.relative_to(ROOT)}: " + "; ".join(broken)


def test_every_doc_is_in_the_readme_index() -> None:
    listed = {(ROOT / target.partition("#")[0]).resolve() for target in relative_links(README)}
    missing = [doc.name for doc in sorted(DOCS.glob("*.md")) if doc.resolve() not in listed]
    assert not missing, f"docs not linked from README.md's index: {missing}"
