"""Unsent queued jobs (`enqueued_at` NULL) on a real SQLite database, sent through real Celery transports:
the reaper's and the release's requeues wait for a send, a failed send is retried, each unsent job is taken by
one sender, and after a broker outage the jobs sent before it are sent again."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from service import job_state
from service.db import make_engine, make_session_factory
from service.migrate import upgrade
from service.models import Job, utcnow
from service.queue import make_celery
from service.settings import Settings
from tests.support.stack import free_port
from workers.dispatch import send_unsent


@pytest.fixture
def sessions(tmp_path: Path) -> sessionmaker[Session]:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    upgrade(url)
    return make_session_factory(make_engine(url))


def add_job(session: Session, enqueued: bool = True) -> str:
    job_id = job_state.new_id("job")
    session.add(Job(id=job_id, tenant_id="t", status="queued", method="svgd", spec={"steps": 10},
                    spec_sha256="0" * 64, max_attempts=3, enqueued_at=utcnow() if enqueued else None))
    session.commit()
    return job_id


def enqueued_at(session: Session, job_id: str):  # noqa: ANN201 - datetime | None
    session.expire_all()
    return session.get(Job, job_id).enqueued_at


def test_reaped_and_released_jobs_wait_unsent(sessions: sessionmaker[Session]) -> None:
    with sessions() as session:
        reaped, released = add_job(session), add_job(session)
        job_state.claim_job(session, reaped, "w1", 30)
        assert job_state.reap_expired_leases(session, now=utcnow() + timedelta(seconds=31)).requeued == [reaped]
        job_state.release_job(session, job_state.claim_job(session, released, "w2", 30))
        assert enqueued_at(session, reaped) is None and enqueued_at(session, released) is None
        # The 600 s stale sweep is not what sends them: the unsent pass is.
        assert job_state.stale_queued_jobs(session, 600, now=utcnow() + timedelta(seconds=700)) == []
        assert sorted(job_state.claim_unsent_jobs(session)) == sorted([reaped, released])


def test_each_unsent_job_is_taken_once_and_a_failed_send_puts_it_back(sessions: sessionmaker[Session]) -> None:
    with sessions() as session:
        job_id = add_job(session, enqueued=False)
        sent = add_job(session)
        assert job_state.claim_unsent_jobs(session) == [job_id]
        assert enqueued_at(session, job_id) is not None
        assert job_state.claim_unsent_jobs(session) == [], "a second sender took the same job"
        job_state.mark_unsent(session, [job_id])
        assert job_state.claim_unsent_jobs(session, job_ids=[sent]) == []
        assert job_state.claim_unsent_jobs(session, job_ids=[job_id]) == [job_id]


def test_a_claimed_or_cancelled_job_is_never_sent_or_put_back(sessions: sessionmaker[Session]) -> None:
    with sessions() as session:
        job_id = add_job(session, enqueued=False)
        assert job_state.claim_unsent_jobs(session) == [job_id]
        assert job_state.claim_job(session, job_id, "w", 30) is not None  # its message arrived meanwhile
        job_state.mark_unsent(session, [job_id])
        assert enqueued_at(session, job_id) is not None
        cancelled = add_job(session, enqueued=False)
        session.get(Job, cancelled).status = "cancelled"
        session.commit()
        assert job_state.claim_unsent_jobs(session) == []


def test_after_an_outage_jobs_sent_before_it_are_sent_again(sessions: sessionmaker[Session]) -> None:
    with sessions() as session:
        before = add_job(session)
        outage = utcnow() + timedelta(seconds=1)
        after = add_job(session)
        session.get(Job, after).enqueued_at = outage + timedelta(seconds=5)  # sent once the broker was back
        session.commit()
        assert job_state.mark_unsent_sent_before(session, outage) == 1
        assert job_state.claim_unsent_jobs(session) == [before]


def test_send_unsent_through_a_dead_then_a_live_broker(sessions: sessionmaker[Session], tmp_path: Path) -> None:
    with sessions() as session:
        job_id = add_job(session, enqueued=False)
    dead = Settings(data_dir=tmp_path / "dead", broker_url=f"redis://127.0.0.1:{free_port()}/0")
    sender = make_celery(dead)
    try:
        assert not send_unsent(sessions, sender, dead)
    finally:
        sender.close()
    with sessions() as session:
        assert enqueued_at(session, job_id) is None, "a failed send must leave the job unsent"

    live = Settings(data_dir=tmp_path / "live")  # the embedded filesystem broker
    sender = make_celery(live)
    try:
        assert send_unsent(sessions, sender, live)
    finally:
        sender.close()
    with sessions() as session:
        assert enqueued_at(session, job_id) is not None
    messages = list((live.broker_dir / "queue").iterdir())
    assert len(messages) == 1 and job_id in messages[0].read_text()
