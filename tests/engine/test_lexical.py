"""The exact-word channel (`engine.lexical`): its words, BM25 against a hand-computed reference,
rows and texts scored alike, the file round trip, and a damaged file refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.channels import best_rows, rows_of
from engine.lexical import K1, WORDS_FILE, B, WordIndex, WordIndexError, words

DOCS = [
    "random.shuffle shuffles a list in place.",
    "The list type is a mutable sequence; a list can grow.",
    "json.dumps serialises an object; with ensure_ascii false, non-ASCII characters pass through.",
    "",
]


def reference_bm25(query: str, docs: list[str], row: int) -> float:
    """Okapi BM25 written out term by term, from the texts alone."""
    bags = [words(d) for d in docs]
    average = sum(len(b) for b in bags) / len(bags)
    total = 0.0
    for word in set(words(query)):
        frequency = sum(word in b for b in bags)
        if not frequency:
            continue
        idf = math.log(1 + (len(docs) - frequency + 0.5) / (frequency + 0.5))
        count = bags[row].count(word)
        total += idf * count * (K1 + 1) / (count + K1 * (1 - B + B * len(bags[row]) / average))
    return total


def test_words_are_lowercased_runs_of_two_word_characters_without_stop_words():
    assert words("What does random.shuffle do to a List?") == ["random", "shuffle", "list"]
    assert words("ensure_ascii is False") == ["ensure_ascii", "false"]
    assert words("a I of") == []


def test_scores_match_okapi_bm25_written_out():
    index = WordIndex.build(DOCS)
    for query in ("shuffle a list", "list list sequence", "ensure_ascii json non-ASCII"):
        got = index.score_rows(query, np.arange(len(DOCS)))
        assert got == pytest.approx([reference_bm25(query, DOCS, row) for row in range(len(DOCS))], rel=1e-6)


def test_a_rare_word_outranks_a_frequent_one():
    index = WordIndex.build(DOCS)
    scores = index.score_rows("shuffle list", np.arange(len(DOCS)))
    # "list" is in two rows (the second has it three times), "shuffle" only in the first.
    assert int(np.argmax(scores)) == 0 and scores[1] > 0 and scores[2] == 0


def test_a_query_without_indexed_words_and_rows_outside_score_nan():
    index = WordIndex.build(DOCS)
    assert np.isnan(index.score_rows("what is it?", [0, 1])).all()
    assert np.isnan(index.score_rows("zebra", [0])).all()
    assert index.score_all("zebra") is None
    got = index.score_rows("list", [1, -1, 99])
    assert got[0] > 0 and np.isnan(got[1:]).all()
    assert np.isnan(index.score_texts("zebra", ["a zebra"])).all()


def test_a_text_scores_as_the_same_text_indexed():
    index = WordIndex.build(DOCS)
    query = "ensure_ascii json list"
    assert index.score_texts(query, DOCS) == pytest.approx(
        index.score_rows(query, np.arange(len(DOCS))), rel=1e-9
    )


def test_the_file_round_trip_keeps_every_score(tmp_path):
    index = WordIndex.build(DOCS)
    index.save(tmp_path / WORDS_FILE)
    loaded = WordIndex.for_build(tmp_path)
    assert loaded is not None and loaded.count == len(DOCS)
    query = "list shuffle ensure_ascii"
    assert loaded.score_rows(query, np.arange(len(DOCS))) == pytest.approx(
        index.score_rows(query, np.arange(len(DOCS))), rel=1e-12)
    assert WordIndex.for_build(tmp_path / "elsewhere") is None


def test_an_empty_corpus_builds_an_index_that_scores_nothing():
    index = WordIndex.build([])
    assert index.count == 0 and index.score_all("list") is None


def test_a_damaged_file_is_refused_with_its_path(tmp_path):
    path = tmp_path / WORDS_FILE
    WordIndex.build(DOCS).save(path)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(WordIndexError, match="not a readable word index"):
        WordIndex.load(path)
    with open(tmp_path / "other.npz", "wb") as handle:
        # Two words but the starts of one: inconsistent.
        np.savez(handle, vocabulary=np.frombuffer(b"ab\ncd", dtype=np.uint8), starts=np.array([0, 1]),
                 rows=np.array([0]), counts=np.array([1]), lengths=np.array([1]))
    with pytest.raises(WordIndexError, match="inconsistent"):
        WordIndex.load(tmp_path / "other.npz")


def test_best_rows_are_the_highest_scores_above_zero_best_first_within_the_filter():
    scores = np.array([0.0, 2.0, 5.0, 2.0, -1.0, 7.0, 0.5])
    assert best_rows(scores, 3).tolist() == [5, 2, 1]  # ties: the lower row first
    assert best_rows(scores, 10).tolist() == [5, 2, 1, 3, 6]  # never a row scoring 0 or less
    assert best_rows(scores, 2, keep=lambda rows: rows % 2 == 1).tolist() == [5, 1]
    assert best_rows(None, 3).size == 0 and best_rows(scores, 0).size == 0
    # The filter drops every one of the best few: the rest are asked.
    many = np.arange(1.0, 101.0)
    assert best_rows(many, 2, keep=lambda rows: rows < 10).tolist() == [9, 8]
    index = WordIndex.build(DOCS)
    assert best_rows(index.score_all("shuffle list"), 2).tolist() == [0, 1]
    assert np.isnan(rows_of(None, [0, 1])).all()
    assert rows_of(scores, [2, 7, -1])[0] == 5.0 and np.isnan(rows_of(scores, [2, 7, -1])[1:]).all()
