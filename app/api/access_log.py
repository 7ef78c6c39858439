"""One access line per HTTP request (logger `parvis.access`): method, path, status, duration_ms, request_id.

The path is logged without its query string (page tokens and any key a client puts in a URL stay out of the
logs). Installed when `log_format` is "json"; in text mode uvicorn's access log stays off, as before.
"""

from __future__ import annotations

import logging

from starlette.types import Scope

logger = logging.getLogger("parvis.access")


def log_access(scope: Scope, status: int, seconds: float) -> None:
    """One line per request (installed with RequestObserverMiddleware)."""
    duration_ms = round(seconds * 1000, 2)
    method, path = scope["method"], scope["path"]
    logger.info("%s %s %d %.1f ms", method, path, status, duration_ms,
                extra={"method": method, "path": path, "status": status, "duration_ms": duration_ms,
                       "request_id": scope.get("state", {}).get("request_id")})
