"""The bounded cache every process-wide cache of the portal is made of, and the one way to empty them all.

Each app owns its process-wide state (`corpus.serving`: loaded builds, tokenizers, Chroma;
`chat.llm.clients`: LLM clients, token counters, queues) in `BoundedCache`s; every one made is
known here, so `core.runtime.reset()` empties them without knowing the apps. The small memos kept
with `functools.cache` or `lru_cache` (a compiled pattern, a model's hash) are known here too:
each is registered with `function_cache_register` where it is defined.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

from cachetools import LRUCache

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
_every_cache: weakref.WeakSet[BoundedCache] = weakref.WeakSet()


class FunctionCache(Protocol):
    """A function memoised by `functools.cache` or `functools.lru_cache`."""

    def cache_clear(self) -> None: ...


Memoised = TypeVar("Memoised", bound=FunctionCache)
_function_caches: list[FunctionCache] = []


class BoundedCache(Generic[K, V]):
    """A thread-safe LRU map (cachetools' `LRUCache` under a lock) whose values are made on first
    use, once per key.

    A value is made outside the map's lock, under a lock of its own key: two requests for a new key
    make it once (the second waits for the first), and a slow one (a tokenizer takes about a
    second) keeps no lookup of another key waiting."""

    def __init__(self, size: int, *, max_bytes: Callable[[], int] | None = None,
                 weigh: Callable[[V], int] | None = None) -> None:
        """At most `size` values; with `max_bytes` (read on each insert, so a setting can change it)
        and `weigh`, also at most that many bytes of them (the newest value always stays)."""
        self.size = size
        # Its recency order and popitem; both bounds are applied by `_evict` (`size` can change).
        self._items: LRUCache[K, V] = LRUCache(maxsize=sys.maxsize)
        self._weights: dict[K, int] = {}
        self._max_bytes, self._weigh = max_bytes, weigh
        self._lock = threading.Lock()
        self._making: dict[K, threading.Lock] = {}
        _every_cache.add(self)

    @property
    def bytes(self) -> int:
        with self._lock:
            return sum(self._weights.values())

    def _evict(self) -> None:
        limit = self._max_bytes() if self._max_bytes is not None else None
        while len(self._items) > self.size or (
                limit is not None and len(self._items) > 1 and sum(self._weights.values()) > limit):
            key, _ = self._items.popitem()  # the least recently used
            self._weights.pop(key, None)

    def get(self, key: K, make: Callable[[], V]) -> V:
        with self._lock:
            if key in self._items:
                return self._items[key]  # a read marks it recently used
            making = self._making.setdefault(key, threading.Lock())
        with making:
            with self._lock:
                if key in self._items:  # made meanwhile by the request this one waited for
                    return self._items[key]
            try:
                value = make()
            except BaseException:
                with self._lock:  # the requests waiting for this key try again
                    self._making.pop(key, None)
                raise
            weight = self._weigh(value) if self._weigh is not None else 0
            with self._lock:  # one step: a request arriving now finds the value, never a second maker
                self._items[key] = value
                self._weights[key] = weight
                self._evict()
                self._making.pop(key, None)
            return value

    def drop(self, keep: Callable[[K], bool]) -> None:
        with self._lock:
            for key in [key for key in self._items if not keep(key)]:
                del self._items[key]
                self._weights.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._weights.clear()

    def snapshot(self) -> list[K]:
        with self._lock:
            return list(self._items)


def array_bytes(value: object) -> int:
    """Bytes of the numpy arrays a value holds as attributes (a word index, a late scorer): what it
    costs in RAM, for the caches bounded by bytes."""
    import numpy as np

    return (
        sum(v.nbytes for v in vars(value).values() if isinstance(v, np.ndarray)) if value is not None else 0
    )


def function_cache_register(function: Memoised) -> Memoised:
    """Have `bounded_caches_clear` empty `function`'s memo too; a decorator, above the `functools` one."""
    if function not in _function_caches:
        _function_caches.append(function)
    return function


def bounded_caches_clear() -> None:
    """Empty every BoundedCache and every registered function cache of this process."""
    for cache in list(_every_cache):
        cache.clear()
    for function in _function_caches:
        function.cache_clear()
