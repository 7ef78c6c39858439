"""Celery signal wiring: maintenance in the main process, per-child set-up, and preemption on shutdown.

On a warm shutdown (SIGTERM) the main process asks the pool children to preempt: the running job saves a
checkpoint at its next step boundary and goes back to the queue, instead of holding shutdown for hours.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import psutil
from celery.exceptions import CPendingDeprecationWarning
from celery.signals import (
    celeryd_after_setup,
    worker_process_init,
    worker_ready,
    worker_shutdown,
    worker_shutting_down,
)

from service.settings import get_settings
from workers.context import apply_torch_threads, reset_worker_context
from workers.maintenance import Maintenance

logger = logging.getLogger("parvis.worker")
PREEMPT_SIGNAL = signal.SIGUSR2  # SIGUSR1 is Celery's soft-time-limit signal in pool children
_maintenance: Maintenance | None = None
_concurrency = 1  # the pool's size, recorded in the main process before it forks the children


@worker_ready.connect
def _start_maintenance(sender: Any = None, **_: Any) -> None:
    global _maintenance
    _maintenance = Maintenance(get_settings(), worker_name=str(sender.hostname))
    _maintenance.start()
    logger.info("worker %s ready", sender.hostname)


@worker_ready.connect
def _quiet_cancel_nudge(**_: Any) -> None:
    """Running tasks keep going through a broker outage on purpose (service.queue): Celery's nudge to cancel
    them instead, logged at every connection loss, does not apply. Set after Celery's own log set-up, which
    turns its pending-deprecation warnings to 'always'."""
    warnings.filterwarnings("ignore", message=r"\s*In Celery 5\.1 we introduced", category=CPendingDeprecationWarning)


@celeryd_after_setup.connect
def _record_concurrency(instance: Any = None, **_: Any) -> None:
    global _concurrency
    _concurrency = int(getattr(instance, "concurrency", None) or 1)
    if "prefork" not in getattr(getattr(instance, "pool_cls", None), "__module__", "prefork"):
        apply_torch_threads(get_settings(), _concurrency)  # solo/threads pools run jobs in this process


@worker_process_init.connect
def _init_child(**_: Any) -> None:
    reset_worker_context()
    signal.signal(PREEMPT_SIGNAL, signal.SIG_IGN)  # an idle child has nothing to preempt
    import inference_core.training  # noqa: F401 - load torch here, in the child, before the first job arrives

    threads = apply_torch_threads(get_settings(), _concurrency)
    logger.info("worker process %d: torch uses %d thread(s)", os.getpid(), threads)


@contextlib.contextmanager
def preemptible() -> Iterator[None]:
    """While a job runs in a pool child, PREEMPT_SIGNAL sets the preempt flag. Installed per task: billiard
    resets the children's signal handlers after `worker_process_init`."""
    from workers.runner import PREEMPT

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(PREEMPT_SIGNAL, lambda _signum, _frame: PREEMPT.set())
    try:
        yield
    finally:
        signal.signal(PREEMPT_SIGNAL, previous)


@worker_shutting_down.connect
def _preempt_running_jobs(**_: Any) -> None:
    from workers.runner import PREEMPT

    PREEMPT.set()  # solo/threads pools run the job in this process
    for child in psutil.Process(os.getpid()).children():
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, PREEMPT_SIGNAL)


@worker_shutdown.connect
def _stop_maintenance(**_: Any) -> None:
    if _maintenance is not None:
        _maintenance.stop()
