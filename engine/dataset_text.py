"""Dataset records -> indexable text: `extract_text` and the document id `content_id`.

Part of `engine.datasets`, which re-exports both.
"""

from __future__ import annotations

import hashlib
from typing import Any


def _as_text(value: Any) -> str:
    """Plain text of a message body: a string, or OpenAI content parts (only "text" parts count)."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list):
        parts = [
            _as_text(part)
            if isinstance(part, str)
            else _as_text(part.get("text"))
            if isinstance(part, dict) and part.get("type", "text") == "text"
            else ""
            for part in value
        ]
        return "\n".join(part for part in parts if part)
    return ""


def _turns(turns: Any, role_key: str, text_key: str) -> str:
    lines = []
    for turn in turns if isinstance(turns, list) else ():
        if not isinstance(turn, dict):
            continue
        text = _as_text(turn.get(text_key))
        if text:
            role = turn.get(role_key)
            lines.append(f"{role}: {text}" if isinstance(role, str) and role.strip() else text)
    return "\n".join(lines)


def extract_text(item: dict) -> str:
    """The indexable text of one record, or "" when it holds none.

    Schemas, tried in this order (the first that yields text wins):
    - ShareGPT ``conversations: [{from, value}]`` and OpenAI ``messages: [{role, content}]``: one
      ``"<role>: <text>"`` line per turn, joined by "\\n" (a turn without a role is its bare text).
      ``content`` may be a list of parts; the ``{"type": "text", "text": ...}`` parts (and bare
      strings) are joined by "\\n", other parts (images, audio) are ignored.
    - Alpaca ``instruction`` / ``input`` / ``output`` and ``prompt`` / ``response`` / ``completion``:
      the non-empty fields in that order, joined by "\\n", without labels.
    - Raw ``text``, then ``content``.
    Every piece is stripped; empty pieces are dropped.
    """
    if not isinstance(item, dict):
        return ""
    text = _turns(item.get("conversations"), "from", "value") or _turns(
        item.get("messages"), "role", "content"
    )
    if text:
        return text
    fields = [
        _as_text(item.get(key))
        for key in ("instruction", "input", "output", "prompt", "response", "completion")
    ]
    text = "\n".join(field for field in fields if field)
    return text or _as_text(item.get("text")) or _as_text(item.get("content"))


def content_id(text: str) -> str:
    """Stable document id: blake2b-128 of the UTF-8 text, as 32 hex characters."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()

