"""Job state transitions: the database is the only source of truth (docs/architecture.md, "Job lifecycle").

Every write a worker makes is fenced by its lease (job id, lease owner, attempt): a stale worker whose
lease was taken over changes nothing. Conditional UPDATEs make claims and reaping safe under concurrency.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from service.models import Artifact, Job, MetricPoint, Sampler, utcnow


def new_id(prefix: str) -> str:
    """Opaque id with a type prefix and 128 random bits (`job_…`, `smp_…`, `art_…`)."""
    return f"{prefix}_{secrets.token_hex(16)}"


@dataclass(frozen=True)
class Lease:
    job_id: str
    owner: str
    attempt: int


def _fenced(lease: Lease):  # noqa: ANN202 - a SQLAlchemy update statement
    return update(Job).where(
        Job.id == lease.job_id,
        Job.status == "running",
        Job.lease_owner == lease.owner,
        Job.attempt == lease.attempt,
    )


def claim_job(session: Session, job_id: str, owner: str, lease_seconds: float) -> Lease | None:
    """queued → running, attempt + 1, lease to `owner`. None if someone else has it or it is not queued."""
    now = utcnow()
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == "queued", Job.cancel_requested.is_(False))
        .values(
            status="running",
            attempt=Job.attempt + 1,
            lease_owner=owner,
            lease_expires_at=now + timedelta(seconds=lease_seconds),
            updated_at=now,
        )
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:
        # A queued job whose cancel was requested never starts.
        session.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == "queued", Job.cancel_requested.is_(True))
            .values(status="cancelled", finished_at=now, updated_at=now)
            .execution_options(synchronize_session=False)
        )
        session.commit()
        return None
    job = session.execute(select(Job.attempt, Job.started_at).where(Job.id == job_id)).one()
    if job.started_at is None:
        session.execute(update(Job).where(Job.id == job_id).values(started_at=now))
    session.commit()
    return Lease(job_id, owner, job.attempt)


def renew_lease(session: Session, lease: Lease, lease_seconds: float) -> tuple[bool, bool]:
    """Extend the lease. Returns (still ours, cancel requested)."""
    now = utcnow()
    result = session.execute(
        _fenced(lease)
        .values(lease_expires_at=now + timedelta(seconds=lease_seconds))
        .execution_options(synchronize_session=False)
    )
    cancel = session.execute(select(Job.cancel_requested).where(Job.id == lease.job_id)).scalar()
    session.commit()
    return result.rowcount == 1, bool(cancel)


def record_progress(
    session: Session,
    lease: Lease,
    progress: dict[str, Any],
    metrics: dict[str, Any] | None,
    points: list[tuple[int, float, dict[str, Any]]],
    tenant_id: str,
) -> bool:
    """Progress, latest metrics and new metric points, fenced by the lease. Idempotent: the worker retries a
    write that failed (docs/architecture.md, "Database outages")."""
    values: dict[str, Any] = {"progress": progress, "updated_at": utcnow()}
    if metrics is not None:
        values["metrics"] = metrics
    result = session.execute(_fenced(lease).values(**values).execution_options(synchronize_session=False))
    if result.rowcount != 1:
        session.rollback()
        return False
    if points:
        # A batch retried after a commit whose answer was lost (a connection dropped mid-commit) replaces the
        # copy that got through: points are written in step order, so none of this attempt lies past the batch.
        session.execute(delete(MetricPoint).where(MetricPoint.job_id == lease.job_id,
                                                  MetricPoint.step >= min(step for step, _, _ in points)))
        session.add_all(
            MetricPoint(job_id=lease.job_id, tenant_id=tenant_id, step=step, wall_time_s=wall, values=vals)
            for step, wall, vals in points
        )
    session.commit()
    return True


def record_checkpoint(session: Session, lease: Lease, step: int) -> bool:
    result = session.execute(
        _fenced(lease).values(checkpoint_step=step, updated_at=utcnow()).execution_options(synchronize_session=False)
    )
    session.commit()
    return result.rowcount == 1


def start_attempt(session: Session, lease: Lease, resumed_from: int | None) -> bool:
    """Mark where this attempt starts; metric points past the checkpoint belong to the lost attempt."""
    result = session.execute(
        _fenced(lease).values(resumed_from_step=resumed_from).execution_options(synchronize_session=False)
    )
    if result.rowcount == 1 and resumed_from is not None:
        session.execute(delete(MetricPoint).where(MetricPoint.job_id == lease.job_id, MetricPoint.step > resumed_from))
    session.commit()
    return result.rowcount == 1


def finish_job(
    session: Session,
    lease: Lease,
    status: str,
    *,
    progress: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
    error: tuple[str, str] | None = None,
    artifacts: list[Artifact] = (),  # type: ignore[assignment]
    sampler: Sampler | None = None,
    quality: dict[str, Any] | None = None,
) -> bool:
    """running → succeeded | failed | cancelled, with final metrics, error, the trained sampler and artifact
    rows, atomically."""
    now = utcnow()
    values: dict[str, Any] = {
        "status": status,
        "finished_at": now,
        "updated_at": now,
        "lease_owner": None,
        "lease_expires_at": None,
        "rendezvous": None,
    }
    if progress is not None:
        values["progress"] = progress
    if metrics is not None:
        values["metrics"] = metrics
    if quality is not None:
        values["quality"] = quality
    if error is not None:
        values["error_code"], values["error_detail"] = error
    result = session.execute(_fenced(lease).values(**values).execution_options(synchronize_session=False))
    if result.rowcount != 1:
        session.rollback()
        return False
    if sampler is not None:
        session.add(sampler)
        session.flush()
    for artifact in artifacts:
        add_artifact(session, artifact)
    session.commit()
    return True


def add_artifact(session: Session, artifact: Artifact) -> None:
    """Add an artifact row; a job has one artifact per role, so a job artifact replaces an earlier one."""
    if artifact.job_id is not None:
        session.execute(delete(Artifact).where(Artifact.job_id == artifact.job_id, Artifact.role == artifact.role))
    session.add(artifact)


def release_job(session: Session, lease: Lease) -> bool:
    """Give a running job back to the queue (worker shutting down): not a failure, so the attempt is returned.
    The job is left unsent (`enqueued_at` NULL) until a send succeeds (`claim_unsent_jobs`)."""
    now = utcnow()
    result = session.execute(
        _fenced(lease)
        .values(status="queued", attempt=Job.attempt - 1, lease_owner=None, lease_expires_at=None,
                enqueued_at=None, rendezvous=None, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return result.rowcount == 1


def publish_rendezvous(session: Session, lease: Lease, rendezvous: dict[str, Any]) -> bool:
    """Rank 0 of a multi-process job says where this attempt's ranks meet (workers.ranks), fenced by its lease."""
    result = session.execute(_fenced(lease).values(rendezvous=rendezvous, updated_at=utcnow())
                             .execution_options(synchronize_session=False))
    session.commit()
    return result.rowcount == 1


