"""The worker's Celery app, built from the same settings as the API's sender (service.queue)."""

from __future__ import annotations

from service.queue import make_celery
from service.settings import get_settings

app = make_celery(get_settings(), main="parvis-worker")
app.conf.update(
    imports=("workers.tasks",),
    # Return GPU memory now and then: a fresh pool child every few jobs (prefork only).
    worker_max_tasks_per_child=20,
)

import workers.signals  # noqa: E402,F401 - connects the worker's signal handlers
