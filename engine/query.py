"""What a search asks of the index: the query's text without its question template, blended with
the conversation's recent responses into one query vector.

* Query text: its question template (`QUESTION_WORDS`: "what", "is", "tell me about", ...) is
  removed before encoding (`query_terms`); it made entries containing "What" or "?" hubs.
* Blend. Responses are kept as text (newest last, at most `BlendState.max_turns`) and encoded
  with the searched corpus's encoder on use, so a state stays valid across rebuilds and corpora.
  Vote: s = w_q * q + sum_i w_i * r_i over ternary vectors, w_q = min(0.5, content/(2*ngram))
  (content = query tokens the encoder uses), response i (0 = newest) weighs 0.5^i, the response
  weights normalised to sum to 1 - w_q. The blended vector is sign(s); an exact tie (|s| < 1e-9) is 0. With no
  history the query is used as is.

The conversation's blend history is a `BlendState` the caller owns (one per conversation,
JSON-serialisable), never state of the `engine.retrieval.Retriever` or of this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from engine import bits

# The question template of a query ("What is X?", "Tell me about X"): English question and stop
# words. In a corpus where they are rare (a glossary), their IDF is high, so they dominate a short
# query and every entry that happens to contain "What" or "?" becomes a hub: on the Jargon File one
# entry sat in the top 10 of 98 % of "What is X?" questions, and removing the template lifted
# recall@10 from 0.600 to 0.665 (bench/retrieval_eval.py, "hdc-stop").
QUESTION_WORDS = frozenset(
    [
        "what",
        "who",
        "whom",
        "whose",
        "which",
        "when",
        "where",
        "why",
        "how",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "do",
        "does",
        "did",
        "the",
        "a",
        "an",
        "of",
        "to",
        "in",
        "on",
        "for",
        "and",
        "or",
        "about",
        "tell",
        "me",
        "explain",
        "define",
        "describe",
        "mean",
        "means",
        "meaning",
    ]
)
_QUERY_WORDS = re.compile(r"[\w'-]+")


def query_terms(query: str) -> str:
    """`query` without its question template (`QUESTION_WORDS`, punctuation); the query itself
    when nothing else is left ("What is it?")."""
    kept = [word for word in _QUERY_WORDS.findall(query) if word.lower() not in QUESTION_WORDS]
    return " ".join(kept) if kept else query


class BlendState:
    """One conversation's model responses, newest last. JSON round trip with to_dict/from_dict.

    Responses beyond `max_turns` are dropped: their weight would be below 0.5^8 = 0.4 %.
    """

    VERSION = 1

    def __init__(self, responses: Iterable[str] = (), max_turns: int = 8) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.max_turns = max_turns
        self._responses: list[str] = []
        for text in responses:
            self.add_turn(text)

    @property
    def responses(self) -> tuple[str, ...]:
        return tuple(self._responses)

    def add_turn(self, text: str) -> None:
        """Record a model response (only responses are tracked, never user queries)."""
        if not isinstance(text, str):
            raise ValueError(f"response text must be str, got {type(text).__name__}")
        if text.strip():
            self._responses.append(text)
            del self._responses[:-self.max_turns]

    def clear(self) -> None:
        self._responses.clear()

    def __len__(self) -> int:
        return len(self._responses)

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.VERSION, "max_turns": self.max_turns, "responses": list(self._responses)}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> BlendState:
        if not data:
            return cls()
        if data.get("version") != cls.VERSION or not isinstance(data.get("responses"), list):
            raise ValueError(
                f"blend state: expected version {cls.VERSION} with a 'responses' list, got {data!r:.200}"
            )
        return cls(data["responses"], max_turns=int(data.get("max_turns", 8)))


def blend_vectors(query: tuple[np.ndarray, np.ndarray], content_count: int,
                  history: Sequence[tuple[np.ndarray, np.ndarray]], ngram: int, dims: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Weighted majority vote of the query and the responses (history: newest FIRST).

    Shapes: every (pos, neg) is (words,) uint64 -> blended (pos, neg) (words,) uint64.
    """
    if not history:
        return query
    query_weight = min(0.5, content_count / (ngram * 2))
    decay = 0.5 ** np.arange(len(history))
    weights = decay / decay.sum() * (1.0 - query_weight)
    total = query_weight * bits.unpack_ternary(*query, dims).astype(np.float64)
    for weight, vector in zip(weights, history, strict=True):
        total += weight * bits.unpack_ternary(*vector, dims)
    # Ties (e.g. a 0.5 query against the whole history) abstain; rounding must not break them.
    total[np.abs(total) < 1e-9] = 0.0
    return bits.pack_ternary(np.sign(total).astype(np.int8))
