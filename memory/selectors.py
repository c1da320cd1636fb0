"""Reads of memories."""

from __future__ import annotations

from django.db.models import Count

from memory.models import Memory


def memory_counts_by_dataset(*, build_id: int) -> dict[int, int]:
    """{dataset id: memories of that build from it}; memories of a deleted dataset are left out."""
    rows = (Memory.objects.filter(build_id=build_id, dataset__isnull=False).values("dataset_id")
            .annotate(n=Count("pk")).order_by())
    return {row["dataset_id"]: row["n"] for row in rows}
