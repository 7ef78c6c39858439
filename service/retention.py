"""Retention: when jobs, samplers and data sets expire, and the sweep that deletes them and their bytes.

A row's `expires_at` is fixed at creation: creation time + the tenant's retention (null = kept forever), or
+ the `retention_seconds` the client asked for (at most `max_retention_for`); a sampler gets its job's.
Expired rows answer 410 until a sweep deletes them; after that they are unknown ids (404).
What a sweep never deletes: a queued or running job (it expires once it has finished) and a data set that a
queued or running job uses. A trained sampler goes with its job (foreign-key cascade), bytes included.

Rows are deleted first and bytes after the commit, so nothing readable ever points at missing bytes. The
commit that deletes the rows also records their bytes as `pending_deletions`; a record goes once its bytes
are gone, so bytes whose deletion fails (store down, a crash in between) are retried by every later sweep
until they go: never a row without its bytes, and no bytes orphaned for good. Every delete is conditional on
the row still being expired and idle, so sweeps in several workers at once are harmless.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, delete, or_, select, update
from sqlalchemy.orm import Session

from service.models import (
    JOB_STATUSES,
    TERMINAL_STATUSES,
    Artifact,
    DatasetRecord,
    Job,
    JobDataset,
    PendingDeletion,
    Sampler,
    utcnow,
)
from service.settings import Settings
from service.store import ArtifactStore

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


def max_retention_for(settings: Settings, tenant_id: str) -> timedelta | None:
    """The longest retention a client may ask for (`retention_seconds`): `max_retention_days` when set, else
    the tenant's own retention; None when unbounded."""
    if settings.max_retention_days > 0:
        return timedelta(days=settings.max_retention_days)
    return retention_for(settings, tenant_id)


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
    """Delete up to `limit` expired jobs, samplers and data sets each (the next sweep takes the rest), after
    retrying up to `limit` byte deletions that failed before."""
    now = now or utcnow()
    result = SweepResult()
    retry_pending_deletions(session, store, limit)

    job_ids = session.execute(select(Job.id).where(Job.expires_at <= now, Job.status.in_(FINISHED))
                              .limit(limit)).scalars().all()
    for job_id in job_ids:
        sampler_ids = list(session.execute(select(Sampler.id).where(Sampler.job_id == job_id)).scalars())
        paths = list(session.execute(select(Artifact.path).where(
            or_(Artifact.job_id == job_id, Artifact.sampler_id.in_(sampler_ids)))).scalars())
        gone = session.execute(delete(Job).where(Job.id == job_id, Job.expires_at <= now,
                                                 Job.status.in_(FINISHED))).rowcount
        if gone:
            delete_bytes(session, store, [*paths, f"jobs/{job_id}", *(f"samplers/{s}" for s in sampler_ids)])
            result.jobs.append(job_id)
        else:
            session.commit()

    sampler_ids = session.execute(select(Sampler.id).where(Sampler.expires_at <= now).limit(limit)).scalars().all()
    for sampler_id in sampler_ids:
        paths = list(session.execute(select(Artifact.path).where(Artifact.sampler_id == sampler_id)).scalars())
        gone = session.execute(delete(Sampler).where(Sampler.id == sampler_id, Sampler.expires_at <= now)).rowcount
        if gone:
            delete_bytes(session, store, [*paths, f"samplers/{sampler_id}"])
            result.samplers.append(sampler_id)
        else:
            session.commit()

    dataset_ids = session.execute(select(DatasetRecord.id).where(
        DatasetRecord.expires_at <= now, DatasetRecord.id.not_in(_datasets_in_use())).limit(limit)).scalars().all()
    for dataset_id in dataset_ids:
        paths = list(session.execute(select(Artifact.path).where(Artifact.dataset_id == dataset_id)).scalars())
        # "No active job uses it" is re-checked in the DELETE itself: a job that took it up since is honoured.
        gone = session.execute(delete(DatasetRecord).where(
            DatasetRecord.id == dataset_id, DatasetRecord.expires_at <= now,
            DatasetRecord.id.not_in(_datasets_in_use()))).rowcount
        if gone:
            delete_bytes(session, store, [*paths, f"datasets/{dataset_id}"])
            result.datasets.append(dataset_id)
        else:
            session.commit()
    return result


def delete_bytes(session: Session, store: ArtifactStore, prefixes: list[str]) -> list[str]:
    """Commit the session's pending row deletions together with a `PendingDeletion` for each prefix, then
    delete the bytes and drop the records of those that went: a failure (or a crash in between) leaves its
    record for `retry_pending_deletions`. Returns the prefixes that failed."""
    now = utcnow()
    for prefix in dict.fromkeys(prefixes):
        session.merge(PendingDeletion(prefix=prefix, created_at=now, attempts=0))
    session.commit()
    return _attempt(session, store, list(dict.fromkeys(prefixes)))


def retry_pending_deletions(session: Session, store: ArtifactStore, limit: int = 200) -> list[str]:
    """Try again the byte deletions that failed before (oldest first); returns those that failed again."""
    prefixes = list(session.execute(select(PendingDeletion.prefix).order_by(PendingDeletion.created_at)
                                    .limit(limit)).scalars())
    session.rollback()
    return _attempt(session, store, prefixes)


def _attempt(session: Session, store: ArtifactStore, prefixes: list[str]) -> list[str]:
    failed: dict[str, str] = {}
    for prefix in prefixes:
        try:
            store.delete_prefix(prefix)
        except Exception as exc:  # noqa: BLE001 - the rows are gone already; the record keeps it for a retry
            failed[prefix] = f"{type(exc).__name__}: {exc}"[:2000]
            logger.warning("retention: could not delete artifact bytes under %s; a later sweep retries",
                           prefix, exc_info=True)
    done = [prefix for prefix in prefixes if prefix not in failed]
    if done:
        session.execute(delete(PendingDeletion).where(PendingDeletion.prefix.in_(done)))
    for prefix, error in failed.items():
        session.execute(update(PendingDeletion).where(PendingDeletion.prefix == prefix)
                        .values(attempts=PendingDeletion.attempts + 1, last_error=error))
    session.commit()
    return list(failed)
