"""A large real-text corpus from Debian-packaged text, as dataset files the portal's build reads.

Sources (install: `apt-get install wordnet-base dict-gcide jargon-text python3-doc perl-doc
linux-doc-6.1 postgresql-doc-15 manpages manpages-dev`):

* dictionaries, one memory per entry (JSONL records, as a structured upload): GCIDE entries
  ("headword: definition"), WordNet 3.0 glosses ("lemma, lemma: gloss"), Jargon File entries;
* manuals, cut by the build into 256-token windows like any uploaded text file: the Python 3
  documentation (its reST sources), Perl's pod pages, the Linux kernel documentation (reST), the
  PostgreSQL 15 manual (HTML, as `engine.markup` reads it), the English manual pages (roff with the
  requests stripped; `google-cloud-cli`'s reference pages among them), the GNU info manuals, and
  the change logs in /usr/share/doc.

Queries are real questions about entries: "What is <headword>?" for dictionary headwords (GCIDE,
WordNet, Jargon File) and "What does the <name> command do?" for manual pages, sampled with a seed.
Nothing is copied or rotated: every memory is distinct real text.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.data.glossaries import gcide_entries, jargon_entries
from bench.data.wordnet import read_synsets
from engine.markup import html_text

PYTHON_DOCS = Path("/usr/share/doc/python3.11/html/_sources")
PERL_POD = Path("/usr/share/perl")
KERNEL_DOCS = Path("/usr/share/doc/linux-doc-6.1/Documentation")
POSTGRES_DOCS = Path("/usr/share/doc/postgresql-doc-15/html")
MAN_PAGES = Path("/usr/share/man")
INFO_PAGES = Path("/usr/share/info")
PACKAGE_DOCS = Path("/usr/share/doc")
# The Debian package each manual source is read from (a source with no text names its package).
PACKAGES = {"python-docs": "python3-doc", "perl-pod": "perl-doc", "kernel-docs": "linux-doc-6.1",
            "postgres-docs": "postgresql-doc-15", "man-pages": "manpages manpages-dev",
            "info-pages": "(a package with GNU info manuals)", "changelogs": "(any package's changelog)"}
# Manual sections read, English pages only (the translations live in per-language folders).
_MAN_SECTIONS = ("man1", "man2", "man3", "man4", "man5", "man7", "man8")
_ROFF_FONT = re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)")
_ROFF_ESCAPE = re.compile(r"\\(?:\(..|\[[^\]]*\]|[-&e|^0 ])")
_POD_CODE = re.compile(r"[BCIFLSXE]<+([^<>]*)>+")
_SPACES = re.compile(r"[ \t]+")
# Info files mark nodes with NUL/backspace/unit-separator bytes; a text dataset holds none.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class RealCorpus:
    datasets: list[tuple[str, Path]]  # (name, dataset file) in source order
    questions: list[str]


def _dictionary_records() -> Iterator[tuple[str, str, str]]:
    """(source, headword, text) of every dictionary entry worth a memory (text of >= 4 words)."""
    for headword, definition in gcide_entries():
        if len(definition.split()) >= 4:
            yield "gcide", headword, f"{headword}: {definition}"
    for synset in read_synsets():
        lemmas = [lemma.replace("_", " ") for lemma in synset.lemmas]
        yield "wordnet", lemmas[0], f"{', '.join(lemmas)}: {synset.gloss}"
    for term, text in jargon_entries():
        if len(text.split()) >= 4:
            yield "jargon", term, f"{term}: {text}"


def _roff_text(source: str) -> str:
    """Readable text of a manual page: requests dropped (their arguments kept for headings and
    tagged paragraphs), font changes and escapes removed."""
    lines = []
    for line in source.splitlines():
        if line.startswith(("'", '.\\"', "'\\\"")):
            continue
        if line.startswith("."):
            request, _, rest = line[1:].partition(" ")
            if request in (
                "SH",
                "SS",
                "B",
                "I",
                "BR",
                "IR",
                "BI",
                "RB",
                "RI",
                "IB",
                "TP",
                "IP",
                "Nm",
                "Nd",
                "Sh",
            ):
                line = rest.replace('"', "")
            else:
                continue
        line = _ROFF_ESCAPE.sub(lambda m: "-" if m.group(0) == "\\-" else " ", _ROFF_FONT.sub("", line))
        lines.append(_SPACES.sub(" ", line).strip())
    return "\n".join(lines)


def _pod_text(source: str) -> str:
    lines = []
    for line in source.splitlines():
        if line.startswith("="):
            command, _, rest = line[1:].partition(" ")
            if command in ("cut", "pod", "begin", "end", "for", "over", "back", "encoding"):
                continue
            line = rest
        lines.append(_POD_CODE.sub(r"\1", line))
    return "\n".join(lines)


def _read_gz(path: Path) -> str:
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
        return handle.read()


def _manual_pages() -> Iterator[tuple[str, str]]:
    for section in _MAN_SECTIONS:
        for path in sorted((MAN_PAGES / section).glob("*.gz")):
            try:
                with gzip.open(path, "rt", encoding="utf-8") as handle:
                    source = handle.read()
            except (OSError, UnicodeDecodeError):
                continue
            if source.startswith(".so "):
                continue  # an alias of another page
            yield path.name.split(".")[0], _roff_text(source)


def _manual_texts(limit_chars: dict[str, int]) -> Iterator[tuple[str, str]]:
    """(source, text) of manual pages, each source stopping after `limit_chars[source]` characters."""
    budgets = dict(limit_chars)

    def take(source: str, texts: Iterator[str]) -> Iterator[tuple[str, str]]:
        for text in texts:
            if budgets[source] <= 0:
                return
            budgets[source] -= len(text)
            yield source, text

    yield from take("python-docs", (p.read_text(encoding="utf-8", errors="replace")
                                    for p in sorted(PYTHON_DOCS.rglob("*.rst.txt"))))
    yield from take("perl-pod", (_pod_text(p.read_text(encoding="utf-8", errors="replace"))
                                 for p in sorted(PERL_POD.rglob("*.pod"))))
    yield from take("kernel-docs", (_read_gz(p) for p in sorted(KERNEL_DOCS.rglob("*.rst.gz"))))
    yield from take("postgres-docs", ("".join(html_text([p.read_text(encoding="utf-8", errors="replace")]))
                                      for p in sorted(POSTGRES_DOCS.glob("*.html"))))
    yield from take("man-pages", (text for _, text in _manual_pages()))
    # GNU info manuals (the Python one repeats python-docs) and the packages' change logs.
    yield from take("info-pages", (_read_gz(p) for p in sorted(INFO_PAGES.glob("*.gz"))
                                   if not p.name.startswith("python")))
    yield from take("changelogs", (_read_gz(p) for p in sorted(PACKAGE_DOCS.glob("*/changelog*.gz"))))


def write_real_corpus(directory: Path, *, manual_chars: int, queries: int, seed: int = 0) -> RealCorpus:
    """Write the dataset files into `directory` (once; reused when present) and return them with
    `queries` seeded questions. `manual_chars` bounds each manual source's text."""
    directory.mkdir(parents=True, exist_ok=True)
    dictionary = directory / "dictionaries.jsonl"
    headwords: dict[str, list[str]] = {"gcide": [], "wordnet": [], "jargon": []}
    seen: set[str] = set()
    records = []
    for source, headword, text in _dictionary_records():
        if text in seen:
            continue
        seen.add(text)
        headwords[source].append(headword)
        records.append(json.dumps({"text": text, "source": source}) + "\n")
    if not dictionary.exists():
        dictionary.with_suffix(".tmp").write_text("".join(records), encoding="utf-8")
        dictionary.with_suffix(".tmp").rename(dictionary)
    datasets = [("dictionaries", dictionary)]
    limits = {
        name: manual_chars
        for name in (
            "python-docs",
            "perl-pod",
            "kernel-docs",
            "postgres-docs",
            "man-pages",
            "info-pages",
            "changelogs",
        )
    }
    manual_paths = {name: directory / f"{name}.txt" for name in limits}
    if not all(path.exists() for path in manual_paths.values()):
        with contextlib.ExitStack() as stack:
            handles = {name: stack.enter_context(open(path.with_suffix(".tmp"), "w", encoding="utf-8"))
                       for name, path in manual_paths.items()}
            for source, text in _manual_texts(limits):
                handles[source].write(_CONTROL.sub(" ", text).strip() + "\n\n")
        empty = [name for name, path in manual_paths.items() if path.with_suffix(".tmp").stat().st_size == 0]
        if empty:
            for path in manual_paths.values():
                path.with_suffix(".tmp").unlink()
            raise SystemExit(
                f"no text found for {', '.join(empty)}: install "
                f"{' '.join(PACKAGES.get(name, name) for name in empty)} (see this module's docstring)"
            )
        for path in manual_paths.values():
            path.with_suffix(".tmp").rename(path)
    datasets += list(manual_paths.items())
    rng = random.Random(seed)
    # gcloud's thousands of generated reference pages are in the corpus, but not asked about.
    commands = sorted({path.name.split(".")[0] for path in (MAN_PAGES / "man1").glob("*.gz")
                       if not path.name.startswith("gcloud")})
    pools = [("What is {}?", headwords["gcide"]), ("What is {}?", headwords["wordnet"]),
             ("What is {}?", headwords["jargon"]), ("What does the {} command do?", commands)]
    questions = []
    for number in range(queries):
        template, pool = pools[number % len(pools)]
        questions.append(template.format(rng.choice(pool)))
    return RealCorpus(datasets, questions)
