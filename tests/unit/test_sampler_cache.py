"""SamplerCache: single-flight loads (one load per key however many callers arrive at once), failed loads are
not cached and reach every waiter, LRU eviction."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.api.sampler_cache import SamplerCache


def test_twenty_concurrent_gets_share_one_slow_load() -> None:
    cache = SamplerCache(4)
    calls = 0
    calls_lock = threading.Lock()
    start = threading.Barrier(20)

    def slow_load() -> object:
        nonlocal calls
        with calls_lock:
            calls += 1
        time.sleep(0.5)  # every other caller arrives while this load runs
        return object()

    def get() -> object:
        start.wait()
        return cache.get("sha", slow_load)

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(lambda _: get(), range(20)))
    assert calls == 1
    assert all(result is results[0] for result in results)
    assert cache.loads == 1
    assert cache.get("sha", slow_load) is results[0] and calls == 1


def test_a_failed_load_reaches_every_waiter_and_is_not_cached() -> None:
    cache = SamplerCache(4)
    attempts = 0
    start = threading.Barrier(10)

    def failing_load() -> object:
        nonlocal attempts
        attempts += 1
        time.sleep(0.3)
        raise ValueError("corrupt weights")

    def get() -> BaseException | object:
        start.wait()
        try:
            return cache.get("bad", failing_load)
        except ValueError as exc:
            return exc

    with ThreadPoolExecutor(10) as pool:
        outcomes = list(pool.map(lambda _: get(), range(10)))
    assert attempts == 1
    assert all(isinstance(outcome, ValueError) and str(outcome) == "corrupt weights" for outcome in outcomes)
    # Not cached: the next call loads again, and succeeds.
    assert cache.get("bad", lambda: "fixed") == "fixed"


def test_different_keys_load_in_parallel_and_lru_evicts() -> None:
    cache = SamplerCache(2)
    inside = threading.Barrier(2, timeout=10)

    def load(value: str) -> str:
        inside.wait()  # both loads must be running at once, or this times out
        return value

    with ThreadPoolExecutor(2) as pool:
        assert sorted(pool.map(lambda key: cache.get(key, lambda: load(key)), ["a", "b"])) == ["a", "b"]
    cache.get("a", lambda: pytest.fail("a is cached"))
    cache.get("c", lambda: "c")  # evicts b, the least recently used
    assert cache.get("b", lambda: "b again") == "b again"
