"""Memories for a chat turn: the conversation's corpora, searched with its own blend history.

Access control is `memory.services.memories_search`'s: it is applied again at every turn, so a
corpus unshared since it was chosen is simply no longer searched.
"""

from __future__ import annotations

from chat.models import Conversation
from engine.retrieval import BlendState
from memory.services import memories_search


def memories_for_turn(*, conversation: Conversation, query: str, token_budget: int) -> list[dict]:
    """Ranked memories: [{"memory": {id, pk, text, hdv_idx, metadata, token_count, dataset_id},
    "hdc_score", "corpus_id", "corpus" (name), "dataset" (name)}]."""
    corpus_ids = list(conversation.corpora.values_list("pk", flat=True))
    if not corpus_ids:
        return []
    return memories_search(user=conversation.owner, corpus_ids=corpus_ids, query=query,
                           blend=BlendState.from_dict(conversation.blend_state), token_budget=token_budget,
                           top_document=conversation.top_document)
