"""RFC 9457 problem bodies with a stable machine `code` and the request id; never a traceback or a path."""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

try:
    from fastapi.routing import iter_route_contexts
except ImportError:  # FastAPI before included routers stayed nested in app.routes: the list is already flat
    def iter_route_contexts(routes):  # type: ignore[no-redef]  # noqa: ANN001, ANN202
        return iter(routes)

from inference_core.errors import InferenceError
from service.errors import Conflict, DomainError, Expired, NotFound, QuotaExceeded, Rejected, Unavailable

PROBLEM_MEDIA_TYPE = "application/problem+json"
logger = logging.getLogger("parvis.api")

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    408: "request_timeout",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "request_invalid",
    429: "quota_exceeded",
    503: "unavailable",
}


class Problem(Exception):
    """Raise anywhere in a route to answer with a problem body."""

    def __init__(self, status: int, code: str, detail: str, *, headers: dict[str, str] | None = None,
                 extra: dict[str, Any] | None = None):
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = headers
        self.extra = extra or {}


def request_id_of(request: Request) -> str:
    return getattr(request.state, "request_id", "") or ""


def problem_response(request: Request, status: int, code: str, detail: str, *,
                     headers: dict[str, str] | None = None, extra: dict[str, Any] | None = None) -> JSONResponse:
    body = {
        "type": f"urn:parvis:problem:{code}",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "code": code,
        "request_id": request_id_of(request),
        **(extra or {}),
    }
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_MEDIA_TYPE)


#: The one mapping of the repositories' domain errors (service.errors) to HTTP statuses.
DOMAIN_STATUSES: tuple[tuple[type[DomainError], int], ...] = (
    (NotFound, 404), (Expired, 410), (Conflict, 409), (Rejected, 422), (QuotaExceeded, 429), (Unavailable, 503),
)


def domain_problem(exc: DomainError) -> Problem:
    status = next((code for kind, code in DOMAIN_STATUSES if isinstance(exc, kind)), 422)
    headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s is not None else None
    return Problem(status, exc.code, exc.detail, headers=headers, extra={"loc": list(exc.loc)} if exc.loc else None)


def _validation_detail(exc: RequestValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "the request is invalid"
    first = errors[0]
    loc = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
    message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    return f"{loc}: {message}" if loc else message


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this request's path. Starlette's own 405 names only the methods of
    the first route whose path matched, wrong wherever several routes share a path (GET and POST /v1/jobs)."""
    methods: set[str] = set()
    for route in iter_route_contexts(request.app.routes):
        if getattr(route, "methods", None) and route.matches(request.scope)[0] is not Match.NONE:
            methods |= set(route.methods)
    return sorted(methods)


def install_problem_handlers(app: FastAPI) -> None:
    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem) -> JSONResponse:
        return problem_response(request, exc.status, exc.code, exc.detail, headers=exc.headers, extra=exc.extra)

    @app.exception_handler(DomainError)
    async def _domain(request: Request, exc: DomainError) -> JSONResponse:
        return await _problem(request, domain_problem(exc))

    @app.exception_handler(InferenceError)
    async def _inference(request: Request, exc: InferenceError) -> JSONResponse:
        extra = {"loc": list(exc.loc)} if exc.loc else None
        return problem_response(request, 422, exc.code, exc.detail, extra=extra)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return problem_response(request, 422, "request_invalid", _validation_detail(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
        headers = getattr(exc, "headers", None)
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no route {request.method} {request.url.path}"
        if exc.status_code == 405 and (allowed := allowed_methods(request)):
            headers = {**(headers or {}), "Allow": ", ".join(allowed)}
            detail = f"{request.method} is not allowed on {request.url.path}; allowed: {', '.join(allowed)}"
        return problem_response(request, exc.status_code, code, detail, headers=headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error (request_id=%s)", request_id_of(request))
        return problem_response(request, 500, "internal_error",
                                "internal error; quote the request_id when reporting it")

    install_database_unavailable_handler(app)


# What SQLAlchemy raises when the database cannot be reached now (server down or refusing connections,
# connection lost, pool exhausted): a transient condition, so 503 + Retry-After rather than 500.
DATABASE_UNAVAILABLE_ERRORS: tuple[type[Exception], ...] = (
    OperationalError, InterfaceError, DisconnectionError, PoolTimeoutError,
)
DATABASE_RETRY_AFTER_SECONDS = 5


def install_database_unavailable_handler(app: FastAPI) -> None:
    """503 `database_unavailable` with Retry-After for any route; the pool pre-pings, so once the database
    is back the next request gets a fresh connection without restarting the API."""

    async def _database_unavailable(request: Request, exc: Exception) -> JSONResponse:
        logger.warning("database unavailable (request_id=%s): %s: %s", request_id_of(request),
                       type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        return problem_response(request, 503, "database_unavailable",
                                "the database is unreachable; retry later",
                                headers={"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)})

    for error in DATABASE_UNAVAILABLE_ERRORS:
        app.add_exception_handler(error, _database_unavailable)
