"""Runs in each worker's main process: announces the worker (for readiness), reaps expired leases and sends
the run messages of queued jobs that have none (workers/dispatch.py).

A Redis broker here keeps nothing on disk, so its restart loses every queued message. An outage long enough
for a pass to fail to connect is seen by `probe_broker`; a restart between two passes is seen by the server's
`run_id` (Redis INFO) having changed: either way the queued jobs last sent before the broker came back are
sent again (`mark_unsent_sent_before`), within one pass.

Several workers may reap at once: every transition is a conditional UPDATE, so each expired job is requeued
(or failed with `worker_lost`) exactly once, and each unsent job is sent by one loop.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import datetime, timedelta

from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from service import job_state
from service.db import make_engine, make_session_factory
from service.models import WorkerHeartbeat, utcnow
from service.queue import make_celery, redis_client
from service.retention import sweep_expired
from service.settings import Settings
from service.store import make_store
from workers.dispatch import send_jobs, send_unsent

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
        self.broker_lost_at: datetime | None = None  # set during an outage: when this loop noticed it
        self.redis = redis_client(settings)  # None unless the broker is Redis
        self.broker_run_id: str | None = None  # the Redis server's run_id at the last pass
        self.last_sweep: float | None = None  # monotonic time of the last retention sweep
        self.store = make_store(settings.artifacts_url, settings)

    def run(self) -> None:
        tick = min(self.settings.heartbeat_seconds, self.settings.reaper_interval_seconds)
        last_reap = 0.0
        elapsed = 0.0
        failing_since: float | None = None  # one warning per outage, not one traceback a pass
        while True:
            try:
                self.announce()
                if elapsed - last_reap >= self.settings.reaper_interval_seconds or last_reap == 0.0:
                    self.reap()
                    last_reap = elapsed or 1e-9
                self.sweep()
                if failing_since is not None:
                    logger.info("maintenance passes work again after %.1f s", elapsed - failing_since)
                    failing_since = None
            except Exception:  # noqa: BLE001 - keep maintaining through DB/broker blips
                if failing_since is None:
                    logger.warning("maintenance pass failed (quiet until one works again)", exc_info=True)
                    failing_since = elapsed
                else:
                    logger.debug("maintenance pass failed again", exc_info=True)
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
        broker_up = self.probe_broker()
        with self.sessions() as session:
            outcome = job_state.reap_expired_leases(session)  # requeued jobs are unsent until sent below
            if broker_up and self.broker_lost_at is not None:
                resent = job_state.mark_unsent_sent_before(session, self.broker_lost_at)
                logger.warning("broker back after an outage: %d queued job(s) sent before it are sent again", resent)
                self.broker_lost_at = None
            stale = job_state.stale_queued_jobs(session, self.settings.requeue_stale_queued_seconds) \
                if broker_up else []
        for job_id in outcome.requeued:
            logger.warning("job %s: lease expired, requeued to resume from its checkpoint", job_id)
        for job_id in outcome.failed:
            logger.error("job %s: lease expired too often, failed with worker_lost", job_id)
        if not broker_up:
            return  # unsent jobs keep enqueued_at NULL; a later pass sends them
        if not (send_jobs(self.sessions, self.sender, self.settings, stale)
                and send_unsent(self.sessions, self.sender, self.settings)):
            self._broker_lost()

    def probe_broker(self) -> bool:
        """One connection to the broker per pass: an outage seen here makes the loop resend, once the broker
        is back, every queued job sent before it (a broker restarted without persistence lost them)."""
        try:
            with self.sender.connection_for_write() as connection:
                connection.connect()
        except Exception as exc:  # noqa: BLE001 - any failure to connect is an outage
            if self.broker_lost_at is None:
                logger.warning("broker unreachable (%s); queued jobs will be sent when it is back", exc)
            self._broker_lost()
            return False
        restarted = self.broker_restarted_at()
        if restarted is not None and self.broker_lost_at is None:
            logger.warning("broker restarted since the last pass (new run_id); queued jobs sent before it are "
                           "sent again")
            self.broker_lost_at = restarted
        return True

    def broker_restarted_at(self) -> datetime | None:
        """When the Redis broker started, if it is another server process than at the last pass (a restart
        too quick for any pass to see it down). Messages sent before then are gone with the old process; those
        sent after are live and are not sent again."""
        if self.redis is None:
            return None
        try:
            info = self.redis.info("server")
        except Exception:  # noqa: BLE001 - INFO refused (ACLs, a proxy): fall back to outages seen by probes
            logger.debug("could not read the broker's INFO", exc_info=True)
            return None
        run_id, uptime = str(info.get("run_id", "")), float(info.get("uptime_in_seconds", 0))
        previous, self.broker_run_id = self.broker_run_id, run_id
        if previous is None or previous == run_id:
            return None
        return utcnow() - timedelta(seconds=uptime)

    def _broker_lost(self) -> None:
        # Anything sent before the outage was noticed may be lost with it; nothing can be sent during it.
        if self.broker_lost_at is None:
            self.broker_lost_at = utcnow()

    def sweep(self) -> None:
        """Delete expired jobs, samplers and data sets with their bytes (service/retention.py), at most every
        `sweep_interval_seconds`; a failed sweep is logged and retried at the next interval."""
        now = time.monotonic()
        if self.last_sweep is not None and now - self.last_sweep < self.settings.sweep_interval_seconds:
            return
        self.last_sweep = now
        try:
            with self.sessions() as session:
                swept = sweep_expired(session, self.store)
        except Exception:  # noqa: BLE001 - retention must never stop heartbeats or reaping
            logger.warning("retention sweep failed", exc_info=True)
            return
        if swept:
            logger.info("retention: deleted %d jobs, %d samplers, %d datasets (expired)",
                        len(swept.jobs), len(swept.samplers), len(swept.datasets))

    def stop(self) -> None:
        self.stopped.set()
        if self.redis is not None:
            self.redis.close()
        try:
            with self.sessions() as session:
                session.execute(delete(WorkerHeartbeat).where(WorkerHeartbeat.name == self.worker_name))
                session.commit()
        except Exception:  # noqa: BLE001
            logger.warning("could not remove worker row", exc_info=True)
        self.engine.dispose()
