"""Shared dependencies: settings, DB session, artifact store, task sender, and the current tenant."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

from celery import Celery
from fastapi import Depends, Request
from sqlalchemy.orm import Session

from app.api.problems import Problem
from service.api_keys import LOCAL_TENANT, tenant_for_bearer
from service.settings import Settings
from service.store import ArtifactStore


def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


async def get_session(request: Request) -> AsyncIterator[Session]:
    """A request's session, once one of `session_gate`'s slots (as many as the pool has connections) is free,
    closed as soon as the route has built its response (`scope="function"` below), before the body is sent: a
    slow client or a streamed body never holds a pooled connection. The wait is on the event loop, not in a
    threadpool thread: sync endpoints waiting for a pooled connection in every thread, while finished requests
    held the connections until a thread was free to serialise their answers, deadlocked bursts of polls for the
    pool's 30 s timeout. A request that waits more than `db_wait_seconds` for a slot is shed: 503 `overloaded`."""
    gate = request.app.state.session_gate
    try:
        await asyncio.wait_for(gate.acquire(), request.app.state.settings.db_wait_seconds)
    except TimeoutError:
        raise Problem(503, "overloaded", "every database connection of this API process is busy; retry shortly",
                      headers={"Retry-After": "1"}) from None
    try:
        session = request.app.state.session_factory()
        try:
            yield session
        finally:
            # Closing rolls back and returns the connection: a database round trip, run in a thread so that the
            # event loop, which every request needs, never waits on the database (this teardown runs on the loop).
            await asyncio.to_thread(session.close)
    finally:
        gate.release()


def get_store(request: Request) -> ArtifactStore:
    return request.app.state.store


def get_sender(request: Request) -> Celery:
    return request.app.state.celery


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
StoreDep = Annotated[ArtifactStore, Depends(get_store)]
SenderDep = Annotated[Celery, Depends(get_sender)]


def get_current_tenant(request: Request, settings: SettingsDep) -> str:
    """The tenant AuthMiddleware found for the request's key (before the body was read); the lookup is
    repeated here only for an app built without that middleware."""
    if not settings.auth_enabled:
        return LOCAL_TENANT
    tenant = getattr(request.state, "tenant", None)
    if tenant is None:
        tenant = tenant_for_bearer(request.app.state.session_factory, request.headers.get("authorization", ""))
    if tenant is None:
        raise Problem(401, "unauthorized", "a valid API key is required: Authorization: Bearer <key>",
                      headers={"WWW-Authenticate": "Bearer"})
    return tenant


CurrentTenant = Annotated[str, Depends(get_current_tenant)]
