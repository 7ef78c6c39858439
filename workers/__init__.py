"""Celery workers: claim a job, build target + method from its spec, run, checkpoint, store."""
