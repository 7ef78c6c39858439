"""Run a submitted job with the real worker code (`workers.runner.JobExecution`) in this process: what a
Celery worker does with the job's message, without a broker consumer or a subprocess."""

from __future__ import annotations

from service import job_state
from service.db import make_engine, make_session_factory
from service.models import Job
from service.queue import make_celery
from service.settings import Settings
from service.store import make_store
from workers.context import WorkerContext
from workers.runner import JobExecution


def run_worker(settings: Settings, job_id: str) -> None:
    context = WorkerContext(settings=settings, sessions=make_session_factory(make_engine(settings.database_url)),
                            store=make_store(settings.artifacts_url), sender=make_celery(settings, main="inprocess"))
    with context.sessions() as session:
        lease = job_state.claim_job(session, job_id, "inprocess-worker", settings.lease_seconds)
        if lease is None:
            raise RuntimeError(f"job {job_id} could not be claimed")
        job = session.get(Job, job_id)
        session.expunge(job)
    JobExecution(context, lease, job).execute()
