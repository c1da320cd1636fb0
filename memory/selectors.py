"""Reads of memories for pages: one memory a user may read, and its neighbours in the source."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import Http404

from corpus.document_access import document_readable
from corpus.models import Memory
from corpus.selectors import corpora_visible_to


def get_memory_for_user(user: AbstractBaseUser | AnonymousUser, pk: int) -> Memory:
    """A memory of a corpus and a document `user` may read, or Http404 (outsiders cannot tell it
    from a missing one).
    Memories of old builds stay readable while their rows exist (a chat may cite them)."""
    memory = (Memory.objects.filter(pk=pk, corpus__in=corpora_visible_to(user))
              .select_related("corpus", "dataset", "build").first())
    # A document with readers of its own hides its memories from the corpus's other readers.
    if memory is None or (memory.dataset is not None and not document_readable(user, memory.dataset)):
        raise Http404("No such memory.")
    return memory


def memory_neighbours(*, memory: Memory) -> tuple[Memory | None, Memory | None]:
    """The memories just before and after `memory` in its dataset (same build), by index row,
    which follows the order of the source: the surrounding text of a chunk."""
    same = Memory.objects.filter(build_id=memory.build_id, dataset_id=memory.dataset_id).only(
        "pk", "hdv_idx", "text", "metadata", "token_count")
    before = same.filter(hdv_idx__lt=memory.hdv_idx).order_by("-hdv_idx").first()
    after = same.filter(hdv_idx__gt=memory.hdv_idx).order_by("hdv_idx").first()
    return before, after
