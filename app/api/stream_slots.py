"""Open event streams per tenant (`max_streams_per_tenant`, 429 `too_many_streams`).

Cluster shape (a Redis broker): the count is shared by every API process and machine. Each open stream is a
member of the tenant's sorted set in Redis, scored with the time its lease ends (`stream_slot_ttl_seconds`
ahead); the stream renews it while open and removes it when it ends. Taking a slot is one Lua script (drop
lapsed members, count, add), so concurrent requests on any process never go over the cap, and a process
killed with its streams open leaks their slots for at most one TTL. If Redis cannot be reached the stream is
counted in the process instead (logged): a broker outage must not take streams down with it.

Embedded shape (filesystem broker): counted in the API process, which is one process under `parvis serve`;
`parvis api --workers N` on the embedded shape allows up to N times the cap."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from typing import Any, Protocol

from app.api.problems import Problem
from service.queue import redis_client
from service.settings import Settings

logger = logging.getLogger("parvis.api")

STREAM_RETRY_AFTER_SECONDS = 10

# KEYS[1] the tenant's set; ARGV: cap, slot id, ttl (s). The server's clock, so API machines' clocks may differ.
# Returns -1 when the slot was taken, else the number of streams open.
_ACQUIRE = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1e6
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
local open = redis.call('ZCARD', KEYS[1])
if open >= tonumber(ARGV[1]) then return open end
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[3]), ARGV[2])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3])) + 1)
return -1
"""
# KEYS[1] the tenant's set; ARGV: slot id, ttl (s). Renews a slot that is still there (XX: never re-adds one).
_RENEW = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1e6
local renewed = redis.call('ZADD', KEYS[1], 'XX', 'CH', t + tonumber(ARGV[2]), ARGV[1])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2])) + 1)
return renewed
"""


def too_many(open_count: int, cap: int) -> Problem:
    return Problem(429, "too_many_streams",
                   f"{open_count} event streams are open for this tenant; the limit is {cap}",
                   headers={"Retry-After": str(STREAM_RETRY_AFTER_SECONDS)})


class StreamSlot(Protocol):
    def renew_due(self) -> bool: ...  # cheap, on the event loop: whether `renew` (blocking) has work to do
    def renew(self) -> None: ...
    def release(self) -> None: ...


class LocalSlot:
    def __init__(self, slots: LocalStreamSlots, tenant: str):
        self._slots = slots
        self._tenant = tenant
        self._released = False

    def renew_due(self) -> bool:
        return False  # nothing to renew: the process that counts it is the one serving it

    def renew(self) -> None:
        """Nothing to renew."""

    def release(self) -> None:
        with self._slots.lock:
            if not self._released:
                self._released = True
                self._slots.open[self._tenant] -= 1
                if self._slots.open[self._tenant] <= 0:
                    del self._slots.open[self._tenant]


class LocalStreamSlots:
    """Open event streams per tenant in this process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: Counter[str] = Counter()

    def acquire(self, tenant: str, cap: int) -> StreamSlot:
        with self.lock:
            if self.open[tenant] >= cap:
                raise too_many(self.open[tenant], cap)
            self.open[tenant] += 1
        return LocalSlot(self, tenant)

    def close(self) -> None:
        """Nothing held outside the process."""


class RedisSlot:
    def __init__(self, slots: RedisStreamSlots, key: str, slot_id: str):
        self._slots = slots
        self._key = key
        self._id = slot_id
        self._renewed = time.monotonic()
        self._released = False

    def renew_due(self) -> bool:
        return time.monotonic() - self._renewed >= self._slots.ttl / 3

    def renew(self) -> None:
        """Extends the slot's lease (the stream calls it once a third of the lease has passed)."""
        self._renewed = time.monotonic()  # also after a failure: the next try is a third of a lease later
        try:
            self._slots.renew_script(keys=[self._key], args=[self._id, self._slots.ttl])
        except Exception:  # noqa: BLE001 - a lapsed slot only lets the tenant open one stream more
            logger.warning("could not renew an event stream slot in Redis", exc_info=True)

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        try:
            self._slots.client.zrem(self._key, self._id)
        except Exception:  # noqa: BLE001 - the slot lapses after its TTL
            logger.warning("could not release an event stream slot in Redis; it lapses in %g s", self._slots.ttl,
                           exc_info=True)


class RedisStreamSlots:
    """Open event streams per tenant, shared by every API process through Redis (see the module docstring)."""

    def __init__(self, settings: Settings):
        self.client: Any = redis_client(settings)
        self.namespace = settings.queue  # one deployment's queue name: tests and tenants of another stay apart
        self.ttl = settings.stream_slot_ttl_seconds
        self.acquire_script = self.client.register_script(_ACQUIRE)
        self.renew_script = self.client.register_script(_RENEW)
        self.fallback = LocalStreamSlots()

    def key(self, tenant: str) -> str:
        return f"parvis:{self.namespace}:streams:{tenant}"

    def acquire(self, tenant: str, cap: int) -> StreamSlot:
        key, slot_id = self.key(tenant), uuid.uuid4().hex
        try:
            open_count = int(self.acquire_script(keys=[key], args=[cap, slot_id, self.ttl]))
        except Exception:  # noqa: BLE001 - Redis down: count in this process rather than refuse every stream
            logger.warning("Redis unreachable for stream slots; counting this stream in the process", exc_info=True)
            return self.fallback.acquire(tenant, cap)
        if open_count >= 0:
            raise too_many(open_count, cap)
        return RedisSlot(self, key, slot_id)

    def close(self) -> None:
        self.client.close()


def make_stream_slots(settings: Settings) -> LocalStreamSlots | RedisStreamSlots:
    if settings.redis_broker:
        return RedisStreamSlots(settings)
    return LocalStreamSlots()
