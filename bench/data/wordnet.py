"""A known-item retrieval set built from the WordNet 3.0 database (Debian package `wordnet-base`).

Document: one synset's gloss (its definition and usage examples), without its lemmas.
Query: the synset's lemmas (synonyms), plus the first lemma of its first hypernym when it has one
("foray raid maraud attack" -> "a sudden short attack"). Exactly one document is relevant: the
synset the query was made from. The query is never cut out of the document, so a hit needs the
lemmas to occur in the examples or the hypernym in the definition (lexical), or meaning (semantic).

Only synsets whose query string and gloss are both unique become queries; any synset can be a
distractor document.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

WORDNET_DIR = Path("/usr/share/wordnet")
PACKAGE_HINT = "sudo apt-get install wordnet-base   # WordNet 3.0 database in /usr/share/wordnet"
_PARTS_OF_SPEECH = ("noun", "verb", "adj", "adv")
_ADJECTIVE_MARKER = re.compile(r"\((?:a|p|ip)\)$")


class WordNetMissing(FileNotFoundError):
    pass


@dataclass(frozen=True)
class Synset:
    key: str  # "<pos>:<offset>", unique across the database
    lemmas: tuple[str, ...]
    hypernyms: tuple[str, ...]  # keys of the "@" / "@i" pointer targets
    gloss: str


@dataclass(frozen=True)
class KnownItemSet:
    documents: list[str]
    queries: list[str]
    relevant: list[int]  # relevant[q] = index in `documents` of the one document relevant to query q


def _lemma(word: str) -> str:
    return _ADJECTIVE_MARKER.sub("", word).replace("_", " ")


def _key(pos: str, offset: str) -> str:
    # Satellite adjectives ("s") live in data.adj beside head adjectives ("a"): one namespace.
    return f"{'a' if pos == 's' else pos}:{offset}"


def _parse(line: str) -> Synset:
    head, _, gloss = line.partition(" | ")
    fields = head.split()
    offset, ss_type = fields[0], fields[2]
    n_words = int(fields[3], 16)
    lemmas = tuple(_lemma(fields[4 + 2 * i]) for i in range(n_words))
    at = 4 + 2 * n_words
    n_pointers = int(fields[at])
    hypernyms = []
    for i in range(n_pointers):
        symbol, target, target_pos = fields[at + 1 + 4 * i: at + 4 + 4 * i]
        if symbol in ("@", "@i"):
            hypernyms.append(_key(target_pos, target))
    return Synset(key=_key(ss_type, offset), lemmas=lemmas, hypernyms=tuple(hypernyms), gloss=gloss.strip())


def read_synsets(wordnet_dir: Path = WORDNET_DIR) -> list[Synset]:
    """Every synset of the four data files, in file order. Raises WordNetMissing with the install hint."""
    synsets = []
    for part in _PARTS_OF_SPEECH:
        path = wordnet_dir / f"data.{part}"
        if not path.is_file():
            raise WordNetMissing(f"{path} not found; install the WordNet database first:\n    {PACKAGE_HINT}")
        with open(path, encoding="utf-8", errors="strict") as handle:
            synsets.extend(_parse(line) for line in handle if not line.startswith("  "))
    return synsets


def build_known_item_set(synsets: list[Synset], n_documents: int, n_queries: int, seed: int = 0,
                         with_hypernym: bool = True) -> KnownItemSet:
    """Sample `n_queries` query synsets and fill the corpus up to `n_documents` with distractors.

    Documents are shuffled (seeded) so a document's position says nothing about its relevance.
    """
    by_key = {synset.key: synset for synset in synsets}

    def query_of(synset: Synset) -> str:
        words = list(dict.fromkeys(synset.lemmas))
        if with_hypernym and synset.hypernyms:
            hypernym = by_key[synset.hypernyms[0]].lemmas[0]
            if hypernym not in words:
                words.append(hypernym)
        return " ".join(words)

    gloss_count: dict[str, int] = {}
    query_count: dict[str, int] = {}
    for synset in synsets:
        gloss_count[synset.gloss] = gloss_count.get(synset.gloss, 0) + 1
        query_count[query_of(synset)] = query_count.get(query_of(synset), 0) + 1
    candidates = [s for s in synsets if gloss_count[s.gloss] == 1 and query_count[query_of(s)] == 1
                  and len(query_of(s).split()) >= 2]
    rng = random.Random(seed)
    n_queries = min(n_queries, len(candidates), n_documents)
    query_synsets = rng.sample(candidates, n_queries)
    chosen = {s.key for s in query_synsets}
    others = [s for s in synsets if s.key not in chosen]
    distractors = rng.sample(others, min(len(others), max(0, n_documents - n_queries)))
    corpus = query_synsets + distractors
    rng.shuffle(corpus)
    position = {synset.key: index for index, synset in enumerate(corpus)}
    return KnownItemSet(documents=[s.gloss for s in corpus], queries=[query_of(s) for s in query_synsets],
                        relevant=[position[s.key] for s in query_synsets])
