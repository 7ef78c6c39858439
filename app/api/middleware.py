"""Pure ASGI middleware: request ids, authentication and body-size and body-time limits, all enforced before a
body is read in full.

Starlette imposes no body limit of its own (starlette#2155), so oversized uploads are refused here: at once
from Content-Length, or as soon as a streamed body passes the limit. FastAPI reads a body before any
dependency runs, so the API key is checked here too (401 before a single body byte is read), and a body that
stalls or trickles gets 408 instead of holding the connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections import deque
from collections.abc import Callable
from http import HTTPStatus

import anyio
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api_keys import tenant_for_bearer
from service.logging_config import bind_log_context

logger = logging.getLogger("parvis.api")
PUBLIC_PREFIXES = ("/v1/health/", "/v1/openapi.json", "/v1/docs", "/metrics", "/ui")
"""Paths served without an API key (liveness probes, the API description and its viewer, Prometheus
`/metrics`, which has its own optional token, and the dashboard's page and assets, which hold no data: its
data calls carry the key)."""

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._\-]{1,64}$")


class ResponseStart:
    """`send`, noting whether the response has started and with which status (500 until then: what the client
    gets if the app raises before answering). Shared by the middleware that must not answer twice or that
    records the status."""

    def __init__(self, send: Send):
        self._send = send
        self.started = False
        self.status = 500

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            self.status = int(message["status"])
        await self._send(message)


class RequestObserverMiddleware:
    """Calls `observe(scope, status, seconds)` once every HTTP request has ended, however it ended (the access
    log, the latency histogram)."""

    def __init__(self, app: ASGIApp, observe: Callable[[Scope, int, float], None]):
        self.app = app
        self.observe = observe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        response = ResponseStart(send)
        try:
            await self.app(scope, receive, response)
        finally:
            self.observe(scope, response.status, time.perf_counter() - started)


class RequestIdMiddleware:
    """Accept a sane client `X-Request-ID` or make one; expose it to handlers and echo it back."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _REQUEST_ID.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        bind_log_context(request_id=request_id)  # this request's task only: its log lines carry the id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            await send(message)

        await self.app(scope, receive, send_with_id)


class _BodyTooLarge(HTTPException):
    """An HTTPException, so FastAPI's body parsing re-raises it as is instead of turning it into a 400."""


class BodyLimitMiddleware:
    """413 for bodies over `limit_for(path)` bytes."""

    def __init__(self, app: ASGIApp, limit_for: Callable[[str], int]):
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._reject(scope, send, limit)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _BodyTooLarge(413, f"request body is over the limit of {limit} bytes")
            return message

        response = ResponseStart(send)
        try:
            await self.app(scope, limited_receive, response)
        except _BodyTooLarge:
            if not response.started:
                await self._reject(scope, send, limit)

    @staticmethod
    async def _reject(scope: Scope, send: Send, limit: int) -> None:
        await send_problem(scope, send, 413, "payload_too_large", f"request body is over the limit of {limit} bytes")


#: Seconds an overloaded client is asked to wait (503 `overloaded`): short, since the refusal is immediate.
OVERLOAD_RETRY_AFTER_S = 1


UNMEASURED_SUFFIXES = ("/density",)  # computing GETs (event streams are not counted at all)


