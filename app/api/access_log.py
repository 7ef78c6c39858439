"""One access line per HTTP request (logger `parvis.access`): method, path, status, duration_ms, request_id.

The path is logged without its query string (page tokens and any key a client puts in a URL stay out of the
logs). Installed when `log_format` is "json"; in text mode uvicorn's access log stays off, as before.
"""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger("parvis.access")


class AccessLogMiddleware:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client gets if the app raises before it answers

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            duration_ms = round((time.perf_counter() - started) * 1000, 2)
            method, path = scope["method"], scope["path"]
            logger.info("%s %s %d %.1f ms", method, path, status, duration_ms,
                        extra={"method": method, "path": path, "status": status, "duration_ms": duration_ms,
                               "request_id": scope.get("state", {}).get("request_id")})
