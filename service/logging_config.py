"""Log set-up shared by the API (uvicorn) and the workers (Celery): plain text for a terminal, or one JSON
object a line for log collectors (`PARVIS_LOG_FORMAT=json`).

A JSON line carries `ts`, `level`, `logger`, `message`, `thread`, the context of the code that logged it
(`request_id` inside an HTTP request, `job_id` and `tenant` inside a job run, also in the threads it starts
as `ContextThread`s: see `log_context`), any `extra=` fields, and `exc` (the formatted traceback) when an
exception is attached. uvicorn's and Celery's own loggers propagate to
the same root handler, so their lines are JSON too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import logging.config
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar, copy_context
from types import MappingProxyType
from typing import Any

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# One immutable mapping, replaced as a whole: a nested log_context restores exactly what it found.
_context: ContextVar[MappingProxyType[str, Any]] = ContextVar("parvis_log_context", default=MappingProxyType({}))

# Attributes every LogRecord has; anything else on a record came from `extra=` and goes into the JSON line
# (except uvicorn's `color_message`, the same message with terminal colour codes).
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime",
                                                                                   "color_message"}


def current_log_context() -> dict[str, Any]:
    return dict(_context.get())


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Attach `fields` (request_id, job_id, tenant, ...) to every record logged inside the block, in this
    thread or task and in what it starts with a copied context (asyncio tasks, Starlette's threadpool)."""
    token = _context.set(MappingProxyType({**_context.get(), **fields}))
    try:
        yield
    finally:
        _context.reset(token)


def bind_log_context(**fields: Any) -> None:
    """Add fields to the current context until the enclosing `log_context` (or task) ends."""
    _context.set(MappingProxyType({**_context.get(), **fields}))


class ContextThread(threading.Thread):
    """A thread that runs in a copy of the context of the code that created it. A plain thread starts with an
    empty context (contextvars are not inherited), so its lines would lose `job_id`, `request_id`, ..."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._parent_context = copy_context()

    def start(self) -> None:
        run = self.run
        self.run = lambda: self._parent_context.run(run)  # type: ignore[method-assign]
        super().start()


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "thread": record.threadName,
        }
        line.update(_context.get())
        line.update((key, value) for key, value in vars(record).items()
                    if key not in _RECORD_FIELDS and not key.startswith("_"))
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def logging_dict_config(log_format: str = "text", level: str = "INFO") -> dict[str, Any]:
    """A `logging.config.dictConfig` for the whole process: one stderr handler on the root logger; uvicorn's
    loggers lose their own handlers and propagate to it. Passed to uvicorn as `log_config` as well, so each
    server process (also `--workers N` children) sets itself up the same way."""
    formatter: dict[str, Any] = ({"()": f"{__name__}.JsonFormatter"} if log_format == "json"
                                 else {"format": TEXT_FORMAT})
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"parvis": formatter},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "parvis",
                                "stream": "ext://sys.stderr"}},
        "root": {"handlers": ["stderr"], "level": level},
        "loggers": {
            "uvicorn": {"handlers": [], "propagate": True},
            "uvicorn.error": {"handlers": [], "propagate": True},
            "uvicorn.access": {"handlers": [], "propagate": True},
            "alembic": {"level": "WARNING"},
        },
    }


def configure_logging(log_format: str | None = None, level: str = "INFO") -> dict[str, Any]:
    """Set up this process's logging (format from `PARVIS_LOG_FORMAT` unless given); returns the dict config,
    for uvicorn's `log_config`."""
    if log_format is None:
        from service.settings import Settings

        log_format = Settings().log_format
    config = logging_dict_config(log_format, level)
    logging.config.dictConfig(config)
    logging.captureWarnings(True)  # warnings.warn(...) as records of the "py.warnings" logger, not raw stderr
    return config
