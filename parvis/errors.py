"""Typed exceptions of the client. Each carries the problem `code` of docs/api.md ("Conventions"), the HTTP
status (None for errors found on this side) and the server's `request_id`, so a caller can branch on `code`
without parsing messages."""

from __future__ import annotations

from typing import Any


class ParvisError(Exception):
    """Base of every client error: `code` (stable, machine-readable), `detail` (one line for people)."""

    def __init__(self, code: str, detail: str, *, status: int | None = None, request_id: str | None = None,
                 body: dict[str, Any] | None = None):
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.status = status
        self.request_id = request_id
        self.body = body or {}

    def __str__(self) -> str:
        return f"{self.detail} [{self.code}]"


class BadRequestError(ParvisError):
    """400, 413, 415: the request itself is unusable."""


class AuthenticationError(ParvisError):
    """401 `unauthorized`: missing, unknown or revoked API key."""


class PermissionDeniedError(ParvisError):
    """403."""


class NotFoundError(ParvisError):
    """404 `not_found`, and 410 `expired` (docs/api.md, "Retention": treat both as gone)."""


class ConflictError(ParvisError):
    """409: e.g. particles of a job that has not succeeded, deleting a live job."""


class ValidationError(ParvisError):
    """422: the spec or the body is invalid (`spec_invalid`, `target_invalid`, `method_unknown`, ...)."""


class RateLimitError(ParvisError):
    """429 (`quota_exceeded`, `too_many_streams`); `retry_after` seconds when the server gave it."""

    def __init__(self, *args: Any, retry_after: float | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.retry_after = retry_after


class ServiceUnavailableError(ParvisError):
    """503 (`database_unavailable`, `broker_unavailable`, ...) after the client's retries."""


class ServerError(ParvisError):
    """Any other 5xx."""


class ConnectionFailedError(ParvisError):
    """The service could not be reached (code `connection_failed`) after the client's retries."""


class JobFailedError(ParvisError):
    """A waited-for job ended `failed`: `code` is the job's own error code (e.g. `diverged`); `job` its state."""

    def __init__(self, *args: Any, job: dict[str, Any] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.job = job or {}


class JobCancelledError(JobFailedError):
    """A waited-for job ended `cancelled` (code `cancelled`)."""


class WaitTimeoutError(ParvisError):
    """`wait(..., timeout=)` ran out before the job finished (code `wait_timeout`)."""


_BY_STATUS: dict[int, type[ParvisError]] = {
    400: BadRequestError, 401: AuthenticationError, 403: PermissionDeniedError, 404: NotFoundError,
    409: ConflictError, 410: NotFoundError, 413: BadRequestError, 415: BadRequestError, 422: ValidationError,
    429: RateLimitError, 503: ServiceUnavailableError,
}


def error_from_problem(status: int, body: Any, headers: dict[str, str] | None = None) -> ParvisError:
    """The exception for an error response; `body` is the parsed problem JSON (or anything else)."""
    problem = body if isinstance(body, dict) else {}
    code = str(problem.get("code") or f"http_{status}")
    detail = str(problem.get("detail") or problem.get("title") or f"HTTP {status}")
    cls = _BY_STATUS.get(status, ServerError if status >= 500 else ParvisError)
    kwargs: dict[str, Any] = {"status": status, "request_id": problem.get("request_id"), "body": problem}
    if cls is RateLimitError:
        kwargs["retry_after"] = retry_after_seconds((headers or {}).get("retry-after"))
    return cls(code, detail, **kwargs)


def retry_after_seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:  # an HTTP date: not sent by this service
        return None
