"""Sending run-job messages for queued jobs the database holds as unsent (`enqueued_at` NULL).

The database decides what must run; the broker only wakes workers up. A send that fails (broker unreachable)
puts its jobs back as unsent, and the maintenance loop of every worker retries them each pass, so a job
requeued during a broker outage is sent within one pass of the broker's return (docs/architecture.md,
"Broker outages").
"""

from __future__ import annotations

import logging

from celery import Celery
from sqlalchemy.orm import Session, sessionmaker

from service import job_state
from service.queue import enqueue_job
from service.settings import Settings

logger = logging.getLogger("parvis.worker")


def send_jobs(sessions: sessionmaker[Session], sender: Celery, settings: Settings, job_ids: list[str]) -> bool:
    """Send each job's message; at the first failure mark that job and the rest unsent and stop (the broker
    is most likely down: the next pass retries). True if all were sent."""
    for index, job_id in enumerate(job_ids):
        try:
            enqueue_job(sender, settings, job_id)
        except Exception as exc:  # noqa: BLE001 - any broker failure: retried next pass
            logger.warning("could not send %d job(s) (broker unreachable: %s); retrying next pass",
                           len(job_ids) - index, exc)
            with sessions() as session:
                job_state.mark_unsent(session, job_ids[index:])
            return False
    return True


def send_unsent(sessions: sessionmaker[Session], sender: Celery, settings: Settings,
                job_ids: list[str] | None = None) -> bool:
    """Take the unsent queued jobs (all, or those of `job_ids`) and send them. True if every send went out."""
    with sessions() as session:
        taken = job_state.claim_unsent_jobs(session, job_ids=job_ids)
    return send_jobs(sessions, sender, settings, taken)