class InFlightLimitMiddleware:
    """503 `overloaded` + Retry-After at once when this process already holds `limit` requests, so a slow or busy
    machine answers with quick refusals instead of queueing requests for tens of seconds. Two time bounds (0: off,
    the default: on at 0.25 s they refused 2% at the target rate and did not shorten the 2x median) shed earlier: the event loop running more than `max_loop_lag` behind, and a standing queue inside the process
    (`max_wait`, CoDel's test below). Both need ALWAYS_ADMITTED requests in flight (a slow machine serving a few
    requests is not overloaded) and are armed only ARM_AFTER_WARM_S after the compute pool's warm-up (torch's
    import): a cold start's burst, admitted while the import holds the GIL, is served, not shed. Measured at 2x
    the target rate on 2 shared cores (docs/benchmarks.md): most of the wait was inside the app, behind the
    admitted requests, not in the loop. Probes (`/v1/health/`, `/metrics`) and event streams (long-lived, capped
    per tenant on their own) are not counted."""

    LAG_SAMPLE_S = 0.02
    LAG_SAMPLES = 3  # shed on a lag that lasts (the least of the last three), not on one pause such as a GIL-holding import

    SOJOURN_WINDOW_S = 0.1
    ALWAYS_ADMITTED = 8  # requests in flight below which nothing is shed for time (slow routes alone run on)
    ARM_AFTER_WARM_S = 2.0  # the backlog a cold start admitted drains before its wait counts as a standing queue

    def __init__(self, app: ASGIApp, limit: int, max_loop_lag: float = 0.0, max_wait: float = 0.0,
                 running: int = 0, slot_wait: float = 0.0):
        self.app = app
        self.limit = max(1, limit)
        #: `running` handlers at once (0: no bound): the admitted rest wait for a slot, FIFO, holding nothing
        self.slots = asyncio.Semaphore(running) if running > 0 else None
        #: once armed, a request that waited this long for a slot is refused (0: it waits)
        self.slot_wait = slot_wait
        self.max_loop_lag = max_loop_lag
        self.max_wait = max_wait
        self.in_flight = 0
        # CoDel's test for a standing queue: the quickest request of the last window took longer than max_wait to
        # be answered, so every request waited at least that long somewhere inside the process.
        self.standing_wait = 0.0
        self._window_min = float("inf")
        self._window_end = 0.0
        self.loop_lag = 0.0  # the least of the last LAG_SAMPLES measurements
        self._lags: deque[float] = deque(maxlen=self.LAG_SAMPLES)
        self._watcher: asyncio.Task | None = None
        self._warm_since: float | None = None

    async def _watch_loop_lag(self) -> None:
        """How late a short sleep wakes: the time a callback queued now waits for the loop."""
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await asyncio.sleep(self.LAG_SAMPLE_S)
            self._lags.append(max(0.0, loop.time() - started - self.LAG_SAMPLE_S))
            self.loop_lag = min(self._lags) if len(self._lags) == self.LAG_SAMPLES else 0.0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path.startswith(("/v1/health/", "/metrics")) or path.endswith("/events"):
            await self.app(scope, receive, send)
            return
        if self.max_loop_lag > 0 and (self._watcher is None or self._watcher.done()):
            self._watcher = asyncio.get_running_loop().create_task(self._watch_loop_lag())
        now = time.monotonic()
        if now > self._window_end + self.SOJOURN_WINDOW_S:
            self.standing_wait = 0.0  # nothing answered for a while: no evidence of a queue
        why = None
        timed = self.in_flight >= self.ALWAYS_ADMITTED and self._armed(scope, now)
        if self.in_flight >= self.limit:
            why = f"this API process is at its limit of {self.limit} requests in flight"
        elif timed and self.max_loop_lag > 0 and self.loop_lag > self.max_loop_lag:
            why = f"this API process is {self.loop_lag * 1e3:.0f} ms behind its work"
        elif timed and self.max_wait > 0 and self.standing_wait > self.max_wait:
            why = f"requests wait at least {self.standing_wait * 1e3:.0f} ms in this API process"
        if why is not None:
            # The connection stays open (its small unread body, if any, is read and dropped by the server's
            # parser): closed, every refused client paid a new connection on both sides. Side by side at 2x the
            # target rate (client on its own core, limit 64): 4,560 served, p99 695 ms kept open; 4,093, 822 ms
            # closed; within the runs' spread (another run kept open: 3,940, 1,048 ms).
            await send_problem(scope, send, 503, "overloaded", f"{why}; retry shortly",
                               [(b"retry-after", str(OVERLOAD_RETRY_AFTER_S).encode())], keep_alive=small_body(scope))
            return
        self.in_flight += 1  # one event loop per process: no lock needed
        # Only reads that do no computing measure the queue: their time to the first byte is mostly waiting;
        # a /predict or a density grid is slow by its nature, and shedding on it would refuse a cold burst of them.
        measured = self.max_wait > 0 and scope.get("method") == "GET" and not path.endswith(UNMEASURED_SUFFIXES)

        async def timed_send(message: Message) -> None:
            if measured and message["type"] == "http.response.start":
                at = time.monotonic()
                self._record(at, at - now)
            await send(message)

        slot = (HandlerSlot(self.slots) if self.slots is not None and not path.endswith(UNSLOTTED_SUFFIXES)
                else None)
        try:
            bounded = self.slot_wait > 0 and self._armed(scope, now)  # every request notices the warm-up
            if slot is not None and not await slot.take(self.slot_wait if bounded else 0.0):
                await send_problem(scope, send, 503, "overloaded",
                                   f"no handler of this API process was free within {self.slot_wait * 1e3:.0f} ms; "
                                   "retry shortly", [(b"retry-after", str(OVERLOAD_RETRY_AFTER_S).encode())],
                                   keep_alive=small_body(scope))
                return
            downstream = timed_send if measured else send
            await self.app(scope, receive, downstream if slot is None else slot.releasing(downstream))
        finally:
            self.in_flight -= 1
            if slot is not None:
                slot.release()

    def _armed(self, scope: Scope, now: float) -> bool:
        """Whether the time bounds apply: ARM_AFTER_WARM_S after the compute pool's warm-up (at once for an app
        without one)."""
        if self._warm_since is None:
            compute = getattr(getattr(scope.get("app"), "state", None), "compute", None)
            warm = getattr(compute, "warm", None)
            if warm is not None and not warm.is_set():
                return False
            self._warm_since = now - (self.ARM_AFTER_WARM_S if warm is None else 0.0)
        return now - self._warm_since >= self.ARM_AFTER_WARM_S

    def _record(self, at: float, waited: float) -> None:
        if at > self._window_end:
            if self._window_min != float("inf"):
                self.standing_wait = self._window_min
            self._window_min, self._window_end = waited, at + self.SOJOURN_WINDOW_S
        else:
            self._window_min = min(self._window_min, waited)


