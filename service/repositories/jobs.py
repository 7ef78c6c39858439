"""`Jobs(session, tenant)`: a tenant's jobs — submit (idempotent, under the active-jobs quota), find, page,
metrics, stored artifacts, cancel, delete."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from inference_core.spec import AdmittedSpec
from service.errors import Conflict, Expired, NotFound, QuotaExceeded, Rejected, Unavailable
from service.job_state import new_id
from service.models import TERMINAL_STATUSES, Artifact, Job, JobDataset, MetricPoint, Sampler, utcnow
from service.quota import lock_tenant_jobs
from service.repositories.pages import Cursor, Page, newest_first
from service.retention import delete_bytes, job_is_expired, job_is_live
from service.store import ArtifactStore

ACTIVE_STATUSES = ("queued", "running")
QUOTA_RETRY_AFTER_S = 30
BROKER_RETRY_AFTER_S = 5


def request_fingerprint(spec_fingerprint: str, retention_seconds: int | None) -> str:
    """What an Idempotency-Key is compared on (stored as `spec_sha256`): the normalised spec's sha256 alone
    when no retention was requested (so jobs stored before retention counted still replay), else the sha256
    of that and the requested `retention_seconds`."""
    if retention_seconds is None:
        return spec_fingerprint
    return hashlib.sha256(f"{spec_fingerprint}|retention_seconds={retention_seconds}".encode()).hexdigest()


@dataclass(frozen=True)
class Submitted:
    job: Job
    replayed: bool  # an earlier submit with the same Idempotency-Key and body: its job, nothing new stored


class Jobs:
    def __init__(self, session: Session, tenant: str):
        self.session = session
        self.tenant = tenant

    def owned(self, job_id: str) -> Job:
        """The tenant's job; NotFound for another tenant's or a missing one, Expired once a finished job is past
        its retention (until the sweeper deletes it)."""
        job = self.session.execute(select(Job).where(Job.id == job_id, Job.tenant_id == self.tenant)
                                   ).scalar_one_or_none()
        if job is None:
            raise NotFound.of("job", job_id)
        if job_is_expired(job):
            raise Expired.of("job", job_id, job.expires_at)
        return job

    def page(self, size: int, after: Cursor | None = None, status: str | None = None) -> Page[Job]:
        query = select(Job).where(Job.tenant_id == self.tenant, job_is_live(utcnow()))
        if status is not None:
            query = query.where(Job.status == status)
        return newest_first(self.session, query, Job, size, after)

    def sampler_ids(self, job_ids: list[str]) -> dict[str, str]:
        if not job_ids:
            return {}
        rows = self.session.execute(select(Sampler.job_id, Sampler.id).where(
            Sampler.job_id.in_(job_ids), Sampler.tenant_id == self.tenant)).all()
        return {job_id: sampler_id for job_id, sampler_id in rows}

    def artifact(self, job: Job, role: str) -> Artifact | None:
        """A found job's stored artifact of a role (`particles`, `predictor`)."""
        return self.session.execute(select(Artifact).where(
            Artifact.job_id == job.id, Artifact.tenant_id == self.tenant, Artifact.role == role)).scalar_one_or_none()

    def submit(self, admitted: AdmittedSpec, *, idempotency_key: str | None, expires_at: datetime | None,
               max_active: int, max_attempts: int, enqueue: Callable[[str], None],
               retention_seconds: int | None = None) -> Submitted:
        """Store and enqueue an admitted spec. The key lookup, the quota count and the insert are one step
        serialised per tenant (service.quota: the lock ends with the transaction), so concurrent submits cannot
        all see room under the cap, and a retry of a key sees the first one's job. A broker failure removes the
        row again: nothing is stored, `broker_unavailable`.

        A key is compared on the request (`request_fingerprint`: the normalised spec and the retention as
        requested), so a replay with another `retention_seconds` is `idempotency_key_reused`, not a silent
        200 that drops the new retention."""
        fingerprint = request_fingerprint(admitted.fingerprint, retention_seconds)
        lock_tenant_jobs(self.session, self.tenant)
        if idempotency_key is not None:
            existing = self._by_key(idempotency_key)
            if existing is not None:
                try:
                    return self._replay(existing, fingerprint)
                finally:
                    self.session.rollback()  # releases the lock
        active = self.session.execute(select(func.count()).select_from(Job).where(
            Job.tenant_id == self.tenant, Job.status.in_(ACTIVE_STATUSES))).scalar_one()
        if active >= max_active:
            self.session.rollback()
            raise QuotaExceeded(f"{active} jobs are queued or running; the limit is {max_active}",
                                retry_after_s=QUOTA_RETRY_AFTER_S)
        spec = admitted.spec
        now = utcnow()
        job = Job(id=new_id("job"), tenant_id=self.tenant, status="queued", method=spec.method, name=spec.name,
                  spec=admitted.normalized(), spec_sha256=fingerprint, idempotency_key=idempotency_key,
                  max_attempts=max_attempts,
                  progress={"step": 0, "total_steps": spec.steps, "fraction": 0.0, "eta_s": None},
                  created_at=now, updated_at=now, enqueued_at=now, expires_at=expires_at)
        self.session.add(job)
        self.session.add_all(JobDataset(job_id=job.id, dataset_id=dataset_id) for dataset_id in admitted.dataset_ids)
        try:
            self.session.commit()
        except IntegrityError:  # a concurrent request with the same key won the insert: its replay
            self.session.rollback()
            return self._replay(self._by_key(idempotency_key), fingerprint)
        try:
            enqueue(job.id)
        except Exception as exc:
            self.session.execute(delete(Job).where(Job.id == job.id, Job.tenant_id == self.tenant))
            self.session.commit()
            raise Unavailable("the job queue is unreachable; nothing was stored, retry later",
                              code="broker_unavailable", retry_after_s=BROKER_RETRY_AFTER_S) from exc
        return Submitted(job, replayed=False)

    def _by_key(self, idempotency_key: str | None) -> Job | None:
        return self.session.execute(select(Job).where(
            Job.tenant_id == self.tenant, Job.idempotency_key == idempotency_key)).scalar_one_or_none()

    def _replay(self, job: Job | None, fingerprint: str) -> Submitted:
        if job is None:
            raise NotFound("the job this Idempotency-Key named was deleted meanwhile; retry")
        if job_is_expired(job):  # gone for the client, whatever this request says (once swept, the key is free)
            raise Expired.of("job", job.id, job.expires_at)
        if job.spec_sha256 != fingerprint:
            raise Rejected("this Idempotency-Key was already used with a different request (body or "
                           "retention_seconds)",
                           code="idempotency_key_reused")
        return Submitted(job, replayed=True)

    def cancel(self, job_id: str) -> Job:
        """Idempotent: a queued job is cancelled at once; a running one is asked to stop at its next step."""
        job = self.owned(job_id)
        if job.status in ("succeeded", "failed"):
            raise Conflict(f"the job already {job.status}; there is nothing to cancel", code="job_finished")
        now = utcnow()
        mine = (Job.id == job.id, Job.tenant_id == self.tenant)
        self.session.execute(update(Job).where(*mine, Job.status == "queued")
                             .values(status="cancelled", cancel_requested=True, finished_at=now, updated_at=now))
        self.session.execute(update(Job).where(*mine, Job.status == "running")
                             .values(cancel_requested=True, updated_at=now))
        self.session.commit()
        self.session.refresh(job)
        return job

    def delete(self, job_id: str, store: ArtifactStore) -> None:
        """A finished job with its artifacts and its sampler's (a failed byte deletion is retried by the
        sweeper)."""
        job = self.owned(job_id)
        if job.status not in TERMINAL_STATUSES:
            raise Conflict(f"only finished jobs can be deleted; this one is {job.status}", code="job_not_finished")
        paths = list(self.session.execute(select(Artifact.path).where(Artifact.tenant_id == self.tenant, or_(
            Artifact.job_id == job.id,
            Artifact.sampler_id.in_(select(Sampler.id).where(Sampler.job_id == job.id)))
        )).scalars())
        self.session.execute(delete(Job).where(Job.id == job.id, Job.tenant_id == self.tenant))
        delete_bytes(self.session, store, [*paths, f"jobs/{job.id}"])  # commits

    def metrics(self, job_id: str, *, since_step: int | None, size: int,
                max_points: int | None) -> tuple[list[MetricPoint], int | None]:
        """A page of a job's metric points in step order after `since_step` (pages end on a step boundary),
        with the step the next page starts after; or at most `max_points` evenly spread, in one answer."""
        job = self.owned(job_id)
        after = [MetricPoint.job_id == job.id]
        if since_step is not None:
            after.append(MetricPoint.step > since_step)
        if max_points is not None:
            return list(self.session.execute(evenly_spread(after, max_points)).scalars()), None
        order = (MetricPoint.step, MetricPoint.id)
        rows = list(self.session.execute(select(MetricPoint).where(*after).order_by(*order).limit(size + 1))
                    .scalars())
        page, more = rows[:size], len(rows) > size
        if more and rows[size].step == page[-1].step and page[0].step != page[-1].step:
            # since_step is exclusive, so a step split across pages would be lost.
            page = [p for p in page if p.step != page[-1].step]
        return page, (page[-1].step if more else None)


def evenly_spread(where: list[Any], n: int) -> Any:
    """At most n metric points, evenly spread: with T rows in (step, id) order, row r (0-based) is kept when
    r·(n−1) mod (T−1) < n−1, i.e. the first row of each of n equal shares of the range: rows 0 and T−1 are
    always kept. Computed in the database (window functions: SQLite ≥ 3.25, PostgreSQL)."""
    ranked = select(
        MetricPoint.id.label("id"),
        (func.row_number().over(order_by=(MetricPoint.step, MetricPoint.id)) - 1).label("r"),
        func.count().over().label("total"),
    ).where(*where).subquery()
    keep = or_(
        ranked.c.total <= n,
        ranked.c.r == ranked.c.total - 1,
        (ranked.c.r * (n - 1)) % func.nullif(ranked.c.total - 1, 0) < n - 1,
    )
    return (select(MetricPoint).where(MetricPoint.id.in_(select(ranked.c.id).where(keep)))
            .order_by(MetricPoint.step, MetricPoint.id))
