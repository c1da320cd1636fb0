"""An exact-word channel beside HDC: BM25 over a build's words, to re-score HDC's candidates.

HDC ranks by the model's token embeddings, bound into n-grams: it finds paraphrases, but a query
naming a rare word ("random.shuffle", "ensure_ascii", a Jargon File headword) can see the memory
that holds that word ranked below memories that merely sound alike. A lexical channel fixes
exactly that. On six known-item sets of real text (docs/engine-v2-measurements.md, section 3),
HDC fused with this channel under each set's own gate is at least as good as the better of the two
alone, and at least BM25, on five; over the GGUF's subword tokens such a channel was not, so this
one counts words.

Words: runs of two or more word characters, lowercased (`words`), without English stop words;
no stemming. BM25 with k1 = 1.5 and b = 0.75 (Robertson's; idf ln(1 + (N - df + 0.5) / (df + 0.5)),
never negative). The index is a word-major sparse table (`WORDS_FILE` in the build directory): per
word, the rows that hold it and how often; scoring a query reads only its words' lists.

`WordIndex` is the `WORDS` channel (`engine.channels`) of the first stage: a search fuses it over
HDC's top candidates, with its own best `WORD_CANDIDATES` rows, under a rule chosen from the
build's own evidence (`engine.gate.channel_evidence`). A row without any query word scores 0; a
query without any indexed word gets nan everywhere (nothing to fuse: HDC's order stands).
"""

from __future__ import annotations

import re
import zipfile
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from engine.channels import FIRST, WORDS, Gate, RowFilter, best_rows, rows_of

WORDS_FILE = "words.npz"
# Rows the channel ranks first that join a fused target's first FUSION_DEPTH HDC candidates
# (hybrid candidates): a memory holding the rare words a question names is fused even where HDC
# did not shortlist it (the sampled search, from SAMPLED_SEARCH_MIN_ROWS rows on, ranks by a part of
# the dimensions first; a paraphrase shares few n-grams with its memory).
WORD_CANDIDATES = 50
# The rule where the self-queries show no significant gain either way: on all nine known-item sets
# of docs/retrieval-measurements.md, "z:1" ranked at or above HDC alone (MRR@10), and the
# self-queries of WordNet's one-line glosses cannot show its gain there (0.481 to 0.594 MRR@10 on
# the real queries).
WORD_FALLBACK = "z:1"
WORD_GATE = Gate(stage=FIRST, candidates=WORD_CANDIDATES, fallback=WORD_FALLBACK)
K1 = 1.5
B = 0.75

_WORD = re.compile(r"\b\w\w+\b")
# Function words that carry no topic: they would only add noise to a bag of words.
STOP_WORDS = frozenset((
    "a", "about", "above", "after", "again", "against", "all", "also", "am", "an", "and", "any", "are",
    "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can",
    "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had",
    "has", "have", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how", "i",
    "if", "in", "into", "is", "it", "its", "itself", "just", "me", "more", "most", "my", "myself", "no",
    "nor", "not", "now", "of", "off", "on", "once", "only", "or", "other", "our", "ours", "ourselves",
    "out", "over", "own", "same", "she", "should", "so", "some", "such", "than", "that", "the", "their",
    "theirs", "them", "themselves", "then", "there", "these", "they", "this", "those", "through", "to",
    "too", "under", "until", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while",
    "who", "whom", "why", "will", "with", "would", "you", "your", "yours", "yourself", "yourselves"
))


def words(text: str) -> list[str]:
    """The words of `text` the channel counts, in order (stop words left out)."""
    return [w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS]


def bm25_weights(counts: np.ndarray, lengths: np.ndarray, average_length: float) -> np.ndarray:
    """BM25's term weights (m,) float64 of term counts (m,) in documents of `lengths` (m,) words."""
    norm = K1 * (1.0 - B + B * lengths / average_length)
    return counts * (K1 + 1.0) / (counts + norm)


class WordIndexError(ValueError):
    """A words file that is missing, unreadable or inconsistent."""


