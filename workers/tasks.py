"""Thin tasks: a task takes a job id and hands it to the runner (imported lazily: the parent process of a
prefork worker never loads torch, so CUDA is only ever initialised in the child)."""

from __future__ import annotations

from workers.celery_app import app


@app.task(name="parvis.run_job", ignore_result=True)
def run_job(job_id: str) -> None:
    from workers.runner import run_job_by_id
    from workers.signals import preemptible

    with preemptible():
        run_job_by_id(job_id)


@app.task(name="parvis.run_rank", ignore_result=True)
def run_rank(job_id: str, attempt: int, rank: int) -> None:
    """One rank (not 0) of a multi-process job whose rank 0 runs on another worker (workers.ranks)."""
    from service.logging_config import log_context
    from workers.ranks import run_rank as join_and_run

    with log_context(job_id=job_id):
        try:
            join_and_run(job_id, attempt, rank)
        except Exception:  # noqa: BLE001 - never crash the worker; rank 0 ends the attempt and reads the error
            import logging

            logging.getLogger("parvis.worker").warning("rank %d of job %s failed", rank, job_id, exc_info=True)
