"""Pure ASGI middleware: request ids, and body-size limits enforced before a body is read in full.

Starlette imposes no body limit of its own (starlette#2155), so oversized uploads are refused here: at once
from Content-Length, or as soon as a streamed body passes the limit.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from http import HTTPStatus

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.logging_config import bind_log_context

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._\-]{1,64}$")


class RequestIdMiddleware:
    """Accept a sane client `X-Request-ID` or make one; expose it to handlers and echo it back."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _REQUEST_ID.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        bind_log_context(request_id=request_id)  # this request's task only: its log lines carry the id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            await send(message)

        await self.app(scope, receive, send_with_id)


class _BodyTooLarge(HTTPException):
    """An HTTPException, so FastAPI's body parsing re-raises it as is instead of turning it into a 400."""


class BodyLimitMiddleware:
    """413 for bodies over `limit_for(path)` bytes."""

    def __init__(self, app: ASGIApp, limit_for: Callable[[str], int]):
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._reject(scope, send, limit)
            return
        received = 0
        response_started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _BodyTooLarge(413, f"request body is over the limit of {limit} bytes")
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _BodyTooLarge:
            if not response_started:
                await self._reject(scope, send, limit)

    @staticmethod
    async def _reject(scope: Scope, send: Send, limit: int) -> None:
        request_id = scope.get("state", {}).get("request_id", "")
        body = json.dumps({
            "type": "urn:parvis:problem:payload_too_large",
            "title": HTTPStatus(413).phrase,
            "status": 413,
            "detail": f"request body is over the limit of {limit} bytes",
            "code": "payload_too_large",
            "request_id": request_id,
        }).encode()
        await send({
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/problem+json"), (b"content-length", str(len(body)).encode()),
                        (b"connection", b"close")],
        })
        await send({"type": "http.response.body", "body": body})
