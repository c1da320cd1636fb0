"""The history policy: what of a conversation's earlier turns enters the next turn's prompt.

The packaged chat model copies what it has just said: given its earlier answers whole, it answered
"What does the nonlocal statement do?" with the previous answer's CSV code, and explained
`lru_cache` in the previous answer's sentences about scopes. Each policy keeps the earlier
*questions* (a follow-up such as "and how do I write them back?" needs them) and differs in what it
keeps of the earlier *answers*:

* `whole`: every earlier exchange as it was said (what the portal sent before this policy);
* `lead`: each earlier answer cut before its first code block and to its first `LEAD_SENTENCES`
  sentences, so the topic carries over but no code or paragraph the model could copy does;
* `questions`: the earlier questions only, no answer;
* `last`: the last exchange only, whole.

The default, `Config.history_policy`, was chosen on `bench.answers --chains` (docs/answer-measurements.md).
The prompt's budget then drops whole messages oldest first (`engine.llm.prompt.assemble_prompt`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from engine.citations import sentences
from engine.config import HISTORY_POLICIES
from engine.llm.prompt import Role

LEAD_SENTENCES = 2

_FENCE = re.compile(r"^[ \t]*(```|~~~)", re.MULTILINE)


def answer_lead(answer: str, max_sentences: int = LEAD_SENTENCES) -> str:
    """`answer` up to its first fenced code block, and of that its first `max_sentences` sentences
    (`engine.citations.sentences`); empty when the answer begins with code, and the answer itself
    when it is that short already."""
    fence = _FENCE.search(answer)
    prose = answer[:fence.start()] if fence else answer
    found = sentences(prose)
    if not found:
        return ""
    if fence is None and len(found) <= max_sentences:
        return answer
    lead = prose[:found[min(max_sentences, len(found)) - 1].end].strip()
    return lead.rstrip(":").rstrip() + ("" if lead.endswith((".", "!", "?")) else ".")


def history_for_prompt(history: Sequence[tuple[Role, str]], policy: str) -> list[tuple[Role, str]]:
    """The (role, text) messages of `history` (oldest first) that `policy` lets into the prompt.

    Raises ValueError for a policy not in `HISTORY_POLICIES`."""
    if policy not in HISTORY_POLICIES:
        raise ValueError(f"history policy must be one of {', '.join(HISTORY_POLICIES)}, got {policy!r}")
    turns = list(history)
    if policy == "whole":
        return turns
    if policy == "last":
        starts = [number for number, (role, _) in enumerate(turns) if role == "user"]
        return turns[starts[-1]:] if starts else []
    if policy == "questions":
        return [(role, text) for role, text in turns if role == "user"]
    kept: list[tuple[Role, str]] = []
    for role, text in turns:
        if role == "user":
            kept.append((role, text))
        elif lead := answer_lead(text):
            kept.append((role, lead))
    return kept


def follow_up_query(history: Sequence[tuple[Role, str]], question: str) -> str:
    """The search text of a turn with `Config.follow_up_query` on: the previous question, then
    `question` (the first turn's is its own question)."""
    previous = next((text for role, text in reversed(history) if role == "user"), "")
    return f"{previous}\n{question}" if previous.strip() else question
