"""Issue 43, item 3: a database blip shorter than the lease costs a running job nothing (docs/architecture.md,
"Database outages"). The worker's real hooks, heartbeat and JobExecution on a real SQLite database, with the
outage injected deterministically by a session factory whose sessions fail as an unreachable server's do."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from sqlalchemy import select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from service import job_state
from service.db import make_engine, make_session_factory
from service.job_state import Lease
from service.migrate import upgrade
from service.models import Artifact, Job, MetricPoint, utcnow
from service.queue import make_celery
from service.settings import Settings
from service.store import make_store
from workers import runner
from workers.context import WorkerContext
from workers.runner import Heartbeat, JobExecution, LeaseClock, ServiceHooks


def unreachable() -> OperationalError:
    return OperationalError("SELECT 1", {}, Exception("connection to server at 127.0.0.1 failed: Connection refused"))


class FlakySessions:
    """A session factory over a real database whose sessions fail like an unreachable server's while `down`,
    or whose next `lose_answers` commits go through but raise (the connection dropped before the answer came).
    Counts the sessions opened."""

    def __init__(self, factory: sessionmaker[Session]):
        self.factory = factory
        self.down = False
        self.lose_answers = 0
        self.opened = 0
        self.lock = threading.Lock()

    def __call__(self) -> Session:
        session = self.factory()
        with self.lock:
            self.opened += 1
            down = self.down
            lose = self.lose_answers > 0
            if lose:
                self.lose_answers -= 1

        def refuse(*_: Any, **__: Any) -> Any:
            raise unreachable()

        if down:
            session.execute = refuse  # type: ignore[method-assign]
            session.commit = refuse  # type: ignore[method-assign]
            session.flush = refuse  # type: ignore[method-assign]
        elif lose:
            commit = session.commit

            def commit_then_drop() -> None:
                commit()
                raise unreachable()

            session.commit = commit_then_drop  # type: ignore[method-assign]
        return session


SPEC = {"method": "svgd", "target": {"kind": "gaussian", "mean": [0.0, 0.0], "cov": [[1.0, 0.0], [0.0, 1.0]]},
        "num_particles": 20, "steps": 60, "seed": 1, "metrics_every": 2, "checkpoint_every": 10}


class World:
    def __init__(self, tmp_path: Path, **overrides: Any):
        values = {"lease_seconds": 30.0, "heartbeat_seconds": 0.05, "progress_interval_seconds": 0.0,
                  "db_retry_seconds": 0.02, "lease_safety_margin_seconds": 0.0, **overrides}
        self.settings = Settings(data_dir=tmp_path / "data", **values)
        upgrade(self.settings.database_url)
        self.real = make_session_factory(make_engine(self.settings.database_url))
        self.flaky = FlakySessions(self.real)
        self.context = WorkerContext(settings=self.settings, sessions=self.flaky,  # type: ignore[arg-type]
                                     store=make_store(self.settings.artifacts_url, self.settings),
                                     sender=make_celery(self.settings, main="test-db-outage"))

    def add_job(self, spec: dict[str, Any] | None = None) -> tuple[Lease, Job]:
        spec = spec or SPEC
        with self.real() as session:
            job_id = job_state.new_id("job")
            session.add(Job(id=job_id, tenant_id="t", status="queued", method=spec["method"], spec=spec,
                            spec_sha256="0" * 64, max_attempts=3, enqueued_at=utcnow()))
            session.commit()
            lease = job_state.claim_job(session, job_id, "w1", self.settings.lease_seconds)
            assert lease is not None
            job = session.get(Job, job_id)
            session.expunge(job)
        return lease, job

    def job(self, job_id: str) -> Job:
        with self.real() as session:
            return session.get(Job, job_id)

    def steps(self, job_id: str) -> list[int]:
        with self.real() as session:
            return list(session.execute(select(MetricPoint.step).where(MetricPoint.job_id == job_id)
                                        .order_by(MetricPoint.id)).scalars())


@pytest.fixture
def world(tmp_path: Path) -> Callable[..., World]:
    return lambda **overrides: World(tmp_path, **overrides)


def hooks_for(world: World, lease: Lease, job: Job) -> ServiceHooks:
    hooks = ServiceHooks(world.context, lease, job, Heartbeat(world.context, lease))  # heartbeat not started
    hooks.on_start(SimpleNamespace(step_count=0), 20)  # type: ignore[arg-type]
    return hooks


def step(hooks: ServiceHooks, number: int) -> None:
    hooks.on_step(number, 20, {"loss": float(number)})
    hooks.on_metrics(number, {"loss": float(number)})


def test_progress_metrics_and_checkpoint_records_are_buffered_through_an_outage(world: Callable[..., World]) -> None:
    w = world()
    lease, job = w.add_job()
    hooks = hooks_for(w, lease, job)
    for number in range(1, 21):
        w.flaky.down = 5 <= number <= 12
        step(hooks, number)
        if number == 10:
            hooks.save_checkpoint(number, {"x": torch.zeros(3), "step": number})
        assert hooks.should_stop() is None  # the lease is far from its end: the run goes on
        if number == 12:  # still down: what got through before the outage, nothing since
            assert w.steps(lease.job_id) == [1, 2, 3]
            stored = w.job(lease.job_id)
            assert stored.progress["step"] == 4 and stored.checkpoint_step is None
            assert [p[0] for p in hooks.pending_points] == list(range(4, 13))
    assert hooks.flush(hooks.progress(20))
    assert w.steps(lease.job_id) == list(range(1, 21))  # every point, in order, once
    stored = w.job(lease.job_id)
    assert stored.status == "running" and stored.progress["step"] == 20 and stored.checkpoint_step == 10
    assert stored.metrics == {"loss": 20.0}
    with w.real() as session:
        roles = list(session.execute(select(Artifact.role).where(Artifact.job_id == lease.job_id)).scalars())
    assert roles == ["checkpoint"]
    assert hooks.pending_checkpoint is None and hooks.pending_points == []


def test_a_write_whose_answer_was_lost_is_not_stored_twice(world: Callable[..., World]) -> None:
    w = world()
    lease, job = w.add_job()
    hooks = hooks_for(w, lease, job)
    for number in (1, 2, 3):
        step(hooks, number)
    w.flaky.lose_answers = 1  # the next write commits, but the worker sees the connection drop
    step(hooks, 4)
    # point 3 got through, but is kept: the worker cannot know it did
    assert [p[0] for p in hooks.pending_points] == [3, 4]
    assert w.steps(lease.job_id) == [1, 2, 3]
    step(hooks, 5)
    assert hooks.flush(hooks.progress(5))
    assert w.steps(lease.job_id) == [1, 2, 3, 4, 5]


def test_past_the_lease_the_attempt_stops_and_writes_nothing(world: Callable[..., World]) -> None:
    """An outage longer than the lease: once the lease as last renewed has run out by the worker's clock,
    `should_stop` says lease_lost and nothing more is attempted, not even when the database is back."""
    w = world(lease_seconds=0.6)
    lease, job = w.add_job()
    hooks = hooks_for(w, lease, job)
    step(hooks, 1)
    w.flaky.down = True
    step(hooks, 2)
    assert hooks.should_stop() is None and hooks.pending_points
    time.sleep(max(0.0, hooks.heartbeat.clock.remaining()) + 0.05)
    assert hooks.should_stop() == "lease_lost"
    opened = w.flaky.opened
    w.flaky.down = False  # the database is back, but the lease may be another worker's by now
    step(hooks, 3)
    hooks.save_checkpoint(3, {"x": torch.zeros(2), "step": 3})
    assert not hooks.flush(hooks.progress(3))
    assert hooks.write_within_lease("finish", lambda session: True) is None
    assert w.flaky.opened == opened  # not one session opened, so not one write tried
    assert not (w.settings.data_dir / "artifacts" / runner.checkpoint_key(lease.job_id)).exists()
    assert hooks.should_stop() == "lease_lost"
    stored = w.job(lease.job_id)
    assert stored.progress["step"] == 1 and w.steps(lease.job_id) == [] and stored.checkpoint_step is None


def test_the_heartbeat_gives_the_lease_up_when_it_runs_out_during_an_outage(world: Callable[..., World]) -> None:
    w = world(lease_seconds=0.8)
    lease, job = w.add_job()
    w.flaky.down = True
    heartbeat = Heartbeat(w.context, lease)
    heartbeat.start()
    heartbeat.join(timeout=5)
    assert not heartbeat.is_alive() and heartbeat.lost.is_set()
    opened = w.flaky.opened
    time.sleep(0.2)
    assert w.flaky.opened == opened  # it stopped trying


def test_the_heartbeat_renews_through_a_short_outage(world: Callable[..., World]) -> None:
    w = world(lease_seconds=1.5)
    lease, job = w.add_job()
    before = w.job(lease.job_id).lease_expires_at
    w.flaky.down = True
    clock = LeaseClock(w.settings.lease_seconds, 0.0, time.monotonic())
    heartbeat = Heartbeat(w.context, lease, clock)
    heartbeat.start()
    try:
        time.sleep(0.6)  # well within the lease: renewals fail and are retried
        assert not heartbeat.lost.is_set() and clock.remaining() < 1.0
        w.flaky.down = False
        time.sleep(0.4)
        assert not heartbeat.lost.is_set() and clock.remaining() > 1.1  # renewed by a retry
        assert w.job(lease.job_id).lease_expires_at > before
    finally:
        heartbeat.stop()
        heartbeat.join(timeout=5)


@pytest.fixture
def finish_fails_twice(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """`finish_job` as if the database dropped the connection twice before taking the final write."""
    calls: list[int] = []
    real = job_state.finish_job

    def flaky_finish(session: Session, *args: Any, **kwargs: Any) -> bool:
        calls.append(1)
        if len(calls) <= 2:
            raise unreachable()
        return real(session, *args, **kwargs)

    monkeypatch.setattr(job_state, "finish_job", flaky_finish)
    yield calls


def test_a_job_runs_through_an_outage_and_finishes_as_its_first_attempt(
        world: Callable[..., World], monkeypatch: pytest.MonkeyPatch, finish_fails_twice: list[int]) -> None:
    """The real JobExecution: the database is unreachable from step 15 to step 44 (checkpoints at 20, 30 and
    40 saved meanwhile, every write and lease renewal failing), then its final write fails twice."""
    w = world(lease_seconds=20.0)
    lease, job = w.add_job()
    on_step = ServiceHooks.on_step

    def outage_during(hooks: ServiceHooks, number: int, total: int, metrics: dict[str, float]) -> None:
        w.flaky.down = 15 <= number < 45
        if w.flaky.down:
            time.sleep(0.01)  # give the heartbeat time to fail too
        on_step(hooks, number, total, metrics)

    monkeypatch.setattr(ServiceHooks, "on_step", outage_during)
    JobExecution(w.context, lease, job).execute()
    stored = w.job(lease.job_id)
    assert stored.status == "succeeded", (stored.error_code, stored.error_detail)
    assert stored.attempt == 1 and stored.resumed_from_step is None and stored.lease_owner is None
    assert stored.progress["step"] == 60 and stored.progress["fraction"] == 1.0
    assert stored.progress["resumed_from_step"] is None
    assert stored.checkpoint_step == 50
    assert w.steps(lease.job_id) == list(range(2, 61, 2))
    assert len(finish_fails_twice) == 3
    with w.real() as session:
        last = session.execute(select(MetricPoint.values).where(MetricPoint.job_id == lease.job_id,
                                                                 MetricPoint.step == 60)).scalar_one()
    assert stored.metrics["grad_evals"] == last["grad_evals"] > 0
