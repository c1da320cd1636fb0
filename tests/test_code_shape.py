"""The product code keeps the shape STYLE.md asks for.

Functions and methods stay under 60 lines (from ``def`` to the last line of the
body), modules under 500 lines, and comments say why rather than when: no
issue numbers, no dated measurements, and no ``# noqa: ANN…`` (ruff does not
run the ANN rules here, see pyproject.toml, so such a noqa silences nothing).
Migrations, tests, bench and scripts are not product code.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT_PACKAGES = ("accounts", "api", "chat", "core", "corpus", "engine", "hdrag_site", "memory")
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 500

# "#12" counts as an issue only where it reads like one ("see #12", "(#12)"): a build's
# number ("build #1") or a colour ("#fff") is not a citation.
ISSUE_CITATION = re.compile(
    r"\bissues?\s*#?\d+|\b(?:PR|pull|see|fixes|closes|per)\s+#\d+|\(#\d+[,)]", re.IGNORECASE
)
DATED_MEASUREMENT = re.compile(
    r"\b(measured|benchmarked|timed)\b.*\b(\d{4}-\d{2}-\d{2}|today|yesterday|this morning)\b"
    r"|\b\d{4}-\d{2}-\d{2}\b.*\b\d+(\.\d+)?\s*(s|ms|searches/s|tok/s|MiB|GiB|%)\b"
    r"|\b\d+(\.\d+)?\s*(searches|requests|tokens|queries)/s\b",
    re.IGNORECASE,
)
DEAD_NOQA = re.compile(r"#\s*noqa:\s*[^#]*\bANN\d*", re.IGNORECASE)


def product_modules() -> list[Path]:
    paths = []
    for package in PRODUCT_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.relative_to(ROOT).parts:
                paths.append(path)
    return paths


def long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}() is {lines} lines")
    return found


def comments_and_docstrings(source: str) -> list[tuple[int, str]]:
    """Each comment and each docstring line, with its line number."""
    texts = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                doc = body[0].value.value
                if isinstance(doc, str):
                    texts += [(body[0].lineno + i, line) for i, line in enumerate(doc.splitlines())]
    return sorted(texts)


def bad_comments(path: Path) -> list[str]:
    found = []
    for line, text in comments_and_docstrings(path.read_text(encoding="utf-8")):
        where = f"{path.relative_to(ROOT)}:{line}"
        if DEAD_NOQA.search(text):
            found.append(f"{where} dead noqa: {text.strip()}")
        elif ISSUE_CITATION.search(text):
            found.append(f"{where} cites an issue: {text.strip()}")
        elif DATED_MEASUREMENT.search(text):
            found.append(f"{where} a day's measurement: {text.strip()}")
    return found


def test_the_walk_finds_the_product_code() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in product_modules()}
    assert "engine/__init__.py" in names
    assert not any("/migrations/" in name for name in names)


def test_the_checks_catch_what_they_look_for(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    sample.write_text(
        "def long() -> None:\n" + body + "\n"
        "# see issue 26\n"
        "x = 1  # noqa: ANN001\n"
        "# 51.6 searches/s on the laptop\n"
        "# a colour like #fff is fine, build #1 too, and so is a plain note\n"
        'def f() -> None:\n    """Fixed in issue 28."""\n',
        encoding="utf-8",
    )
    global ROOT
    root, ROOT = ROOT, tmp_path
    try:
        assert len(long_functions(sample)) == 1
        assert long_functions(sample)[0].endswith(f"long() is {MAX_FUNCTION_LINES + 1} lines")
        kinds = [line.split(" ", 1)[1] for line in bad_comments(sample)]
    finally:
        ROOT = root
    assert [kind.split(":")[0] for kind in kinds] == [
        "cites an issue",
        "dead noqa",
        "a day's measurement",
        "cites an issue",
    ]


def test_functions_stay_under_60_lines() -> None:
    offenders = [line for path in product_modules() for line in long_functions(path)]
    assert not offenders, "\n".join(offenders)


def test_modules_stay_under_500_lines() -> None:
    offenders = []
    for path in product_modules():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            offenders.append(f"{path.relative_to(ROOT)} is {lines} lines")
    assert not offenders, "\n".join(offenders)


def test_comments_say_why_not_history() -> None:
    offenders = [line for path in product_modules() for line in bad_comments(path)]
    assert not offenders, "\n".join(offenders)
