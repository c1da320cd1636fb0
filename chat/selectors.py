"""Reads of conversations and messages. Every lookup is scoped to its owner."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import QuerySet
from django.http import Http404

from chat.models import Conversation, Message
from corpus.document_access import hidden_dataset_ids
from corpus.models import Memory
from corpus.selectors import corpora_visible_to


def conversations_for_user(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Conversation]:
    if not user.is_authenticated:
        return Conversation.objects.none()
    return Conversation.objects.filter(owner=user)


def conversation_find_for_user(*, user: AbstractBaseUser | AnonymousUser, pk: int) -> Conversation | None:
    """The conversation if `user` owns it; None for outsiders and missing ids alike."""
    return conversations_for_user(user=user).filter(pk=pk).first()


def conversation_get_for_user(*, user: AbstractBaseUser | AnonymousUser, pk: int) -> Conversation:
    """Like `conversation_find_for_user`, raising Http404 (outsiders learn nothing)."""
    conversation = conversation_find_for_user(user=user, pk=pk)
    if conversation is None:
        raise Http404("No such conversation.")
    return conversation


def conversation_messages(*, conversation: Conversation) -> QuerySet[Message]:
    return (
        conversation.messages.select_related("feedback")
        .prefetch_related("memories")
        .order_by("created", "id")
    )


def conversation_history(*, conversation_id: int, before_id: int | None = None) -> list[tuple[str, str]]:
    """(role, text) of the turns the model should see, oldest first.

    Answers that failed without text are left out (the model never said them); stopped answers
    keep their partial text, which the user saw.
    """
    messages = Message.objects.filter(conversation_id=conversation_id).order_by("created", "id")
    if before_id is not None:
        messages = messages.filter(id__lt=before_id)
    return [(role, content) for role, content in messages.values_list("role", "content") if content.strip()]


def conversation_for_turn(*, conversation_id: int) -> Conversation:
    """A conversation by id, for a turn whose owner was checked when its socket connected."""
    return Conversation.objects.get(pk=conversation_id)


def conversation_title(*, conversation_id: int) -> str:
    return Conversation.objects.values_list("title", flat=True).get(pk=conversation_id)


def message_with_memories(*, message_id: int) -> Message:
    return Message.objects.select_related("feedback").prefetch_related("memories").get(pk=message_id)


def conversation_latest(*, user: AbstractBaseUser | AnonymousUser) -> Conversation | None:
    return conversations_for_user(user=user).first()


def unreadable_memories(*, conversation: Conversation, messages: list[Message]) -> set[int]:
    """The memory rows that primed `messages` which the conversation's owner may no longer read:
    its corpus no longer shared with him, or its document given readers he is not among
    (`corpus.document_access`). A memory whose row is gone (its build deleted) keeps its snapshot."""
    ids = {m.memory_id for message in messages for m in message.memories.all() if m.memory_id is not None}
    if not ids:
        return set()
    user = conversation.owner
    rows = list(Memory.objects.filter(pk__in=ids).order_by().values_list("pk", "corpus_id", "dataset_id"))
    corpora = {corpus for _, corpus, _ in rows}
    readable = set(corpora_visible_to(user).filter(pk__in=corpora).values_list("pk", flat=True))
    hidden = hidden_dataset_ids(user, readable)
    return {pk for pk, corpus, dataset in rows
            if corpus not in readable or dataset in hidden.get(corpus, frozenset())}
