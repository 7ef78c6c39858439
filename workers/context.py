"""Per-process resources for the worker (engine, session factory, store, sender), built once on demand."""

from __future__ import annotations

import os
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


def torch_threads(settings: Settings, concurrency: int) -> int:
    """torch intra-op threads for one worker process: `worker_torch_threads`, or when 0, the cores this process
    may use less one (the API, Celery's main process) shared among the `concurrency` pool processes, at least 1."""
    if settings.worker_torch_threads > 0:
        return settings.worker_torch_threads
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, (cores - 1) // max(1, concurrency))


def apply_torch_threads(settings: Settings, concurrency: int) -> int:
    """Set torch's intra-op thread count in this process (before its first job); returns torch's count after."""
    import torch

    torch.set_num_threads(torch_threads(settings, concurrency))
    return torch.get_num_threads()
