"""Per-process resources for the worker (engine, session factory, store, sender), built once on demand."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from celery import Celery
from sqlalchemy.orm import Session, sessionmaker

from service.db import make_engine, make_session_factory
from service.queue import make_celery
from service.settings import Settings, get_settings
from service.store import ArtifactStore, make_store


@dataclass
class WorkerContext:
    settings: Settings
    sessions: sessionmaker[Session]
    store: ArtifactStore
    sender: Celery


@lru_cache
def worker_context() -> WorkerContext:
    settings = get_settings()
    return WorkerContext(
        settings=settings,
        sessions=make_session_factory(make_engine(settings.database_url)),
        store=make_store(settings.artifacts_url, settings),
        sender=make_celery(settings, main="parvis-worker-sender"),
    )


def reset_worker_context() -> None:
    """Forget resources inherited across fork (a pool child must open its own connections)."""
    worker_context.cache_clear()
