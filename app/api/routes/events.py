"""Server-Sent Events for one job: a `job` event whenever its state, progress or metrics change, comment
heartbeats in between, and the stream ends after the job reaches a terminal state.

A stream holds no database connection between its reads: the ownership check and each snapshot open and
close their own short session. Open streams are capped per tenant (`max_streams_per_tenant`), counted across
API processes on the cluster shape (app/api/stream_slots.py).

With authentication on, the stream's API key is looked up again every KEY_RECHECK_SECONDS: once it is revoked
(or deleted), the stream sends one `event: error` whose data is a problem body (`code` `unauthorized`) and
ends, so a revoked key stops reading within about a second, not at its next request."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from app.api.deps import CurrentTenant, SettingsDep
from app.api.problems import DATABASE_UNAVAILABLE_ERRORS, request_id_of
from app.api.stream_slots import StreamSlot
from app.api.views import job_out
from service.api_keys import tenant_for_bearer
from service.models import TERMINAL_STATUSES
from service.repositories import Jobs

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

HEARTBEAT_SECONDS = 15.0
KEY_RECHECK_SECONDS = 1.0


class SlotStreamingResponse(StreamingResponse):
    """Gives its stream slot back however the response ends: terminal event, client gone, or error."""

    def __init__(self, content: AsyncIterator[str], slot: StreamSlot, **kwargs: Any):
        super().__init__(content, **kwargs)
        self._slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await run_in_threadpool(self._slot.release)  # a Redis call on the cluster shape


@router.get("/{job_id}/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}},
                       429: {"description": "the tenant has `max_streams_per_tenant` streams open (too_many_streams)"}})
def job_events(
    job_id: str,
    request: Request,
    tenant: CurrentTenant,
    settings: SettingsDep,
    poll_seconds: Annotated[float, Query(ge=0.1, le=10.0)] = 0.5,
) -> StreamingResponse:
    factory = request.app.state.session_factory
    with factory() as session:  # closed before the stream starts
        Jobs(session, tenant).owned(job_id)  # 404 before the stream starts
    slot = request.app.state.stream_slots.acquire(tenant, settings.max_streams_per_tenant)
    # A shared slot is leased for `stream_slot_ttl_seconds` and renewed between reads: read at least thrice a TTL.
    poll_seconds = min(poll_seconds, settings.stream_slot_ttl_seconds / 3)

    def snapshot() -> dict | None:
        """The job as the client sees it, or None while the database is unreachable (the stream waits)."""
        try:
            with factory() as own:  # closed (connection back in the pool) before any serialising
                jobs = Jobs(own, tenant)
                job = jobs.owned(job_id)
                sampler_id = jobs.sampler_ids([job.id]).get(job.id)
            return job_out(job, sampler_id).model_dump(mode="json", exclude={"spec"})
        except DATABASE_UNAVAILABLE_ERRORS:
            return None

    authorization = request.headers.get("authorization", "") if settings.auth_enabled else None

    def key_revoked() -> bool:
        """True once the request's key no longer names this tenant (revoked or deleted); False while the
        database is unreachable (the stream waits, as for a snapshot)."""
        try:
            return tenant_for_bearer(factory, authorization or "") != tenant
        except DATABASE_UNAVAILABLE_ERRORS:
            return False

    async def stream() -> AsyncIterator[str]:
        last = None
        last_sent = time.monotonic()
        next_key_check = last_sent + KEY_RECHECK_SECONDS  # the middleware has just looked the key up
        event_id = 0
        while not await request.is_disconnected():
            if slot.renew_due():
                await run_in_threadpool(slot.renew)
            if authorization is not None and time.monotonic() >= next_key_check:
                next_key_check = time.monotonic() + KEY_RECHECK_SECONDS
                if await run_in_threadpool(key_revoked):
                    yield f"id: {event_id + 1}\nevent: error\ndata: {json.dumps(revoked_problem(request))}\n\n"
                    return
            state = await run_in_threadpool(snapshot)
            if state is not None and state != last:
                event_id += 1
                yield f"id: {event_id}\nevent: job\ndata: {json.dumps(state)}\n\n"
                last, last_sent = state, time.monotonic()
                if state["status"] in TERMINAL_STATUSES:
                    return
            elif time.monotonic() - last_sent > HEARTBEAT_SECONDS:
                yield ": keep-alive\n\n"
                last_sent = time.monotonic()
            await asyncio.sleep(poll_seconds)

    try:
        return SlotStreamingResponse(stream(), slot, media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    except BaseException:
        slot.release()
        raise


def revoked_problem(request: Request) -> dict[str, Any]:
    """The data of the `error` event that ends a stream whose key was revoked: a problem body."""
    return {"type": "urn:parvis:problem:unauthorized", "title": "Unauthorized", "status": 401,
            "detail": "the API key of this stream was revoked; the stream ends", "code": "unauthorized",
            "request_id": request_id_of(request)}
