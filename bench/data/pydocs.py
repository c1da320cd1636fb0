"""A known-item set from the Python standard library's own documentation (its docstrings).

Document: one public function's, class's or method's docstring without its summary line, headed
by its qualified name ("json.dumps: Serialize ``obj`` ... "). Query: the summary line (the
docstring's first sentence: "Serialize obj to a JSON formatted str."). Exactly one document is
relevant. Objects whose summary is shared, or whose remaining text is shorter than `min_words`,
do not become queries; every object with a remaining text can be a distractor. The running
interpreter's standard library is read (its version is printed by the bench with the set).
"""

from __future__ import annotations

import importlib
import inspect
import random
import re
import sys
import warnings

from bench.data.glossaries import KnownItemSet, pick_known_items

# Modules that act when imported (a browser, a print), GUI and test packages, platform-only ones.
_SKIPPED = (
    "antigravity",
    "this",
    "idlelib",
    "tkinter",
    "turtle",
    "turtledemo",
    "test",
    "lib2to3",
    "pydoc_data",
    "ensurepip",
    "venv",
    "msilib",
    "winreg",
    "winsound",
    "nt",
    "msvcrt",
    "_winapi",
    "__main__",
    "__future__",
    "xxsubtype",
    "xxlimited",
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
_SPACES = re.compile(r"\s+")
_SIGNATURE = re.compile(r"^[\w.]+\(.*\)")  # a C function's first line: "recv(bufsize) -> data"


def _modules() -> list[str]:
    names = sorted(name for name in sys.stdlib_module_names
                   if not name.startswith("_") and name.split(".")[0] not in _SKIPPED)
    loaded = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in names:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a module this platform cannot import is skipped
                continue
            loaded.append(name)
    return loaded


def _members(module_name: str) -> list[tuple[str, object]]:
    """(qualified name, object) of a module's public functions and classes defined in it, and
    of those classes' public methods, sorted by name."""
    module = sys.modules[module_name]
    found = []
    for name, value in sorted(vars(module).items()):
        if name.startswith("_") or getattr(value, "__module__", None) != module_name:
            continue
        if inspect.isfunction(value) or inspect.isbuiltin(value):
            found.append((f"{module_name}.{name}", value))
        elif inspect.isclass(value):
            found.append((f"{module_name}.{name}", value))
            for method, member in sorted(vars(value).items()):
                if not method.startswith("_") and (
                    inspect.isfunction(member) or inspect.ismethoddescriptor(member)
                ):
                    found.append((f"{module_name}.{name}.{method}", member))
    return found


def _split(doc: str) -> tuple[str, str]:
    """(summary sentence, rest) of a docstring: the first sentence of its first paragraph, and
    everything after that sentence."""
    paragraph, _, after = doc.strip().partition("\n\n")
    paragraph = _SPACES.sub(" ", paragraph).strip()
    parts = _SENTENCE_END.split(paragraph, maxsplit=1)
    summary = parts[0].strip()
    rest = " ".join([parts[1] if len(parts) > 1 else "", _SPACES.sub(" ", after)]).strip()
    return summary, rest


def pydoc_entries() -> list[tuple[str, str, str]]:
    """(qualified name, summary, rest) of every documented public object of the standard library."""
    entries = []
    seen: set[int] = set()
    for module_name in _modules():
        for qualified, value in _members(module_name):
            if id(value) in seen:
                continue
            seen.add(id(value))
            doc = inspect.getdoc(value)
            if not doc or (inspect.isclass(value) and doc == inspect.getdoc(object)):
                continue
            summary, rest = _split(doc)
            if summary and rest:
                entries.append((qualified, summary, rest))
    return entries


def known_item_set(entries: list[tuple[str, str, str]], n_documents: int, n_queries: int, *, seed: int = 0,
                   min_words: int = 10, max_chars: int = 2000) -> KnownItemSet:
    """`n_queries` summary-line queries over `n_documents` docstrings (the queries' objects plus
    random distractors), texts cut at `max_chars`."""
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    for _, summary, _ in entries:
        counts[summary.lower()] = counts.get(summary.lower(), 0) + 1
    usable = [
        i
        for i, (_, summary, rest) in enumerate(entries)
        if counts[summary.lower()] == 1
        and len(summary.split()) >= 3
        and not _SIGNATURE.match(summary)
        and len(rest.split()) >= min_words
    ]
    chosen, picked, position = pick_known_items(rng, usable, list(range(len(entries))), n_queries=n_queries,
                                                n_documents=n_documents)
    documents = [f"{entries[i][0]}: {entries[i][2]}"[:max_chars] for i in picked]
    return KnownItemSet(name="pydocs", documents=documents, queries=[entries[i][1] for i in chosen],
                        relevant=[position[i] for i in chosen])
