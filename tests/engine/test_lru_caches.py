"""The bounded LRU caches are cachetools' LRUCache (issue 30.11), and each keeps what was used last.

Four caches: the runtime's made-once map (core.cache.BoundedCache, behind every loaded
build, tokenizer and client), the retriever's query encodings, a vocabulary's derived rows and the
served model's token counts. Each is asked for a, b, a, c, a, b with room for two: an LRU cache
makes a, b, c and then b again (c pushed b out, a was used since); a first-in-first-out one would
make a again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from cachetools import LRUCache

from core.cache import BoundedCache
from engine import vocab as vocab_module
from engine.config import Config
from engine.llm.tokens import ServerTokenCounter
from engine.retrieval import Retriever
from engine.vocab import VocabIndex
from engine.vocab_writer import write_vocab_index

ASKED = ["a", "b", "a", "c", "a", "b"]
MADE = ["a", "b", "c", "b"]
Lookup = tuple[object, Callable[[str], object]]  # the cache's own map, and a lookup by key


def bounded_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made: list) -> Lookup:
    cache = BoundedCache(2)

    def make(key: str) -> Callable[[], str]:
        return lambda: made.append(key) or key

    return cache._items, lambda key: cache.get(key, make(key))


def retriever_encodings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made: list) -> Lookup:
    tokenizer = SimpleNamespace(tokenize=lambda text: made.append(text) or [1, 2, 3])
    encoder = SimpleNamespace(encode=lambda docs: (np.zeros((1, 2), np.uint64), np.zeros((1, 2), np.uint64)),
                              content_count=len)
    build = SimpleNamespace(key="build-1", encoder=encoder)
    retriever = Retriever(tokenizer, Config(), cache_size=2)
    return retriever._cache, lambda text: retriever.encode_text(build, text)


def _small_vocabulary(tmp_path: Path) -> VocabIndex:
    """Nine vocabulary rows of 8-dim embeddings at 64 dims, whose rows are derived (not stored)."""
    embeddings = np.random.default_rng(11).standard_normal((16, 8)).astype(np.float32)
    return write_vocab_index(tmp_path / "vocab.idx", token_ids=np.arange(3, 12), idf=np.ones(9),
                             embeddings=embeddings, dims=64, ngram=2, seed=0)


def vocabulary_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made: list) -> Lookup:
    monkeypatch.setattr(vocab_module, "CACHED_ROWS", 2)
    vocab = _small_vocabulary(tmp_path)
    names = {"a": 0, "b": 1, "c": 2}
    project = VocabIndex.project

    def recording_project(self: VocabIndex, local: np.ndarray) -> np.ndarray:
        made.extend(name for name, row in names.items() if row in set(local.tolist()))
        return project(self, local)

    monkeypatch.setattr(VocabIndex, "project", recording_project)
    return vocab._cache, lambda name: vocab.rows(np.array([names[name]]))


def token_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made: list) -> Lookup:
    counter = ServerTokenCounter("http://127.0.0.1:9", cache_size=2)  # never asked: the count is stubbed
    monkeypatch.setattr(counter, "_server_count", lambda text: made.append(text) or len(text))
    return counter._cache, counter.count_tokens


@pytest.mark.parametrize("cache", [bounded_cache, retriever_encodings, vocabulary_rows, token_counts],
                         ids=lambda cache: cache.__name__)
def test_each_bounded_cache_is_a_cachetools_lru_and_keeps_what_was_used_last(cache, tmp_path, monkeypatch):
    made: list[str] = []
    store, lookup = cache(tmp_path, monkeypatch, made)
    for key in ASKED:
        lookup(key)
    assert made == MADE
    assert isinstance(store, LRUCache), f"{type(store).__name__} is a hand-written cache, not cachetools'"


def test_a_cache_of_no_room_is_refused_when_made_not_at_its_first_insert():
    """cachetools refuses every insert into an LRUCache of size 0; a retriever or token counter
    asked for one says so when it is made, not at its first search or count."""
    with pytest.raises(ValueError, match="cache_size must be >= 1"):
        Retriever(SimpleNamespace(), Config(), cache_size=0)
    with pytest.raises(ValueError, match="cache_size must be >= 1"):
        ServerTokenCounter("http://127.0.0.1:9", cache_size=0)


def test_a_cached_vocabulary_row_holds_only_itself(tmp_path):
    """Each cached row owns its memory: a view into the batch it was derived in would keep the
    whole batch alive, so the cache would hold up to a batch per entry instead of a row."""
    vocab = _small_vocabulary(tmp_path)
    vocab.rows(np.arange(9))  # one batch of nine rows
    assert len(vocab._cache) == 9
    for row, bits in vocab._cache.values():
        assert row.base is None and bits.base is None, "a cached row is a view into its batch"
        assert row.nbytes == 64 * 2 and bits.shape[0] == 2