def retry_attempt(session: Session, lease: Lease, error: tuple[str, str], max_attempts: int) -> str | None:
    """End an attempt that failed through no fault of the job (a rank of a multi-process job died): back to the
    queue, unsent, with the attempt spent — the next claim resumes every rank from the last checkpoint — or, once
    `max_attempts` are spent, failed with `error`. Returns the new status, or None if the lease was not ours."""
    now = utcnow()
    if lease.attempt < max_attempts:
        values: dict[str, Any] = {"status": "queued", "enqueued_at": None}
    else:
        values = {"status": "failed", "finished_at": now, "error_code": error[0], "error_detail": error[1]}
    result = session.execute(
        _fenced(lease).values(**values, lease_owner=None, lease_expires_at=None, rendezvous=None, updated_at=now)
        .execution_options(synchronize_session=False))
    session.commit()
    return values["status"] if result.rowcount == 1 else None


@dataclass
class ReapResult:
    requeued: list[str]
    failed: list[str]
    cancelled: list[str]


def reap_expired_leases(session: Session, now: datetime | None = None) -> ReapResult:
    """Jobs whose worker stopped heartbeating: requeue (the next claim resumes from the checkpoint), or fail
    with `worker_lost` once `max_attempts` are spent. Each transition is a conditional UPDATE on the
    (attempt, expired lease) seen, so concurrent reapers in several workers requeue a job once."""
    now = now or utcnow()
    outcome = ReapResult([], [], [])
    expired = session.execute(
        select(Job.id, Job.attempt, Job.max_attempts, Job.cancel_requested).where(
            Job.status == "running", Job.lease_expires_at < now
        )
    ).all()
    for job_id, attempt, max_attempts, cancel_requested in expired:
        guard = update(Job).where(
            Job.id == job_id, Job.status == "running", Job.attempt == attempt, Job.lease_expires_at < now
        )
        common = {"lease_owner": None, "lease_expires_at": None, "updated_at": now}
        if cancel_requested:
            values = {**common, "status": "cancelled", "finished_at": now}
            bucket = outcome.cancelled
        elif attempt >= max_attempts:
            detail = f"the worker running this job stopped responding {attempt} times (max_attempts={max_attempts})"
            values = {**common, "status": "failed", "finished_at": now, "error_code": "worker_lost",
                      "error_detail": detail}
            bucket = outcome.failed
        else:
            values = {**common, "status": "queued", "enqueued_at": None}  # unsent: see claim_unsent_jobs
            bucket = outcome.requeued
        if session.execute(guard.values(**values).execution_options(synchronize_session=False)).rowcount == 1:
            bucket.append(job_id)
    session.commit()
    return outcome


