"""Shared dependencies: settings, DB session, artifact store, task sender, and the current tenant."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from celery import Celery
from fastapi import Depends, Request
from sqlalchemy.orm import Session

from app.api.auth import LOCAL_TENANT, tenant_for_key
from app.api.problems import Problem
from app.data.settings import Settings
from app.data.store import ArtifactStore


def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


async def get_session(request: Request) -> AsyncIterator[Session]:
    """A request's session, once one of `session_gate`'s slots (as many as the pool has connections) is free.
    The wait is on the event loop, not in a threadpool thread: sync endpoints waiting for a pooled connection
    in every thread, while finished requests held the connections until a thread was free to serialise their
    answers, deadlocked bursts of polls for the pool's 30 s timeout."""
    async with request.app.state.session_gate:
        session = request.app.state.session_factory()
        try:
            yield session
        finally:
            session.close()


def get_store(request: Request) -> ArtifactStore:
    return request.app.state.store


def get_sender(request: Request) -> Celery:
    return request.app.state.celery


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
SessionDep = Annotated[Session, Depends(get_session)]
StoreDep = Annotated[ArtifactStore, Depends(get_store)]
SenderDep = Annotated[Celery, Depends(get_sender)]


def get_current_tenant(request: Request, settings: SettingsDep) -> str:
    if not settings.auth_enabled:
        return LOCAL_TENANT
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    tenant = None
    if scheme.lower() == "bearer" and key:
        # Its own short session: a route that computes for long (/sample) holds no connection for the lookup.
        with request.app.state.session_factory() as session:
            tenant = tenant_for_key(session, key.strip())
    if tenant is None:
        raise Problem(401, "unauthorized", "a valid API key is required: Authorization: Bearer <key>",
                      headers={"WWW-Authenticate": "Bearer"})
    return tenant


CurrentTenant = Annotated[str, Depends(get_current_tenant)]
