"""Conversation exports: ShareGPT-style JSONL and Markdown."""

from __future__ import annotations

import json

from chat.models import Conversation, Message
from chat.selectors import conversation_messages

SHAREGPT_ROLES = {Message.Role.USER: "human", Message.Role.ASSISTANT: "gpt"}


def conversation_export_jsonl(*, conversation: Conversation) -> str:
    """One JSON line: {"id", "title", "conversations": [{"from": "human"|"gpt", "value": str}, ...]}.

    Answers that failed before producing text are left out; a stopped answer keeps its partial text.
    """
    turns = [{"from": SHAREGPT_ROLES[m.role], "value": m.content}
             for m in conversation_messages(conversation=conversation) if m.content.strip()]
    record = {"id": conversation.pk, "title": conversation.title, "conversations": turns}
    return json.dumps(record, ensure_ascii=False) + "\n"


def _quote(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.splitlines())


def conversation_export_markdown(*, conversation: Conversation) -> str:
    """The conversation as Markdown, with each answer's priming memories (source, score)."""
    lines = [f"# {conversation.title}", "", f"_Exported conversation {conversation.pk}, "
             f"started {conversation.created:%Y-%m-%d %H:%M} UTC._", ""]
    for message in conversation_messages(conversation=conversation):
        speaker = "You" if message.role == Message.Role.USER else "Assistant"
        status = "" if message.status == Message.Status.COMPLETE else f" ({message.get_status_display().lower()})"
        lines += [f"## {speaker}{status}", "", message.content.strip() or "_(no text)_", ""]
        if message.error:
            lines += [_quote(f"Error: {message.error}"), ""]
        memories = list(message.memories.all())
        if memories:
            lines += ["<details><summary>Memories</summary>", ""]
            for memory in memories:
                where = " / ".join(part for part in (memory.corpus_name, memory.source) if part) or "unknown source"
                excerpt = " ".join(memory.excerpt.split())[:280]
                lines.append(f"- **{where}** (score {memory.score:g}): {excerpt}")
            lines += ["", "</details>", ""]
    return "\n".join(lines).rstrip() + "\n"
