"""Celery configuration shared by the API (which only sends tasks, by name) and the workers.

Long GPU jobs (docs/implementation-notes.md, "Celery for long jobs"): late acks, reject on worker loss, prefetch 1, a broker
visibility timeout above the longest job, JSON only, no result backend (job state lives in SQL).
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from service.embedded_broker import EMBEDDED_SCHEME
from service.settings import Settings

RUN_JOB_TASK = "parvis.run_job"
RUN_RANK_TASK = "parvis.run_rank"  # one rank of a multi-process job (workers.ranks)


def celery_config(settings: Settings) -> dict[str, Any]:
    config: dict[str, Any] = {
        "broker_url": settings.broker_url,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_ignore_result": True,
        "result_backend": None,
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_default_queue": settings.queue,
        "task_routes": {RUN_JOB_TASK: {"queue": settings.queue}, RUN_RANK_TASK: {"queue": settings.queue}},
        "broker_connection_retry_on_startup": True,
        # Broker outage (docs/architecture.md, "Broker outages"): the running job keeps going under its DB lease
        # and the worker reconnects for as long as it takes; a redelivered message is a no-op (claim_job).
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "broker_connection_max_retries": None,
        "worker_hijack_root_logger": False,
        "broker_transport_options": {"visibility_timeout": settings.visibility_timeout_seconds},
    }
    if settings.embedded_broker:
        queue_dir = settings.broker_dir / "queue"
        processed_dir = settings.broker_dir / "processed"
        control_dir = settings.broker_dir / "control"
        for folder in (queue_dir, processed_dir, control_dir):
            folder.mkdir(parents=True, exist_ok=True)
        # kombu's filesystem transport with whole-file messages (service/embedded_broker.py)
        config["broker_url"] = settings.broker_url.replace("filesystem://", f"{EMBEDDED_SCHEME}://", 1)
        config["broker_transport_options"] = {
            "data_folder_in": str(queue_dir),
            "data_folder_out": str(queue_dir),
            "processed_folder": str(processed_dir),
            "control_folder": str(control_dir),  # kombu's default is relative to the current directory
            "store_processed": False,
            "polling_interval": 0.25,
        }
        # The filesystem transport has no broadcast: remote control, gossip and mingle stay off.
        config["worker_enable_remote_control"] = False
    return config


def make_celery(settings: Settings, main: str = "parvis") -> Celery:
    app = Celery(main)
    app.conf.update(celery_config(settings))
    return app


def enqueue_job(celery_app: Celery, settings: Settings, job_id: str) -> None:
    """Send the run-job task by name: the sender never imports the training code."""
    celery_app.send_task(RUN_JOB_TASK, args=[job_id], queue=settings.queue)


def redis_client(settings: Settings) -> Any:
    """A plain Redis client on the broker (short timeouts: callers treat failures as "unknown"), or None when
    the broker is not Redis."""
    if not settings.redis_broker:
        return None
    import redis

    return redis.Redis.from_url(settings.broker_url, socket_timeout=2, socket_connect_timeout=2)
