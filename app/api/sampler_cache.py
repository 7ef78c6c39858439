"""In-process LRU cache of loaded generators for `/sample` and `/predict` (CPU). Keyed by the weights' sha256,
so a re-stored sampler can never be served from a stale entry. Loading imports torch lazily.

Loads are single-flight: the first caller of a missing key loads it, every concurrent caller of the same key
waits for that one load (a burst of first requests after a start loads a generator once, not once per
request). A failed load is not cached: its error reaches every waiter, and the next call tries again."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any


class SamplerCache:
    def __init__(self, capacity: int):
        self.capacity = max(1, capacity)
        self._entries: OrderedDict[str, Any] = OrderedDict()
        self._loading: dict[str, Future] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.loads = 0

    def get(self, key: str, load: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                self.hits += 1
                return self._entries[key]
            self.misses += 1
            pending = self._loading.get(key)
            owner = pending is None
            if owner:
                pending = self._loading[key] = Future()
                self.loads += 1
        if not owner:
            return pending.result()  # raises the loader's error, like the owner
        try:
            loaded = load()  # outside the lock: a slow load never blocks hits on other samplers
        except BaseException as exc:
            with self._lock:
                del self._loading[key]
            pending.set_exception(exc)
            raise
        with self._lock:
            del self._loading[key]
            self._entries[key] = loaded
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        pending.set_result(loaded)
        return loaded

    def discard(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)
