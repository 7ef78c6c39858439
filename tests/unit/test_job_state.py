"""Job state transitions on a real (SQLite) database: claims, fencing, reaping, release."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from service import job_state
from service.db import make_engine, make_session_factory
from service.migrate import upgrade
from service.models import Job, MetricPoint, utcnow


@pytest.fixture
def session(tmp_path: Path) -> Session:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    upgrade(url)
    with make_session_factory(make_engine(url))() as s:
        yield s


def add_job(session: Session, max_attempts: int = 3) -> str:
    job_id = job_state.new_id("job")
    session.add(Job(id=job_id, tenant_id="t", status="queued", method="svgd", spec={"steps": 10},
                    spec_sha256="0" * 64, max_attempts=max_attempts, enqueued_at=utcnow()))
    session.commit()
    return job_id


def status(session: Session, job_id: str) -> Job:
    session.expire_all()
    return session.get(Job, job_id)


def test_a_job_is_claimed_once(session: Session) -> None:
    job_id = add_job(session)
    lease = job_state.claim_job(session, job_id, "w1", 30)
    assert lease is not None and lease.attempt == 1
    assert job_state.claim_job(session, job_id, "w2", 30) is None
    job = status(session, job_id)
    assert job.status == "running" and job.lease_owner == "w1" and job.started_at is not None


def test_cancel_requested_queued_job_is_never_claimed(session: Session) -> None:
    job_id = add_job(session)
    status(session, job_id).cancel_requested = True
    session.commit()
    assert job_state.claim_job(session, job_id, "w1", 30) is None
    assert status(session, job_id).status == "cancelled"


def test_writes_are_fenced_by_the_lease(session: Session) -> None:
    job_id = add_job(session)
    stale = job_state.claim_job(session, job_id, "w1", 30)
    # The lease expires and the reaper hands the job to another worker.
    result = job_state.reap_expired_leases(session, now=utcnow() + timedelta(seconds=31))
    assert result.requeued == [job_id]
    fresh = job_state.claim_job(session, job_id, "w2", 30)
    assert fresh is not None and fresh.attempt == 2
    assert job_state.renew_lease(session, stale, 30) == (False, False)
    assert not job_state.record_progress(session, stale, {"step": 5}, {}, [(5, 0.1, {"x": 1.0})], "t")
    assert not job_state.record_checkpoint(session, stale, 5)
    assert not job_state.finish_job(session, stale, "succeeded")
    assert session.query(MetricPoint).count() == 0
    assert job_state.renew_lease(session, fresh, 30) == (True, False)
    assert job_state.finish_job(session, fresh, "succeeded", metrics={"m": 1.0})
    job = status(session, job_id)
    assert job.status == "succeeded" and job.lease_owner is None and job.metrics == {"m": 1.0}


def test_reaper_fails_after_max_attempts_and_cancels_cancelled(session: Session) -> None:
    later = utcnow() + timedelta(seconds=31)
    doomed = add_job(session, max_attempts=2)
    for attempt in (1, 2):
        assert job_state.claim_job(session, doomed, f"w{attempt}", 30).attempt == attempt
        outcome = job_state.reap_expired_leases(session, now=later + timedelta(seconds=attempt * 40))
    assert outcome.failed == [doomed]
    job = status(session, doomed)
    assert job.status == "failed" and job.error_code == "worker_lost" and job.finished_at is not None

    cancelled = add_job(session)
    job_state.claim_job(session, cancelled, "w", 30)
    status(session, cancelled).cancel_requested = True
    session.commit()
    # past this lease's own expiry (`later` may not be, when the lines above ran slowly on a loaded machine)
    expired = utcnow() + timedelta(seconds=31)
    assert job_state.reap_expired_leases(session, now=expired).cancelled == [cancelled]
    assert status(session, cancelled).status == "cancelled"


def test_live_leases_are_not_reaped(session: Session) -> None:
    job_id = add_job(session)
    job_state.claim_job(session, job_id, "w", 30)
    outcome = job_state.reap_expired_leases(session, now=utcnow() + timedelta(seconds=10))
    assert outcome.requeued == outcome.failed == outcome.cancelled == []
    assert status(session, job_id).status == "running"


def test_release_returns_the_attempt_and_resume_trims_metrics(session: Session) -> None:
    job_id = add_job(session)
    lease = job_state.claim_job(session, job_id, "w", 30)
    points = [(step, 0.0, {"v": float(step)}) for step in (10, 20, 30)]
    assert job_state.record_progress(session, lease, {"step": 30}, {}, points, "t")
    assert job_state.record_checkpoint(session, lease, 20)
    assert job_state.release_job(session, lease)
    job = status(session, job_id)
    assert job.status == "queued" and job.attempt == 0 and job.checkpoint_step == 20
    again = job_state.claim_job(session, job_id, "w2", 30)
    assert again.attempt == 1
    assert job_state.start_attempt(session, again, resumed_from=20)
    assert sorted(p.step for p in session.query(MetricPoint)) == [10, 20]


def test_stale_queued_jobs_are_offered_again_once(session: Session) -> None:
    job_id = add_job(session)
    later = utcnow() + timedelta(seconds=700)
    assert job_state.stale_queued_jobs(session, 600, now=later) == [job_id]
    assert job_state.stale_queued_jobs(session, 600, now=later) == []
