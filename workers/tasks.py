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
