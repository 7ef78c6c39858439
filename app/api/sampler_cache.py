"""In-process LRU cache of loaded generators for `/sample` (CPU). Keyed by the weights' sha256, so a
re-stored sampler can never be served from a stale entry. Loading imports torch lazily."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any


class SamplerCache:
    def __init__(self, capacity: int):
        self.capacity = max(1, capacity)
        self._entries: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: str, load: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                self.hits += 1
                return self._entries[key]
        loaded = load()  # outside the lock: a slow load never blocks hits on other samplers
        with self._lock:
            self.misses += 1
            self._entries[key] = loaded
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return loaded

    def discard(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)
