"""Paraphrase known-item sets: a definition sentence removed from its entry is the query.

Take an entry of a real reference text, remove one definition sentence from it, and ask with that
sentence: the one relevant document is the entry WITHOUT the sentence, so a ranker must find the
entry from what the rest of it says, in other words (the case a dense encoder is good at). The
entry's own headword is removed from the query as well (a definition does not name what it
defines). Every other entry of the source, whole, can be a distractor.

Sources (Debian packages the other sets already read):

* `wordnet` (`wordnet-base`): an entry is a one-word lemma with all its senses, each sense's
  definition a sentence followed by its usage examples; a removed sentence is one sense's
  definition (the lemma must have at least three senses, so that two are left);
* `jargon` (`jargon-text`): an entry of the Jargon File; a removed sentence is any sentence of 6
  to 40 words of an entry of at least three sentences;
* `gcide` (`dict-gcide`): as the Jargon File, over GCIDE's entries. Kept back as the held-out set:
  nothing in the engine is tuned on it.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from pathlib import Path

from bench.data.glossaries import KnownItemSet, gcide_entries, jargon_entries, pick_known_items
from bench.data.wordnet import read_synsets

SOURCES = ("wordnet", "jargon", "gcide")
HELD_OUT = "gcide"
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_TRAILING_NUMBER = re.compile(r"\s*\d+\.$")
_EXAMPLES = re.compile(r'"([^"]+)"')


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def _without_headword(sentence: str, headword: str) -> str:
    """The sentence without the headword's words and their inflections ("hack" drops "hacked")."""
    heads = [w for w in re.findall(r"\w+", headword.lower()) if len(w) >= 3] or [headword.lower()]
    kept = [
        w for w in sentence.split() if not any(w.lower().strip(",.;:()\"'[]").startswith(h) for h in heads)
    ]
    return _TRAILING_NUMBER.sub("", " ".join(kept)).strip()


def wordnet_entries(wordnet_dir: Path = Path("/usr/share/wordnet")) -> list[tuple[str, list[str], list[int]]]:
    """(lemma, sentences, definition positions) of every one-word WordNet lemma, all its senses."""
    senses: dict[str, list[str]] = {}
    for synset in read_synsets(wordnet_dir):
        for lemma in dict.fromkeys(synset.lemmas):
            if lemma.isalpha():
                senses.setdefault(lemma.lower(), []).append(synset.gloss)
    entries = []
    for lemma, glosses in senses.items():
        sentences, definitions = [], []
        for gloss in glosses:
            definition = gloss.split('"')[0].strip(" ;")
            if definition:
                definitions.append(len(sentences))
                sentences.append(definition[0].upper() + definition[1:] + ".")
            sentences.extend(example.strip() for example in _EXAMPLES.findall(gloss))
        entries.append((lemma, sentences, definitions))
    return entries


def text_entries(entries: Sequence[tuple[str, str]], *, min_words: int = 6, max_words: int = 40
                 ) -> list[tuple[str, list[str], list[int]]]:
    """(headword, sentences, removable positions) of glossary entries (`bench.data.glossaries`)."""
    out = []
    for headword, text in entries:
        sentences = _sentences(text)
        # A quotation or its attribution ("--Shak.") is an example, not a definition.
        removable = [i for i, s in enumerate(sentences) if min_words <= len(s.split()) <= max_words
                     and not any(mark in s for mark in ('--', '"', '\u201c'))]
        out.append((headword, sentences, removable if len(sentences) >= 3 else []))
    return out


def paraphrase_set(name: str, entries: Sequence[tuple[str, list[str], list[int]]], n_documents: int,
                   n_queries: int, *, seed: int = 0, min_rest_words: int = 12, min_query_words: int = 4,
                   max_chars: int = 2000) -> KnownItemSet:
    """`n_queries` removed sentences over `n_documents` entries (theirs, without the sentence, plus
    whole distractor entries), texts cut at `max_chars`. Entries whose headword repeats do not
    become queries (the known item would not be unique)."""
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    for headword, _, _ in entries:
        counts[headword.lower()] = counts.get(headword.lower(), 0) + 1
    removed: dict[int, tuple[str, str]] = {}
    for number, (headword, sentences, removable) in enumerate(entries):
        if counts[headword.lower()] != 1 or len(removable) < (2 if name == "wordnet" else 1):
            continue
        pick = removable[rng.randrange(len(removable))]
        query = _without_headword(sentences[pick], headword)
        rest = " ".join(s for i, s in enumerate(sentences) if i != pick)
        if len(query.split()) >= min_query_words and len(rest.split()) >= min_rest_words:
            removed[number] = (query, rest)
    pool = [i for i, (_, sentences, _) in enumerate(entries) if sentences]
    chosen, picked, position = pick_known_items(rng, sorted(removed), pool, n_queries=n_queries,
                                                n_documents=n_documents)
    chosen_set = set(chosen)
    documents = [(removed[i][1] if i in chosen_set else " ".join(entries[i][1]))[:max_chars]
                 for i in picked]
    return KnownItemSet(
        name=f"{name}-paraphrase",
        documents=documents,
        queries=[removed[i][0] for i in chosen],
        relevant=[position[i] for i in chosen],
    )


def known_item_set(source: str, n_documents: int, n_queries: int, *, seed: int = 0,
                   wordnet_dir: Path = Path("/usr/share/wordnet")) -> KnownItemSet:
    """The paraphrase set of one of `SOURCES`."""
    if source == "wordnet":
        entries = wordnet_entries(wordnet_dir)
    elif source == "jargon":
        entries = text_entries(jargon_entries())
    elif source == "gcide":
        entries = text_entries(gcide_entries())
    else:
        raise ValueError(f"unknown paraphrase source {source!r}; known: {', '.join(SOURCES)}")
    return paraphrase_set(source, entries, n_documents, n_queries, seed=seed)
