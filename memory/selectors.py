"""Reads of memories."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count
from django.http import Http404

from corpus.selectors import corpora_visible_to
from memory.models import Memory


def memory_counts_by_dataset(*, build_id: int) -> dict[int, int]:
    """{dataset id: memories of that build from it}; memories of a deleted dataset are left out."""
    rows = (Memory.objects.filter(build_id=build_id, dataset__isnull=False).values("dataset_id")
            .annotate(n=Count("pk")).order_by())
    return {row["dataset_id"]: row["n"] for row in rows}


def get_memory_for_user(user: AbstractBaseUser | AnonymousUser, pk: int) -> Memory:
    """A memory of a corpus `user` may read, or Http404 (outsiders cannot tell it from a missing one).
    Memories of old builds stay readable while their rows exist (a chat may cite them)."""
    memory = (Memory.objects.filter(pk=pk, corpus__in=corpora_visible_to(user))
              .select_related("corpus", "dataset", "build").first())
    if memory is None:
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
