"""Issue 43, item 3: a PostgreSQL outage shorter than the lease costs a running job nothing (docs/architecture.md,
"Database outages").

The real worker code (`JobExecution`, its hooks and heartbeat, as tests/support/inprocess.py runs it) on a fresh
database of the machine's PostgreSQL, which is made unreachable for 12 s while the job runs (connections refused
and every open one terminated), with a reaper polling the whole time as another worker's maintenance loop would.
The job goes on through the outage and finishes as attempt 1, with every metric point stored once, in order.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import select

from service import job_state
from service.db import make_engine, make_session_factory
from service.migrate import upgrade
from service.models import Job, MetricPoint, utcnow
from service.settings import Settings
from tests.support.inprocess import run_worker
from tests.support.stack import POSTGRES_ADMIN_URL, PostgresDatabase, wait_for
from workers.runner import ServiceHooks

pytestmark = pytest.mark.integration

STEPS = 1500
METRICS_EVERY = 5
PACE_S = 0.015  # a floor on each step's time, so the job outlasts the outage whatever the machine's speed
OUTAGE_S = 12.0  # the lease is 30 s

SPEC = {"method": "svgd", "target": {"kind": "gaussian", "mean": [0.0, 0.0], "cov": [[1.0, 0.0], [0.0, 1.0]]},
        "num_particles": 20, "steps": STEPS, "seed": 3, "metrics_every": METRICS_EVERY, "checkpoint_every": 250}


def connections(name: str) -> int:
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                            (name,)).fetchone()
    return int(row[0])


def test_a_database_outage_shorter_than_the_lease_costs_the_running_job_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="parvis.worker")
    database = PostgresDatabase()
    try:
        settings = Settings(data_dir=tmp_path, database_url=database.url, broker_url="", artifacts_url="",
                            lease_seconds=30.0, heartbeat_seconds=1.0, progress_interval_seconds=0.2,
                            db_retry_seconds=0.5)
        upgrade(settings.database_url)
        engine = make_engine(settings.database_url)
        sessions = make_session_factory(engine)
        job_id = job_state.new_id("job")
        with sessions() as session:
            session.add(Job(id=job_id, tenant_id="t", status="queued", method="svgd", spec=SPEC,
                            spec_sha256="0" * 64, max_attempts=3, enqueued_at=utcnow()))
            session.commit()

        seen: list[tuple[float, int]] = []  # (monotonic time, step) as the run loop reports them
        on_step = ServiceHooks.on_step

        def paced(hooks: ServiceHooks, step: int, total: int, metrics: dict[str, float]) -> None:
            time.sleep(PACE_S)
            seen.append((time.monotonic(), step))
            on_step(hooks, step, total, metrics)

        monkeypatch.setattr(ServiceHooks, "on_step", paced)
        failures: list[BaseException] = []

        def work() -> None:
            try:
                run_worker(settings, job_id)
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                failures.append(exc)

        done = threading.Event()
        reaped: list[Any] = []

        def reaper() -> None:  # another worker's maintenance loop: it would take the job if the lease lapsed
            while not done.wait(0.5):
                try:
                    with sessions() as session:
                        outcome = job_state.reap_expired_leases(session)
                    reaped.extend(outcome.requeued + outcome.failed + outcome.cancelled)
                except Exception:  # noqa: BLE001, S112 - the database is down for it too
                    continue

        worker = threading.Thread(target=work, name="inprocess-worker")
        reaping = threading.Thread(target=reaper, name="reaper")
        worker.start()
        reaping.start()
        try:
            def progressed() -> bool:
                with sessions() as session:
                    progress = session.execute(select(Job.progress).where(Job.id == job_id)).scalar_one()
                return (progress or {}).get("step", 0) >= 100

            wait_for(progressed, 120, interval=0.2, what="the job to be under way")
            with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
                admin.execute(f'ALTER DATABASE "{database.name}" ALLOW_CONNECTIONS false')
                try:
                    admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                  "WHERE datname = %s AND pid <> pg_backend_pid()", (database.name,))
                    down_at = time.monotonic()
                    wait_for(lambda: connections(database.name) == 0, 30, what="the connections to end")
                    time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))
                finally:
                    admin.execute(f'ALTER DATABASE "{database.name}" ALLOW_CONNECTIONS true')
                    up_at = time.monotonic()
            worker.join(timeout=240)
            assert not worker.is_alive(), "the job did not finish"
        finally:
            done.set()
            reaping.join(timeout=30)
        assert failures == []

        # The run went on during the outage, and the worker noticed the outage and its end.
        during = [step for at, step in seen if down_at + 1 < at < up_at - 1]
        assert len(during) > 100, (len(during), seen[-1])
        messages = [record.getMessage() for record in caplog.records]
        assert any("database unreachable" in message for message in messages), messages
        assert any("database back after" in message for message in messages), messages
        assert reaped == []

        with sessions() as session:
            job = session.get(Job, job_id)
            points = session.execute(select(MetricPoint.step, MetricPoint.values).where(MetricPoint.job_id == job_id)
                                     .order_by(MetricPoint.id)).all()
        assert job.status == "succeeded", (job.error_code, job.error_detail)
        assert job.attempt == 1 and job.resumed_from_step is None and job.lease_owner is None
        assert job.progress["step"] == STEPS and job.progress["fraction"] == 1.0
        assert job.progress["resumed_from_step"] is None
        # Every metric point, those gathered during the outage included, stored once and in order.
        assert [step for step, _ in points] == list(range(METRICS_EVERY, STEPS + 1, METRICS_EVERY))
        grad_evals = [values["grad_evals"] for _, values in points]
        assert grad_evals == sorted(grad_evals) and len(set(grad_evals)) == len(grad_evals)
        assert job.metrics["grad_evals"] == grad_evals[-1] > 0
        assert job.checkpoint_step == 1250
        engine.dispose()
    finally:
        database.drop()
