"""Server-Sent Events for one job: a `job` event whenever its state, progress or metrics change, comment
heartbeats in between, and the stream ends after the job reaches a terminal state."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from app.api.deps import CurrentTenant, SessionDep
from app.api.routes.jobs import job_out, owned_job
from app.data.models import TERMINAL_STATUSES

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

HEARTBEAT_SECONDS = 15.0


@router.get("/{job_id}/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}}})
def job_events(
    job_id: str,
    request: Request,
    session: SessionDep,
    tenant: CurrentTenant,
    poll_seconds: Annotated[float, Query(ge=0.1, le=10.0)] = 0.5,
) -> StreamingResponse:
    owned_job(session, tenant, job_id)  # 404 before the stream starts
    factory = request.app.state.session_factory

    def snapshot() -> dict:
        with factory() as own:
            return job_out(owned_job(own, tenant, job_id)).model_dump(mode="json", exclude={"spec"})

    async def stream() -> AsyncIterator[str]:
        last = None
        last_sent = time.monotonic()
        event_id = 0
        while not await request.is_disconnected():
            state = await run_in_threadpool(snapshot)
            if state != last:
                event_id += 1
                yield f"id: {event_id}\nevent: job\ndata: {json.dumps(state)}\n\n"
                last, last_sent = state, time.monotonic()
                if state["status"] in TERMINAL_STATUSES:
                    return
            elif time.monotonic() - last_sent > HEARTBEAT_SECONDS:
                yield ": keep-alive\n\n"
                last_sent = time.monotonic()
            await asyncio.sleep(poll_seconds)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
