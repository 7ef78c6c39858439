"""Liveness (process up) and readiness (database, broker and at least one live worker)."""

from __future__ import annotations

import os

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.api.deps import SenderDep, SessionDep, SettingsDep
from app.api.schemas import Health
from service.workers_seen import live_workers

router = APIRouter(prefix="/v1/health", tags=["health"])


@router.get("/live", response_model=Health)
def live() -> Health:
    # pid: which process of `parvis api --workers N` answered.
    return Health(status="ok", checks={"pid": os.getpid()})


@router.get("/ready", response_model=Health, responses={503: {"model": Health}})
def ready(request: Request, session: SessionDep, settings: SettingsDep, sender: SenderDep) -> JSONResponse:
    # warm: torch and the samplers are imported (start-up warm-up); informative, readiness does not wait on it.
    checks: dict[str, object] = {"warm": request.app.state.compute.warm.is_set()}
    try:
        workers = live_workers(session, settings.heartbeat_seconds)
        checks["database"] = "ok"
        checks["workers"] = workers
    except Exception:  # noqa: BLE001 - readiness reports, it does not raise
        checks["database"] = "unreachable"
        checks["workers"] = 0
    session.close()  # the connection goes back to the pool before the broker check (up to 2 s)
    try:
        with sender.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=2)
        checks["broker"] = "ok"
    except Exception:  # noqa: BLE001
        checks["broker"] = "unreachable"
    ok = checks["database"] == "ok" and checks["broker"] == "ok" and checks["workers"] >= 1  # type: ignore[operator]
    body = Health(status="ok" if ok else "unavailable", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)
