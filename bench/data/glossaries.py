"""Known-item sets from Debian-packaged glossaries: GCIDE (`dict-gcide`) and the Jargon File (`jargon-text`).

Document: one entry's text with its headword line removed. Query: "What is <headword>?". Exactly
one document is relevant. Headwords that occur more than once (or whose text is too short) do not
become queries; every entry can be a distractor. FOLDOC is deliberately not read here: it is the
independent check kept back from tuning.
"""

from __future__ import annotations

import gzip
import random
import re
from dataclasses import dataclass
from pathlib import Path

GCIDE_DIR = Path("/usr/share/dictd")
JARGON_TEXT = Path("/usr/share/doc/jargon-text/jargon.txt.gz")
PACKAGE_HINT = "sudo apt-get install dict-gcide jargon-text"
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_JARGON_HEAD = re.compile(r"^   :([^:]+):(.*)$")
_SPACES = re.compile(r"\s+")


class GlossaryMissing(FileNotFoundError):
    pass


@dataclass(frozen=True)
class KnownItemSet:
    name: str
    documents: list[str]
    queries: list[str]
    relevant: list[int]


def pick_known_items(rng: random.Random, usable: list[int], pool: list[int], *, n_queries: int,
                     n_documents: int) -> tuple[list[int], list[int], dict[int, int]]:
    """(entries that become queries, every entry kept in order, entry -> document position): the
    queries are drawn from `usable`, then distractors from `pool` up to `n_documents` in all."""
    chosen = rng.sample(usable, min(n_queries, len(usable), n_documents))
    chosen_set = set(chosen)
    pool = [i for i in pool if i not in chosen_set]
    distractors = rng.sample(pool, max(0, min(n_documents - len(chosen), len(pool))))
    picked = sorted(chosen + distractors)
    return chosen, picked, {entry: number for number, entry in enumerate(picked)}


def _dictd_number(text: str) -> int:
    value = 0
    for char in text:
        value = value * 64 + _B64.index(char)
    return value


def gcide_entries(directory: Path = GCIDE_DIR) -> list[tuple[str, str]]:
    """(headword, text) of every GCIDE entry (dictd format: an index of base64 offsets into the text)."""
    index, data = directory / "gcide.index", directory / "gcide.dict.dz"
    if not index.exists() or not data.exists():
        raise GlossaryMissing(f"{directory}: GCIDE not found ({PACKAGE_HINT})")
    with gzip.open(data) as handle:
        body = handle.read()
    entries = []
    for line in index.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) != 3 or parts[0].startswith("00-"):
            continue
        start, length = _dictd_number(parts[1]), _dictd_number(parts[2])
        text = body[start:start + length].decode("utf-8", "replace")
        # The first line repeats the headword with its pronunciation: drop it, the query names it.
        definition = _SPACES.sub(" ", text.split("\n", 1)[1] if "\n" in text else "").strip()
        entries.append((parts[0], definition.replace("[1913 Webster]", "").strip()))
    return entries


def jargon_entries(path: Path = JARGON_TEXT) -> list[tuple[str, str]]:
    """(term, text) of every Jargon File glossary entry (lines "   :term: pronunciation, pos" then the
    body)."""
    if not path.exists():
        raise GlossaryMissing(f"{path}: the Jargon File not found ({PACKAGE_HINT})")
    entries: list[tuple[str, list[str]]] = []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            head = _JARGON_HEAD.match(line.rstrip("\n"))
            if head:
                entries.append((head.group(1).strip(), []))
            elif entries and line.strip() == "Part III. Appendices":
                break
            elif entries:
                entries[-1][1].append(line.strip())
    return [(term, _SPACES.sub(" ", " ".join(body)).strip()) for term, body in entries]


def known_item_set(name: str, entries: list[tuple[str, str]], n_documents: int, n_queries: int, *,
                   seed: int = 0, min_words: int = 5, max_chars: int = 2000) -> KnownItemSet:
    """`n_queries` "What is X?" queries over `n_documents` entries (the queries' own entries
    plus random distractors), texts cut at `max_chars`."""
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    for term, _ in entries:
        counts[term.lower()] = counts.get(term.lower(), 0) + 1
    usable = [i for i, (term, text) in enumerate(entries)
              if counts[term.lower()] == 1 and len(text.split()) >= min_words]
    chosen, picked, position = pick_known_items(
        rng,
        usable,
        [i for i in range(len(entries)) if entries[i][1]],
        n_queries=n_queries,
        n_documents=n_documents,
    )
    documents = [entries[i][1][:max_chars] for i in picked]
    return KnownItemSet(name=name, documents=documents, queries=[f"What is {entries[i][0]}?" for i in chosen],
                        relevant=[position[i] for i in chosen])


def definition_set(entries: list[tuple[str, str]], synsets: list, n_documents: int, n_queries: int, *,
                   seed: int = 0, max_chars: int = 2000) -> KnownItemSet:
    """Definition as query (a reverse dictionary): the query is WordNet's definition of a word with
    the word itself removed, the one relevant document is the glossary's (GCIDE's) entry for it.

    Only one-word lemmas of exactly one WordNet synset (one sense, so the definition is the
    entry's) whose headword occurs once in the glossary become queries; entries quoting WordNet
    ("[WordNet 1.5]") are left out, so a query is never the entry's own words. `synsets` are
    `bench.data.wordnet.read_synsets()`.
    """
    senses: dict[str, int] = {}
    for synset in synsets:
        for lemma in set(synset.lemmas):
            senses[lemma.lower()] = senses.get(lemma.lower(), 0) + 1
    heads: dict[str, int] = {}
    for term, _ in entries:
        heads[term.lower()] = heads.get(term.lower(), 0) + 1
    definitions: dict[str, str] = {}
    for synset in synsets:
        definition = synset.gloss.split(";")[0].split('"')[0].strip(" ;")
        for lemma in set(synset.lemmas):
            word = lemma.lower()
            if senses[word] == 1 and heads.get(word) == 1 and word.isalpha():
                # The word and its inflections ("-s", "-ed", ...) are removed from its definition.
                kept = [w for w in definition.split() if not w.lower().strip(",.()").startswith(word)]
                if len(kept) >= 3:
                    definitions[word] = " ".join(kept)
    usable = [i for i, (term, text) in enumerate(entries)
              if term.lower() in definitions and text and "WordNet" not in text]
    rng = random.Random(seed)
    chosen, picked, position = pick_known_items(
        rng,
        usable,
        [i for i in range(len(entries)) if entries[i][1]],
        n_queries=n_queries,
        n_documents=n_documents,
    )
    return KnownItemSet(name="gcide-definitions", documents=[entries[i][1][:max_chars] for i in picked],
                        queries=[definitions[entries[i][0].lower()] for i in chosen],
                        relevant=[position[i] for i in chosen])
