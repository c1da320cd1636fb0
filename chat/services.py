"""Writes on conversations and messages (HackSoft style: keyword-only, `<entity>_<action>`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from chat.citations import AnswerCitations
from chat.model_rights import model_check
from chat.models import (
    DEFAULT_TITLE,
    DEFAULT_TOKEN_BUDGET,
    MAX_TEMPERATURE,
    MAX_TOKEN_BUDGET,
    Conversation,
    Message,
    MessageMemory,
)
from chat.selectors import conversation_latest
from core.errors import ApplicationError
from corpus.models import Memory
from corpus.selectors import corpora_visible_to
from engine.llm.stream import Usage
from engine.places import place_label
from engine.query import BlendState
from memory.services import MemoryResult

TITLE_CHARS = 60
MAX_MESSAGE_CHARS = 32_000
UNCHANGED: Any = object()  # conversation_update: leave this field as it is


def _visible_corpus_ids(*, user: AbstractBaseUser, corpus_ids: Iterable[int]) -> list[int]:
    wanted = sorted({int(pk) for pk in corpus_ids})
    # An id outside the database's 64-bit keys cannot exist, and PostgreSQL/SQLite refuse it in IN (...).
    in_range = [pk for pk in wanted if 0 < pk < 2 ** 63]
    visible = set(corpora_visible_to(user).filter(pk__in=in_range).values_list("pk", flat=True))
    missing = [pk for pk in wanted if pk not in visible]
    if missing:
        raise ApplicationError(f"Unknown or unreadable corpora: {missing}.", {"corpora": missing})
    return wanted


def _check_budget(token_budget: int) -> int:
    if not 1 <= int(token_budget) <= MAX_TOKEN_BUDGET:
        raise ApplicationError(
            f"The token budget must be between 1 and {MAX_TOKEN_BUDGET}, got {token_budget}.",
            {"token_budget": token_budget},
        )
    return int(token_budget)


def _check_temperature(temperature: float | None) -> float | None:
    """None (the model's default) or a finite temperature in 0..MAX_TEMPERATURE."""
    if temperature is None:
        return None
    value = float(temperature)
    if not (math.isfinite(value) and 0.0 <= value <= MAX_TEMPERATURE):
        raise ApplicationError(
            f"The temperature must be between 0 and {MAX_TEMPERATURE:g}, got {temperature}.",
            {"temperature": temperature},
        )
    return value


@transaction.atomic
def conversation_create(*, user: AbstractBaseUser, title: str = "", corpus_ids: Iterable[int] = (),
                        use_memory: bool = True, top_document: bool = False, compress_context: bool = False,
                        token_budget: int = DEFAULT_TOKEN_BUDGET, temperature: float | None = None,
                        model: str = "") -> Conversation:
    conversation = Conversation.objects.create(
        owner=user,
        title=(title.strip() or DEFAULT_TITLE)[:200],
        use_memory=use_memory,
        top_document=top_document,
        compress_context=compress_context,
        token_budget=_check_budget(token_budget),
        temperature=_check_temperature(temperature),
        model=model_check(user, model) if model else "",
    )
    conversation.corpora.set(_visible_corpus_ids(user=user, corpus_ids=corpus_ids))
    return conversation


@transaction.atomic
def conversation_create_next(*, user: AbstractBaseUser) -> Conversation:
    """A new conversation with the last one's corpora (those still readable), toggles, budget and
    temperature, but an empty blend; the very first one gets every searchable corpus `user` may read."""
    previous = conversation_latest(user=user)
    readable = corpora_visible_to(user)
    if previous is None:
        return conversation_create(
            user=user,
            title=DEFAULT_TITLE,
            corpus_ids=readable.filter(active_build__isnull=False).values_list("pk", flat=True),
        )
    return conversation_create(
        user=user, title=DEFAULT_TITLE,
        corpus_ids=readable.filter(pk__in=previous.corpora.values("pk")).values_list("pk", flat=True),
        use_memory=previous.use_memory, top_document=previous.top_document,
        compress_context=previous.compress_context, token_budget=previous.token_budget,
        temperature=previous.temperature)


@transaction.atomic
def conversation_update(*, conversation: Conversation, title: str | None = None,
                        corpus_ids: Iterable[int] | None = None, use_memory: bool | None = None,
                        top_document: bool | None = None, compress_context: bool | None = None,
                        token_budget: int | None = None, temperature: float | None = UNCHANGED,
                        model: str | None = None) -> Conversation:
    """Change what is given (`temperature=None` returns to the model's default); the blend history
    is left alone (see `conversation_clear_blend`)."""
    fields = ["updated"]
    if title is not None:
        if not title.strip():
            raise ApplicationError("The title must not be empty.", {"title": title})
        conversation.title = title.strip()[:200]
        fields.append("title")
    for name, value in (("use_memory", use_memory), ("top_document", top_document),
                        ("compress_context", compress_context)):
        if value is not None:
            setattr(conversation, name, bool(value))
            fields.append(name)
    if token_budget is not None:
        conversation.token_budget = _check_budget(token_budget)
        fields.append("token_budget")
    if temperature is not UNCHANGED:
        conversation.temperature = _check_temperature(temperature)
        fields.append("temperature")
    if model is not None:
        conversation.model = model_check(conversation.owner, model)
        fields.append("model")
    conversation.save(update_fields=fields)
    if corpus_ids is not None:
        conversation.corpora.set(_visible_corpus_ids(user=conversation.owner, corpus_ids=corpus_ids))
    return conversation


def conversation_delete(*, conversation: Conversation) -> None:
    conversation.delete()


def conversation_clear_blend(*, conversation_id: int) -> None:
    Conversation.objects.filter(pk=conversation_id).update(blend_state=BlendState().to_dict())


@transaction.atomic
def conversation_add_response(*, conversation_id: int, text: str) -> dict:
    """Add a model response to the conversation's blend history; returns the new state.

    Read-modify-write under a row lock, so two connections on one conversation (two tabs)
    cannot lose each other's turn.
    """
    conversation = Conversation.objects.select_for_update().only("blend_state").get(pk=conversation_id)
    blend = BlendState.from_dict(conversation.blend_state)
    blend.add_turn(text)
    conversation.blend_state = blend.to_dict()
    conversation.save(update_fields=["blend_state", "updated"])
    return conversation.blend_state


@transaction.atomic
def message_prepare_regenerate(*, conversation_id: int) -> Message:
    """Take back the answer to the last user turn, so the turn can be answered again; returns that turn.

    The answers after the last user message are deleted and, when the newest of them entered the
    blend history, it leaves it again: the next answer is retrieved as the first one was.
    """
    conversation = Conversation.objects.select_for_update().get(pk=conversation_id)
    last_user = conversation.messages.filter(role=Message.Role.USER).order_by("-created", "-id").first()
    if last_user is None:
        raise ApplicationError("There is no question to answer again yet.", {"conversation": conversation_id})
    answers = conversation.messages.filter(role=Message.Role.ASSISTANT, id__gt=last_user.pk).order_by("-id")
    newest = answers.first()
    blend = BlendState.from_dict(conversation.blend_state)
    if newest is not None and blend.responses and blend.responses[-1] == newest.content:
        conversation.blend_state = BlendState(blend.responses[:-1], max_turns=blend.max_turns).to_dict()
        conversation.save(update_fields=["blend_state", "updated"])
    answers.delete()
    return last_user


@transaction.atomic
def message_create_user(*, conversation_id: int, content: str) -> Message:
    """Store the user's turn (before any LLM call, so a failing LLM loses nothing).

    A conversation still under its default title takes it from its first message.
    """
    content = content.strip()
    if not content:
        raise ApplicationError("The message must not be empty.", {"content": content})
    if len(content) > MAX_MESSAGE_CHARS:
        raise ApplicationError(
            f"The message must be at most {MAX_MESSAGE_CHARS} characters, got {len(content)}.",
            {"content_length": len(content)},
        )
    message = Message.objects.create(conversation_id=conversation_id, role=Message.Role.USER, content=content)
    conversation = Conversation.objects.select_for_update().get(pk=conversation_id)
    if conversation.title == DEFAULT_TITLE:
        first_line = content.splitlines()[0]
        title = first_line[:TITLE_CHARS] + ("…" if len(first_line) > TITLE_CHARS else "")
        conversation.title = _unused_title(conversation, title)
    conversation.save(update_fields=["title", "updated"])
    return message


def _unused_title(conversation: Conversation, title: str) -> str:
    """`title`, or `title (2)`, `(3)`, ...: one the owner's other conversations do not have, so two
    conversations begun with the same question can be told apart in the list."""
    taken = set(Conversation.objects.filter(owner_id=conversation.owner_id, title__startswith=title)
                .exclude(pk=conversation.pk).values_list("title", flat=True))
    number, candidate = 1, title
    while candidate in taken:
        number += 1
        candidate = f"{title} ({number})"
    return candidate


def _memory_rows(results: Sequence[MemoryResult], message: Message) -> list[MessageMemory]:
    # A rebuild may have deleted a row since it was retrieved; the snapshot is kept without the link.
    wanted = [r.memory_id for r in results if r.memory_id is not None]
    existing = set(Memory.objects.filter(pk__in=wanted).values_list("pk", flat=True))
    rows = []
    for rank, result in enumerate(results):
        memory = result.memory
        rows.append(
            MessageMemory(
                message=message,
                rank=rank,
                memory_id=result.memory_id if result.memory_id in existing else None,
                memory_key=memory.content_hash[:64],
                corpus_name=result.corpus_name[:200],
                source=result.source[:500],
                score=result.hdc_score,
                token_count=memory.token_count,
                excerpt=memory.text[: MessageMemory.EXCERPT_CHARS],
                place=place_label(memory.metadata)[: MessageMemory.PLACE_CHARS],
            )
        )
    return rows


@transaction.atomic
def message_create_assistant(
    *,
    conversation_id: int,
    content: str,
    status: str,
    memories: Sequence[MemoryResult] = (),
    usage: Usage | None = None,
    finish_reason: str = "",
    error: str = "",
    citations: AnswerCitations | None = None,
    model: str = "",
) -> Message:
    """Store an answer (complete, stopped or failed) with the memories that primed it and its
    `citations` (`chat.citations.answer_citations`) when given.

    `memories` are `memory.services.memories_search` results.
    """
    if status not in Message.Status.values:
        raise ValueError(f"status must be one of {Message.Status.values}, got {status!r}")
    message = Message.objects.create(
        conversation_id=conversation_id,
        role=Message.Role.ASSISTANT,
        content=content,
        status=status,
        error=error,
        finish_reason=finish_reason or "",
        prompt_tokens=usage.prompt_tokens if usage else None,
        completion_tokens=usage.completion_tokens if usage else None,
        grounding=citations.grounding if citations else None,
        citations=list(citations.citations) if citations else [],
        model=model,
    )
    MessageMemory.objects.bulk_create(_memory_rows(memories, message))
    Conversation.objects.filter(pk=conversation_id).update(updated=message.created)
    return message
