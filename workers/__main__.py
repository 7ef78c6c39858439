"""`python -m workers`: start one Celery worker (prefork, one process per GPU) on the configured queue."""

from __future__ import annotations

import sys
import uuid

from service.logging_config import configure_logging
from service.settings import get_settings


def main(argv: list[str] | None = None) -> None:
    settings = get_settings()
    # Before Celery starts: its logging set-up (worker_hijack_root_logger=False) keeps a configured root
    # handler, so Celery's own lines, the pool children's and ours share one format (text or JSON).
    configure_logging(settings.log_format)
    from workers.celery_app import app

    args = [
        "worker",
        "--pool", "prefork",
        "--concurrency", "1",
        "--queues", settings.queue,
        "--hostname", f"parvis-{uuid.uuid4().hex[:8]}@%h",
        "--loglevel", "INFO",
        "--without-mingle", "--without-gossip",
    ]
    quiet = ["--quiet"] if settings.log_format == "json" else []  # no ASCII-art banner among JSON lines
    app.worker_main([*quiet, *args, *(argv if argv is not None else sys.argv[1:])])


if __name__ == "__main__":
    main()
