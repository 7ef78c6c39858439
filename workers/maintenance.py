"""Runs in each worker's main process: announces the worker (for readiness) and reaps expired leases.

Several workers may reap at once: every transition is a conditional UPDATE, so each expired job is requeued
(or failed with `worker_lost`) exactly once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import timedelta

from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from app.data import jobs as job_state
from app.data.db import make_engine, make_session_factory
from app.data.models import WorkerHeartbeat, utcnow
from app.data.queue import enqueue_job, make_celery
from app.data.retention import sweep_expired
from app.data.settings import Settings
from app.data.store import make_store

logger = logging.getLogger("parvis.worker")


class Maintenance(threading.Thread):
    def __init__(self, settings: Settings, worker_name: str):
        super().__init__(name="parvis-maintenance", daemon=True)
        self.settings = settings
        self.worker_name = worker_name
        self.engine = make_engine(settings.database_url)
        self.sessions: sessionmaker[Session] = make_session_factory(self.engine)
        self.sender = make_celery(settings, main="parvis-maintenance")
        self.stopped = threading.Event()

    def run(self) -> None:
        tick = min(self.settings.heartbeat_seconds, self.settings.reaper_interval_seconds)
        last_reap = 0.0
        elapsed = 0.0
        while True:
            try:
                self.announce()
                if elapsed - last_reap >= self.settings.reaper_interval_seconds or last_reap == 0.0:
                    self.reap()
                    last_reap = elapsed or 1e-9
                self.sweep()
            except Exception:  # noqa: BLE001 - keep maintaining through DB/broker blips
                logger.warning("maintenance pass failed", exc_info=True)
            if self.stopped.wait(tick):
                break
            elapsed += tick

    def announce(self) -> None:
        now = utcnow()
        with self.sessions() as session:
            row = session.get(WorkerHeartbeat, self.worker_name)
            if row is None:
                session.add(WorkerHeartbeat(name=self.worker_name, hostname=socket.gethostname(), pid=os.getpid(),
                                            queues=self.settings.queue, started_at=now, last_seen_at=now))
            else:
                row.last_seen_at = now
            session.execute(delete(WorkerHeartbeat).where(WorkerHeartbeat.last_seen_at < now - timedelta(days=1)))
            session.commit()

    def reap(self) -> None:
        with self.sessions() as session:
            outcome = job_state.reap_expired_leases(session)
            stale = job_state.stale_queued_jobs(session, self.settings.requeue_stale_queued_seconds)
        for job_id in outcome.requeued:
            logger.warning("job %s: lease expired, requeued to resume from its checkpoint", job_id)
        for job_id in outcome.failed:
            logger.error("job %s: lease expired too often, failed with worker_lost", job_id)
        for job_id in [*outcome.requeued, *stale]:
            enqueue_job(self.sender, self.settings, job_id)

    last_sweep: float | None = None  # monotonic time of the last retention sweep

    def sweep(self) -> None:
        """Delete expired jobs, samplers and data sets with their bytes (app/data/retention.py), at most every
        `sweep_interval_seconds`; a failed sweep is logged and retried at the next interval."""
        now = time.monotonic()
        if self.last_sweep is not None and now - self.last_sweep < self.settings.sweep_interval_seconds:
            return
        self.last_sweep = now
        try:
            with self.sessions() as session:
                swept = sweep_expired(session, make_store(self.settings.artifacts_url))
        except Exception:  # noqa: BLE001 - retention must never stop heartbeats or reaping
            logger.warning("retention sweep failed", exc_info=True)
            return
        if swept:
            logger.info("retention: deleted %d jobs, %d samplers, %d datasets (expired)",
                        len(swept.jobs), len(swept.samplers), len(swept.datasets))

    def stop(self) -> None:
        self.stopped.set()
        try:
            with self.sessions() as session:
                session.execute(delete(WorkerHeartbeat).where(WorkerHeartbeat.name == self.worker_name))
                session.commit()
        except Exception:  # noqa: BLE001
            logger.warning("could not remove worker row", exc_info=True)
        self.engine.dispose()
