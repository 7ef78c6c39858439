"""Retention: when jobs, samplers and data sets expire, and the sweep that deletes them and their bytes.

A row's `expires_at` is fixed at creation (creation time + the tenant's retention; null = kept forever).
Expired rows answer 410 until a sweep deletes them; after that they are unknown ids (404).
What a sweep never deletes: a queued or running job (it expires once it has finished) and a data set that a
queued or running job uses. A trained sampler goes with its job (foreign-key cascade), bytes included.

Rows are deleted first and bytes after the commit, so nothing readable ever points at missing bytes; bytes
whose deletion fails are left behind (logged), never a row without its bytes. Every delete is conditional on
the row still being expired and idle, so sweeps in several workers at once are harmless.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, delete, or_, select
from sqlalchemy.orm import Session

from app.data.models import (
    JOB_STATUSES,
    TERMINAL_STATUSES,
    Artifact,
    DatasetRecord,
    Job,
    JobDataset,
    Sampler,
    utcnow,
)
from app.data.settings import Settings
from app.data.store import ArtifactStore

logger = logging.getLogger("parvis.retention")

FINISHED = tuple(sorted(TERMINAL_STATUSES))
ACTIVE = tuple(status for status in JOB_STATUSES if status not in TERMINAL_STATUSES)


def retention_for(settings: Settings, tenant_id: str) -> timedelta | None:
    """The tenant's retention (its override, else the default); None when it keeps everything forever."""
    days = settings.retention_days_by_tenant.get(tenant_id, settings.retention_days)
    return timedelta(days=days) if days > 0 else None


def expires_at_for(settings: Settings, tenant_id: str, now: datetime | None = None) -> datetime | None:
    retention = retention_for(settings, tenant_id)
    return (now or utcnow()) + retention if retention is not None else None


def is_expired(expires_at: datetime | None, now: datetime | None = None) -> bool:
    return expires_at is not None and expires_at <= (now or utcnow())


def job_is_expired(job: Job, now: datetime | None = None) -> bool:
    """A queued or running job never counts as expired: its expiry waits until it has finished."""
    return job.status in TERMINAL_STATUSES and is_expired(job.expires_at, now)


def job_is_live(now: datetime) -> ColumnElement[bool]:
    """SQL filter for the jobs a listing shows: not expired (see job_is_expired)."""
    return or_(Job.expires_at.is_(None), Job.expires_at > now, Job.status.in_(ACTIVE))


def not_expired(column: Any, now: datetime) -> ColumnElement[bool]:
    """SQL filter on an `expires_at` column: no expiry, or still in the future."""
    return or_(column.is_(None), column > now)


@dataclass
class SweepResult:
    jobs: list[str] = field(default_factory=list)
    samplers: list[str] = field(default_factory=list)
    datasets: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.jobs or self.samplers or self.datasets)


def _datasets_in_use():  # noqa: ANN202 - a SQLAlchemy select
    return select(JobDataset.dataset_id).join(Job, Job.id == JobDataset.job_id).where(Job.status.in_(ACTIVE))


def sweep_expired(session: Session, store: ArtifactStore, now: datetime | None = None,
                  limit: int = 200) -> SweepResult:
    """Delete up to `limit` expired jobs, samplers and data sets each (the next sweep takes the rest)."""
    now = now or utcnow()
    result = SweepResult()

    job_ids = session.execute(select(Job.id).where(Job.expires_at <= now, Job.status.in_(FINISHED))
                              .limit(limit)).scalars().all()
    for job_id in job_ids:
        sampler_ids = list(session.execute(select(Sampler.id).where(Sampler.job_id == job_id)).scalars())
        paths = list(session.execute(select(Artifact.path).where(
            or_(Artifact.job_id == job_id, Artifact.sampler_id.in_(sampler_ids)))).scalars())
        gone = session.execute(delete(Job).where(Job.id == job_id, Job.expires_at <= now,
                                                 Job.status.in_(FINISHED))).rowcount
        session.commit()
        if gone:
            _delete_bytes(store, [*paths, f"jobs/{job_id}", *(f"samplers/{s}" for s in sampler_ids)])
            result.jobs.append(job_id)

    sampler_ids = session.execute(select(Sampler.id).where(Sampler.expires_at <= now).limit(limit)).scalars().all()
    for sampler_id in sampler_ids:
        paths = list(session.execute(select(Artifact.path).where(Artifact.sampler_id == sampler_id)).scalars())
        gone = session.execute(delete(Sampler).where(Sampler.id == sampler_id, Sampler.expires_at <= now)).rowcount
        session.commit()
        if gone:
            _delete_bytes(store, [*paths, f"samplers/{sampler_id}"])
            result.samplers.append(sampler_id)

    dataset_ids = session.execute(select(DatasetRecord.id).where(
        DatasetRecord.expires_at <= now, DatasetRecord.id.not_in(_datasets_in_use())).limit(limit)).scalars().all()
    for dataset_id in dataset_ids:
        paths = list(session.execute(select(Artifact.path).where(Artifact.dataset_id == dataset_id)).scalars())
        # "No active job uses it" is re-checked in the DELETE itself: a job that took it up since is honoured.
        gone = session.execute(delete(DatasetRecord).where(
            DatasetRecord.id == dataset_id, DatasetRecord.expires_at <= now,
            DatasetRecord.id.not_in(_datasets_in_use()))).rowcount
        session.commit()
        if gone:
            _delete_bytes(store, [*paths, f"datasets/{dataset_id}"])
            result.datasets.append(dataset_id)
    return result


def _delete_bytes(store: ArtifactStore, prefixes: list[str]) -> None:
    for prefix in prefixes:
        try:
            store.delete_prefix(prefix)
        except Exception:  # noqa: BLE001 - the row is gone already; leftover bytes are only wasted space
            logger.warning("retention: could not delete artifact bytes under %s", prefix, exc_info=True)
