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
# The project's packages: a code span naming `corpus/quotas.py` or `chat.preparation.turn_prepare`
# must name something that exists, so a module that moves takes its docs along.
PACKAGES = (
    "accounts",
    "api",
    "bench",
    "chat",
    "core",
    "corpus",
    "engine",
    "hdrag_site",
    "memory",
    "scripts",
    "tests",
)
CODE_PATH = re.compile(r"(?<![\w/.-])[\w.-]+(?:/[\w.-]+)*/?")
DOTTED = re.compile(r"[a-z_]\w*(?:\.[A-Za-z_]\w*)+")
# Dotted names in the docs that are not code paths: websocket event types, model fields, a placeholder.
DATA_SUFFIX = r"\.(?:py|md|txt|npz|idx|json)$"
NOT_CODE = re.compile(r"chat\.(?:send|regenerate|stop|ready|accepted|memories|queued|delta|rewind|done|error)"
                      r"|corpus\.active_(?:build|appends)|bench\.NAME")


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


def code_path_exists(name: str) -> bool:
    """`name` as a file or folder (`corpus/quotas.py`) or as a dotted module path with an optional
    top-level name defined in that module (`chat.preparation.turn_prepare`)."""
    if "/" in name:
        return (ROOT / name).exists()
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:end])
        module = base / "__init__.py" if (base / "__init__.py").exists() else base.with_suffix(".py")
        if module.is_file():
            rest = parts[end:]
            if not rest:
                return True
            definition = (rf"^(?:async\s+)?(?:def|class)\s+{rest[0]}\b|^{rest[0]}\s*[:=]|^from .* import "
                          rf".*\b{rest[0]}\b")
            return re.search(definition, module.read_text(encoding="utf-8"), re.MULTILINE) is not None
    return False


def code_paths(path: Path) -> set[str]:
    """The project paths named in `path`'s code spans (not in its code blocks: commands and output)."""
    names = set()
    for span in re.findall(r"`([^`\n]+)`", FENCE.sub("", path.read_text(encoding="utf-8"))):
        for token in CODE_PATH.findall(span):
            token = token.rstrip(".")
            if token.split("/")[0].split(".")[0] not in PACKAGES or NOT_CODE.fullmatch(token):
                continue
            is_file_path = "/" in token and re.search(r"\.(?:py|md)$|/$", token)
            is_module_path = (
                "/" not in token and DOTTED.fullmatch(token) and not re.search(DATA_SUFFIX, token)
            )
            if is_file_path or is_module_path:
                names.add(token)
    return names


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


@pytest.mark.parametrize("path", markdown_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_named_code_paths_exist(path: Path) -> None:
    missing = sorted(name for name in code_paths(path) if not code_path_exists(name))
    assert not missing, f"{path.relative_to(ROOT)} names code that does not exist: {missing}"


def test_code_path_check_tells_real_from_gone() -> None:
    assert code_path_exists("corpus/quotas.py") and code_path_exists("engine.retrieval.SearchResult")
    assert code_path_exists("engine.lexical")
    assert not code_path_exists("engine/no_such_module.py")
    assert not code_path_exists("engine.retrieval.NoSuchThing") and not code_path_exists(
        "engine.no_such_module"
    )


def test_every_doc_is_in_the_readme_index() -> None:
    listed = {(ROOT / target.partition("#")[0]).resolve() for target in relative_links(README)}
    missing = [doc.name for doc in sorted(DOCS.glob("*.md")) if doc.resolve() not in listed]
    assert not missing, f"docs not linked from README.md's index: {missing}"
