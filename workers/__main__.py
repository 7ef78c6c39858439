"""`python -m workers`: start one Celery worker (prefork, one process per GPU) on the configured queue."""

from __future__ import annotations

import sys
import uuid

from app.data.settings import get_settings


def main(argv: list[str] | None = None) -> None:
    from workers.celery_app import app

    settings = get_settings()
    args = [
        "worker",
        "--pool", "prefork",
        "--concurrency", "1",
        "--queues", settings.queue,
        "--hostname", f"parvis-{uuid.uuid4().hex[:8]}@%h",
        "--loglevel", "INFO",
        "--without-mingle", "--without-gossip",
    ]
    app.worker_main([*args, *(argv if argv is not None else sys.argv[1:])])


if __name__ == "__main__":
    main()
