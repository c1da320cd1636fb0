"""An answer's citations and grounding (`engine.citations`), as the chat and the API store and send them.

The channel and threshold were chosen with `bench.answers` against its fact judge
(docs/answer-measurements.md): the exact words near the sentence's subject
(`engine.citations.SubjectWindowSupport`), a sentence citing the memories that hold at least
`CITATION_THRESHOLD` of its claim words within `SUBJECT_WINDOW` words after its subject; the
grounding weighs each supported sentence by the model's certainty of its claim words (the answer
tokens' log-probabilities, `engine.citations.claim_certainty`) where the server sent them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.citations import SubjectWindowSupport, attribute, grounding_word
from engine.llm.answer import TokenSpan

CITATION_THRESHOLD = 0.5
SUBJECT_WINDOW = 15
SCORER = SubjectWindowSupport(SUBJECT_WINDOW)


@dataclass(frozen=True)
class AnswerCitations:
    """What is stored with an answer: `grounding` in 0..1 (None: nothing to check) and one
    `SentenceCitation.to_dict()` per sentence, whose `memories` are ranks (0: the first memory)."""

    grounding: float | None = None
    citations: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"grounding": self.grounding, "grounding_word": grounding_word(self.grounding),
                "citations": list(self.citations)}


def cited_markdown(content: str, citations: Sequence[dict[str, Any]]) -> str:
    """`content` with a marker after each sentence: the numbers of the memories that support it
    (`[1][3]`, counted from 1 as the memories are listed; `[1] (unsure)` where the model was unsure
    of its words) or `(unsupported)` for a claim that none supports. Sentences are found in order (a
    stored sentence is a slice of the content)."""
    out: list[str] = []
    cursor = 0
    for citation in citations:
        found = content.find(citation["text"], cursor)
        if found < 0:
            continue
        end = found + len(citation["text"])
        if citation["memories"]:
            marker = "".join(f"[{rank + 1}]" for rank in citation["memories"]) + \
                (" (unsure)" if citation.get("unsure") else "")
        else:
            marker = "(unsupported)" if citation["claim"] else ""
        out.append(content[cursor:end] + (f" {marker}" if marker else ""))
        cursor = end
    return "".join(out) + content[cursor:]


def answer_citations(*, question: str, answer: str, memory_texts: Sequence[str],
                     token_logprobs: Sequence[TokenSpan] = ()) -> AnswerCitations:
    """The citations of `answer` to the memories that primed it (texts in rank order), each claim
    weighed by the model's certainty where `token_logprobs` (`engine.llm.answer.AnswerTokens.spans`) are
    given. An answer without memories, or without a sentence that states something, has none
    (grounding None)."""
    if not memory_texts or not answer.strip():
        return AnswerCitations()
    attribution = attribute(
        answer,
        memory_texts,
        scorer=SCORER,
        threshold=CITATION_THRESHOLD,
        question=question,
        token_logprobs=token_logprobs,
    )
    return AnswerCitations(grounding=attribution.grounding,
                           citations=tuple(sentence.to_dict() for sentence in attribution.sentences))