def stale_queued_jobs(session: Session, older_than_seconds: float, now: datetime | None = None) -> list[str]:
    """Queued jobs whose message may have been lost (e.g. a worker died between fetching and claiming):
    their `enqueued_at` is bumped and the caller sends the task again (a duplicate claim is harmless)."""
    now = now or utcnow()
    cutoff = now - timedelta(seconds=older_than_seconds)
    ids = list(
        session.execute(select(Job.id).where(Job.status == "queued", Job.enqueued_at < cutoff)).scalars()
    )
    return _take_for_sending(session, ids, Job.enqueued_at < cutoff, now)


def _take_for_sending(session: Session, ids: list[str], still: Any, now: datetime) -> list[str]:
    """Set `enqueued_at = now` on each queued job of `ids` for which `still` holds, one conditional UPDATE
    each, so of several concurrent maintenance loops exactly one takes (and sends) each job."""
    taken = []
    for job_id in ids:
        result = session.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == "queued", still)
            .values(enqueued_at=now)
            .execution_options(synchronize_session=False)
        )
        if result.rowcount == 1:
            taken.append(job_id)
    session.commit()
    return taken


# A queued job whose run message is not known to be on the broker has `enqueued_at` NULL ("unsent"): the
# reaper's requeue, a preempted job's release, a send that failed, or a broker outage that may have lost the
# queue. Worker maintenance loops send unsent jobs every pass (docs/architecture.md, "Broker outages").


def claim_unsent_jobs(session: Session, job_ids: list[str] | None = None, limit: int = 100,
                      now: datetime | None = None) -> list[str]:
    """Take unsent queued jobs for sending: `enqueued_at` NULL → now, each by a conditional UPDATE, so of
    several maintenance loops exactly one sends each. The caller sends them and hands failures back with
    `mark_unsent`. `job_ids` restricts the claim to those jobs."""
    now = now or utcnow()
    query = select(Job.id).where(Job.status == "queued", Job.enqueued_at.is_(None))
    if job_ids is not None:
        query = query.where(Job.id.in_(job_ids))
    ids = list(session.execute(query.order_by(Job.created_at).limit(limit)).scalars())
    return _take_for_sending(session, ids, Job.enqueued_at.is_(None), now)


def mark_unsent(session: Session, job_ids: list[str]) -> None:
    """The sends of these still-queued jobs failed (broker unreachable): the next maintenance pass retries."""
    if job_ids:
        session.execute(
            update(Job)
            .where(Job.id.in_(job_ids), Job.status == "queued")
            .values(enqueued_at=None)
            .execution_options(synchronize_session=False)
        )
    session.commit()


def mark_unsent_sent_before(session: Session, before: datetime) -> int:
    """After a broker outage: messages sent before it may be gone (a broker restarted without persistence),
    so every queued job last sent before `before` is sent again. A message that did survive becomes a
    duplicate, which is harmless: `claim_job` lets one claim through."""
    result = session.execute(
        update(Job)
        .where(Job.status == "queued", Job.enqueued_at.is_not(None), Job.enqueued_at < before)
        .values(enqueued_at=None)
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return int(result.rowcount or 0)