class WordChannel(ABC):
    """A word index as the `WORDS` channel: one build's (`WordIndex`) or a state's segments' scored
    together (`engine.segments.SegmentedWordIndex`)."""

    name = WORDS
    file = WORDS_FILE
    gate = WORD_GATE

    @abstractmethod
    def score_all(self, query: str) -> np.ndarray | None:
        """BM25 scores (count,) float64 of every row; None for a query without an indexed word."""

    @abstractmethod
    def score_texts(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """BM25 scores (n,) float64 of texts that are not rows; nan everywhere for a query without
        an indexed word."""

    def query(self, query: str) -> WordQuery:
        return WordQuery(self, query)


class WordIndex(WordChannel):
    """BM25 over the rows of one build. Immutable and thread-safe once made."""

    def __init__(self, vocabulary: Sequence[str], starts: np.ndarray, rows: np.ndarray, counts: np.ndarray,
                 lengths: np.ndarray) -> None:
        self.vocabulary = {word: number for number, word in enumerate(vocabulary)}
        self.starts = np.asarray(starts, dtype=np.int64)
        self.rows = np.asarray(rows, dtype=np.int32)
        self.counts = np.asarray(counts, dtype=np.float32)
        self.lengths = np.asarray(lengths, dtype=np.float32)
        if self.starts.shape != (len(self.vocabulary) + 1,) or self.starts[-1] != self.rows.size \
                or self.rows.shape != self.counts.shape:
            raise WordIndexError("inconsistent word index: word starts, rows and counts disagree")
        self.count = int(self.lengths.size)
        # Summed in float64, as `engine.segments.SegmentedWordIndex` sums several indexes' lengths.
        total = float(self.lengths.astype(np.float64).sum())
        self.average_length = total / self.count if self.count and total else 1.0
        frequency = np.diff(self.starts).astype(np.float64)
        self.idf = np.log1p((self.count - frequency + 0.5) / (frequency + 0.5))

    @classmethod
    def build(cls, texts: Iterable[str]) -> WordIndex:
        """The index of `texts`, row i being the i-th text."""
        vocabulary: dict[str, int] = {}
        pairs: list[tuple[int, int, int]] = []  # (word, row, count)
        lengths: list[int] = []
        for row, text in enumerate(texts):
            bag = Counter(vocabulary.setdefault(w, len(vocabulary)) for w in words(text))
            pairs.extend((word, row, count) for word, count in bag.items())
            lengths.append(sum(bag.values()))
        table = np.array(pairs, dtype=np.int64).reshape(-1, 3)
        table = table[np.lexsort((table[:, 1], table[:, 0]))]
        starts = np.searchsorted(table[:, 0], np.arange(len(vocabulary) + 1))
        ordered = sorted(vocabulary, key=vocabulary.__getitem__)
        return cls(ordered, starts, table[:, 1], table[:, 2], np.array(lengths))

    def save(self, path: str | Path) -> None:
        vocabulary = sorted(self.vocabulary, key=self.vocabulary.__getitem__)
        with open(path, "wb") as handle:
            # The words as one UTF-8 text, a word per line (a fixed-width string array would take
            # four bytes per character of the longest word for every word).
            np.savez(
                handle,
                vocabulary=np.frombuffer("\n".join(vocabulary).encode("utf-8"), dtype=np.uint8),
                starts=self.starts,
                rows=self.rows,
                counts=self.counts.astype(np.uint16 if self.counts.max(initial=0) < 65536 else np.uint32),
                lengths=self.lengths.astype(np.uint32),
            )

    @classmethod
    def load(cls, path: str | Path) -> WordIndex:
        try:
            with np.load(path, allow_pickle=False) as data:
                text = data["vocabulary"].tobytes().decode("utf-8")
                return cls(text.split("\n") if text else [], data["starts"], data["rows"], data["counts"],
                           data["lengths"])
        except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:
            raise WordIndexError(f"{path}: not a readable word index ({error})") from error

    @classmethod
    def for_build(cls, build_dir: str | Path | None) -> WordIndex | None:
        """The index of a build that wrote `WORDS_FILE`; None for a build without one."""
        path = Path(build_dir) / WORDS_FILE if build_dir is not None else None
        return cls.load(path) if path is not None and path.is_file() else None

    def _query(self, query: str) -> list[int]:
        return sorted({self.vocabulary[w] for w in words(query) if w in self.vocabulary})

    def _weights(self, counts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        return bm25_weights(counts, lengths, self.average_length)

    def score_all(self, query: str) -> np.ndarray | None:
        """BM25 scores (count,) float64 of every row; None for a query without an indexed word."""
        ids = self._query(query)
        if not ids:
            return None
        scores = np.zeros(self.count)
        for word in ids:
            span = slice(self.starts[word], self.starts[word + 1])
            rows = self.rows[span]
            scores[rows] += self.idf[word] * self._weights(self.counts[span].astype(np.float64),
                                                           self.lengths[rows].astype(np.float64))
        return scores

    def score_rows(self, query: str, rows: np.ndarray | Iterable[int]) -> np.ndarray:
        """BM25 scores (m,) float64 of `rows`; nan for a row outside the index, and everywhere for a
        query without an indexed word."""
        return rows_of(self.score_all(query), rows)

    def score_texts(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """BM25 scores (n,) float64 of texts that are not rows, under this index's statistics (a
        text's words unknown to the index add nothing); nan everywhere for a query without an
        indexed word."""
        ids = self._query(query)
        out = np.full(len(texts), np.nan)
        if not ids:
            return out
        for number, text in enumerate(texts):
            bag = Counter(self.vocabulary.get(w, -1) for w in words(text))
            length = float(sum(bag.values()))
            counts = np.array([bag.get(word, 0) for word in ids], dtype=np.float64)
            out[number] = float(np.sum(self.idf[ids] * self._weights(counts, np.full(len(ids), length))))
        return out


class WordQuery:
    """A word index bound to one query (`engine.channels.ChannelQuery`): every row's BM25 scores,
    computed once, serve both the re-scoring of a search's candidates and the channel's own best rows."""

    def __init__(self, index: WordChannel, query: str) -> None:
        self._index = index
        self._query = query
        self._scores: np.ndarray | None = None
        self._scored = False

    def _all(self) -> np.ndarray | None:
        if not self._scored:
            self._scores, self._scored = self._index.score_all(self._query), True
        return self._scores

    def scores(self, rows: np.ndarray) -> np.ndarray:
        return rows_of(self._all(), rows)

    def best(self, k: int, keep: RowFilter | None = None) -> np.ndarray:
        return best_rows(self._all(), k, keep)

    def text_scores(self, texts: Sequence[str]) -> np.ndarray:
        return self._index.score_texts(self._query, texts)
