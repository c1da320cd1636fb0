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
    """A memory of a corpus `user` may read (any of its builds), or Http404."""
    memory = (Memory.objects.select_related("corpus", "dataset")
              .filter(pk=pk, corpus__in=corpora_visible_to(user)).first())
    if memory is None:
        raise Http404("No such memory.")
    return memory
