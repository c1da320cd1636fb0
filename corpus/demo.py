"""The demo corpus: texts every Python install ships, written as JSONL datasets.

* `pydoc_data.topics`: the language reference topics behind `help("FOR")` etc. (one record per topic);
* docstrings of standard-library modules and their public classes and functions (one per object);
  where a public class or function has no docstring (csv.DictReader, say), the first lines of its
  source, which every install ships too and which says what it does.
"""

from __future__ import annotations

import importlib
import inspect
import json
import warnings
from collections.abc import Iterator, Sequence
from itertools import islice
from pathlib import Path

STDLIB_MODULES = [
    "abc",
    "argparse",
    "array",
    "asyncio",
    "base64",
    "bisect",
    "builtins",
    "bz2",
    "calendar",
    "cmath",
    "collections",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "enum",
    "fractions",
    "functools",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "http.client",
    "inspect",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "logging",
    "math",
    "mimetypes",
    "operator",
    "os",
    "pathlib",
    "pickle",
    "pprint",
    "queue",
    "random",
    "re",
    "secrets",
    "shlex",
    "shutil",
    "socket",
    "sqlite3",
    "statistics",
    "string",
    "struct",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "time",
    "timeit",
    "tokenize",
    "typing",
    "unicodedata",
    "unittest",
    "urllib.parse",
    "uuid",
    "warnings",
    "weakref",
    "zipfile",
    "zlib",
]


SOURCE_PIECES = 2
MAX_CHARS = 800  # about 180 tokens: a chat budget of 512 tokens holds about three


def _pieces(text: str, max_chars: int = MAX_CHARS) -> Iterator[str]:
    """Paragraph-aligned pieces of at most about `max_chars`, so one memory is one idea, not a chapter."""
    piece: list[str] = []
    size = 0
    for paragraph in text.split("\n\n"):
        if piece and size + len(paragraph) > max_chars:
            yield "\n\n".join(piece)
            piece, size = [], 0
        piece.append(paragraph)
        size += len(paragraph) + 2
    if piece:
        yield "\n\n".join(piece)


def pydoc_topics() -> Iterator[dict]:
    from pydoc_data.topics import topics

    for name in sorted(topics):
        for number, text in enumerate(_pieces(topics[name].strip())):
            if text.strip():
                yield {"title": f"Python language reference: {name} ({number + 1})", "text": text}


def stdlib_docstrings(modules: Sequence[str] = tuple(STDLIB_MODULES), min_chars: int = 80) -> Iterator[dict]:
    for module_name in modules:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
        doc = inspect.getdoc(module)
        if doc and len(doc) >= min_chars:
            for text in _pieces(doc):
                yield {"title": f"module {module_name}", "text": text}
        for name, value in sorted(vars(module).items()):
            if name.startswith("_") or getattr(value, "__module__", None) != module.__name__:
                continue
            if not (inspect.isclass(value) or inspect.isfunction(value) or inspect.isbuiltin(value)):
                continue
            doc = inspect.getdoc(value)
            if doc and len(doc) >= min_chars:
                for text in _pieces(doc):
                    yield {"title": f"{module_name}.{name}", "text": f"{module_name}.{name}\n\n{text}"}
            elif (source := _source(value)) is not None:
                for text in islice(_pieces(source), SOURCE_PIECES):
                    yield {"title": f"{module_name}.{name} (source)",
                           "text": f"{module_name}.{name} (source code)\n\n{text}"}


def _source(value: object) -> str | None:
    try:
        return inspect.getsource(value)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return None  # built in C, or no source file installed


def write_jsonl(records: Iterator[dict], path: Path) -> int:
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count
