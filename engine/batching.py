"""Generic batching, kept apart from the builder so that a search-time module can import it at the
top without loading the build pipeline (`engine.build`, its vocabulary writer, dataset readers)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any


def batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """`items` in lists of `size` (the last may be shorter): itertools.batched before Python 3.12."""
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