#: Routes whose work runs in the compute pool (bounded by its own queue) or streams: they take no handler slot.
UNSLOTTED_SUFFIXES = ("/sample", "/predict", "/density", "/validate", "/datasets")


class HandlerSlot:
    """One request's hold on a handler slot (`InFlightLimitMiddleware.slots`): taken before the app runs, given
    back once the response has started (its body, a download or a stream, is I/O, not the handler's work, and a
    slow reader must not hold a slot) or when the request ends, whichever comes first."""

    def __init__(self, slots: asyncio.Semaphore):
        self.slots = slots
        self.held = False

    async def take(self, wait: float) -> bool:
        """Acquire, waiting at most `wait` seconds (0: as long as it takes); False when it timed out."""
        try:
            if wait > 0:
                await asyncio.wait_for(self.slots.acquire(), wait)
            else:
                await self.slots.acquire()
        except TimeoutError:
            return False
        self.held = True
        return True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.slots.release()

    def releasing(self, send: Send) -> Send:
        async def send_and_release(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.release()
            await send(message)
        return send_and_release


#: A refused request whose body is at most this long (declared) keeps its connection: the server's parser reads
#: and drops the rest of it; a longer or chunked one closes the connection rather than read what it refused.
KEEP_ALIVE_UNREAD_BODY_BYTES = 64 * 1024


def small_body(scope: Scope) -> bool:
    """The request declares a body of at most KEEP_ALIVE_UNREAD_BODY_BYTES (or none): not chunked."""
    for name, value in scope.get("headers", []):
        if name == b"transfer-encoding":
            return False
        if name == b"content-length":
            try:
                return int(value) <= KEEP_ALIVE_UNREAD_BODY_BYTES
            except ValueError:
                return False
    return True


async def send_problem(scope: Scope, send: Send, status: int, code: str, detail: str,
                       headers: list[tuple[bytes, bytes]] | None = None, keep_alive: bool = False) -> None:
    """A problem+json answer sent from middleware, closing the connection (the body may be left unread) unless
    `keep_alive`."""
    request_id = scope.get("state", {}).get("request_id", "")
    body = json.dumps({
        "type": f"urn:parvis:problem:{code}",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "code": code,
        "request_id": request_id,
    }).encode()
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/problem+json"), (b"content-length", str(len(body)).encode()),
                    *([] if keep_alive else [(b"connection", b"close")]), *(headers or [])],
    })
    await send({"type": "http.response.body", "body": body})


def is_public(path: str) -> bool:
    return path.startswith(PUBLIC_PREFIXES)


class AuthMiddleware:
    """With authentication on, every path but the public ones needs `Authorization: Bearer <key>`: the key is
    looked up (in a thread, on a short session of its own, no cache: a revoked key fails at its next request)
    before the app runs, so a bad key gets 401 before any body byte is read. The tenant goes to
    `scope["state"]["tenant"]`, where `deps.get_current_tenant` finds it."""

    def __init__(self, app: ASGIApp, enabled: bool):
        self.app = app
        self.enabled = enabled

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.enabled or is_public(scope["path"]):
            await self.app(scope, receive, send)
            return
        header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        try:
            tenant = await anyio.to_thread.run_sync(tenant_for_bearer, scope["app"].state.session_factory, header)
        except SQLAlchemyError:
            logger.exception("API key lookup failed")
            await send_problem(scope, send, 503, "database_unavailable",
                               "the database is unavailable; retry later", [(b"retry-after", b"5")])
            return
        if tenant is None:
            await send_problem(scope, send, 401, "unauthorized",
                               "a valid API key is required: Authorization: Bearer <key>",
                               [(b"www-authenticate", b"Bearer")])
            return
        scope.setdefault("state", {})["tenant"] = tenant
        await self.app(scope, receive, send)


class _BodyReadTimeout(HTTPException):
    """An HTTPException, so FastAPI's body parsing re-raises it as is (problem handler: 408 request_timeout)."""


class BodyReadTimeoutMiddleware:
    """408 when a request body has not arrived in full `timeout_for()` seconds after the app first asks for it
    (a stalled or trickling upload must not hold a connection and a worker thread indefinitely). Once the
    body is complete, later reads (a streaming response waiting for the client to go) are not timed."""

    def __init__(self, app: ASGIApp, timeout_for: Callable[[], float]):
        self.app = app
        self.timeout_for = timeout_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        timeout = self.timeout_for()
        deadline: float | None = None
        body_complete = False

        async def timed_receive() -> Message:
            nonlocal deadline, body_complete
            if body_complete:
                return await receive()
            if deadline is None:
                deadline = anyio.current_time() + timeout
            message = None
            with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
                message = await receive()
            if message is None:
                raise _BodyReadTimeout(408, f"the request body did not arrive within {timeout:g} s",
                                       headers={"Connection": "close"})
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_complete = True
            return message

        response = ResponseStart(send)
        try:
            await self.app(scope, timed_receive, response)
        except _BodyReadTimeout as exc:
            if not response.started:
                await send_problem(scope, send, 408, "request_timeout", str(exc.detail))
