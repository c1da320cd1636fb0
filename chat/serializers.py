"""Plain-dict views of chat rows, shared by the websocket events, the page and the exports."""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from chat.models import Conversation, Message, MessageMemory
from engine.citations import grounding_word
from memory.services import MemoryResult

EXCERPT_PREVIEW_CHARS = 600


def memory_json(memory: MessageMemory) -> dict[str, Any]:
    """`url`: the memory's page, "" once a rebuild removed the row (the snapshot stays)."""
    return {"rank": memory.rank, "memory_id": memory.memory_id,
            "url": reverse("memory:detail", args=[memory.memory_id]) if memory.memory_id else "",
            "key": memory.memory_key,
            "corpus": memory.corpus_name, "source": memory.source, "score": memory.score,
            "token_count": memory.token_count, "excerpt": memory.excerpt}


def memory_result_json(result: MemoryResult, *, rank: int) -> dict[str, Any]:
    """A search result as the chat page shows it (the `chat.memories` event), before it is stored
    (as `memory_json` will show it: `rank` counts from 0 in retrieval order, "corpus" is the
    corpus's name)."""
    memory = result.memory
    return {"rank": rank, "memory_id": memory.memory_id, "key": memory.content_hash,
            "corpus": result.corpus_name, "source": result.source,
            "score": result.hdc_score, "token_count": memory.token_count,
            "excerpt": memory.text[:MessageMemory.EXCERPT_CHARS]}


def message_json(message: Message) -> dict[str, Any]:
    return {
        "id": message.pk, "role": message.role, "content": message.content, "status": message.status,
        "error": message.error, "created": message.created.isoformat(), "prompt_tokens": message.prompt_tokens,
        "completion_tokens": message.completion_tokens, "finish_reason": message.finish_reason,
        "memories": [memory_json(m) for m in message.memories.all()] if message.role == Message.Role.ASSISTANT else [],
        "grounding": message.grounding, "grounding_word": grounding_word(message.grounding),
        "citations": message.citations,
    }


def conversation_json(conversation: Conversation) -> dict[str, Any]:
    return {
        "id": conversation.pk, "title": conversation.title, "use_memory": conversation.use_memory,
        "top_document": conversation.top_document, "compress_context": conversation.compress_context,
        "token_budget": conversation.token_budget, "temperature": conversation.temperature, "corpora": sorted(c.pk for c in conversation.corpora.all()),
        "blend_turns": len((conversation.blend_state or {}).get("responses", [])),
        "updated": conversation.updated.isoformat(),
    }
