"""Conversation exports: ShareGPT-style JSONL and Markdown."""

from __future__ import annotations

import html
import json
import re

from accounts.audit import audit_record
from chat.citations import cited_markdown
from chat.models import Conversation, Message
from chat.selectors import conversation_messages, unreadable_memories
from engine.citations import grounding_word

SHAREGPT_ROLES = {Message.Role.USER: "human", Message.Role.ASSISTANT: "gpt"}


def conversation_export(*, conversation: Conversation, fmt: str) -> str:
    """The conversation as `fmt` ("jsonl" or "md"), recorded in the audit trail (who took what out)."""
    content = (conversation_export_jsonl if fmt == "jsonl" else conversation_export_markdown)(
        conversation=conversation
    )
    audit_record(
        action="conversation_exported",
        target=f"{conversation.title} (#{conversation.pk})",
        format=fmt,
        owner=conversation.owner.get_username(),
    )
    return content


def conversation_export_jsonl(*, conversation: Conversation) -> str:
    """One JSON line: {"id", "title", "conversations": [{"from": "human"|"gpt", "value": str}, ...]};
    an answer also has "grounding" (0..1 or null), "citations" (`chat.citations`) and "model" (the
    LLM model that wrote it; "" for answers stored before models were recorded).

    Answers that failed before producing text are left out; a stopped answer keeps its partial text.
    """
    turns = [
        {
            "from": SHAREGPT_ROLES[m.role],
            "value": m.content,
            **(
                {"grounding": m.grounding, "citations": m.citations, "model": m.model}
                if m.role == Message.Role.ASSISTANT
                else {}
            ),
        }
        for m in conversation_messages(conversation=conversation)
        if m.content.strip()
    ]
    record = {"id": conversation.pk, "title": conversation.title, "conversations": turns}
    return json.dumps(record, ensure_ascii=False) + "\n"


# Markdown's punctuation that could start emphasis, code, a link, a heading or a table cell.
MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_\[\]#|~])")


def _plain(text: str) -> str:
    """Text from a memory or a file name as plain text in Markdown: its markup escaped, so that
    neither HTML tags nor Markdown syntax of its own change the export around it."""
    return MARKDOWN_PUNCTUATION.sub(r"\\\1", html.escape(text, quote=False))


def _quote(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.splitlines())


def conversation_export_markdown(*, conversation: Conversation) -> str:
    """The conversation as Markdown, with each answer's citations (the numbers of the memories
    that support a sentence, "(unsure)" after them where the model was unsure of its words, or
    "(unsupported)"), its grounding and its priming memories (source, score). A memory the owner
    may no longer read is named (corpus, source) but not quoted."""
    lines = [f"# {conversation.title}", "", f"_Exported conversation {conversation.pk}, "
             f"started {conversation.created:%Y-%m-%d %H:%M} UTC._", ""]
    messages = list(conversation_messages(conversation=conversation))
    unreadable = unreadable_memories(conversation=conversation, messages=messages)
    for message in messages:
        speaker = "You" if message.role == Message.Role.USER else "Assistant"
        status = (
            "" if message.status == Message.Status.COMPLETE else f" ({message.get_status_display().lower()})"
        )
        text = (
            cited_markdown(message.content, message.citations).strip()
            if message.citations
            else message.content.strip()
        )
        lines += [f"## {speaker}{status}", "", text or "_(no text)_", ""]
        if message.model:
            lines += [f"_Model: {_plain(message.model)}_", ""]
        if message.grounding is not None:
            lines += [
                f"_Grounding: {message.grounding:.0%} ({grounding_word(message.grounding)}): the share of "
                f"its claims a memory supports, each weighed by the model's certainty of its words._",
                "",
            ]
        if message.error:
            lines += [_quote(f"Error: {message.error}"), ""]
        memories = list(message.memories.all())
        if memories:
            lines += ["<details><summary>Memories</summary>", ""]
            for memory in memories:
                source = ", ".join(part for part in (memory.source, memory.place) if part)
                where = (
                    " / ".join(part for part in (memory.corpus_name, source) if part)
                    or "unknown source"
                )
                if memory.memory_id in unreadable:
                    lines.append(f"{memory.rank + 1}. **{_plain(where)}** (score {memory.score:g}): "
                                 "_(no longer readable by you: not quoted)_")
                    continue
                excerpt = " ".join(memory.excerpt.split())[:280]
                lines.append(
                    f"{memory.rank + 1}. **{_plain(where)}** (score {memory.score:g}): {_plain(excerpt)}"
                )
            lines += ["", "</details>", ""]
    return "\n".join(lines).rstrip() + "\n"
