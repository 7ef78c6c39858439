"""Shared dependencies: settings, DB session, artifact store, task sender, and the current tenant."""

from __future__ import annotations

from collections.abc import Iterator
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


def get_session(request: Request) -> Iterator[Session]:
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


def get_current_tenant(request: Request, settings: SettingsDep, session: SessionDep) -> str:
    if not settings.auth_enabled:
        return LOCAL_TENANT
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    tenant = tenant_for_key(session, key.strip()) if scheme.lower() == "bearer" and key else None
    session.rollback()  # the lookup's connection goes back to the pool: the route may compute for long
    if tenant is None:
        raise Problem(401, "unauthorized", "a valid API key is required: Authorization: Bearer <key>",
                      headers={"WWW-Authenticate": "Bearer"})
    return tenant


CurrentTenant = Annotated[str, Depends(get_current_tenant)]
