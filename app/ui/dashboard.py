"""`/ui`: the dashboard page, and its script, style sheet and vendored uPlot under `/ui/static/`.

The page and its assets need no key (they hold no data); every data call the page makes carries the key the
user entered once (kept in the browser's localStorage). The page is told whether the service wants a key, so
that it asks for one before its first call instead of collecting a 401.

Since the key sits in the browser's localStorage, the page and its assets are served with a strict Content
Security Policy (scripts, styles and connections from this origin only; no inline script or style, which the
page has none of, and no plugins), may not be framed (`frame-ancestors 'none'`, `X-Frame-Options: DENY`:
no clickjacking), are not sniffed into another type (`X-Content-Type-Options: nosniff`) and send no Referer.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

UI_URL = "/ui"
STATIC_URL = "/ui/static"
ASSETS = files("app.ui") / "static"

#: `data:` images: the page's empty favicon. `blob:` is not needed: downloads are anchors, not fetches.
CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                           "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
                           "form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class DashboardSecurityHeaders:
    """Adds SECURITY_HEADERS to every response under `/ui` (the page, its redirect, its assets, their 404s)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == UI_URL or path.startswith(f"{UI_URL}/")):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)


def install_dashboard(app: FastAPI, auth_enabled: bool) -> None:
    app.add_middleware(DashboardSecurityHeaders)
    app.mount(STATIC_URL, StaticFiles(directory=str(ASSETS)), name="ui-static")
    page = (files("app.ui") / "index.html").read_text(encoding="utf-8")
    page = page.replace("{{auth}}", "true" if auth_enabled else "false")

    @app.get(UI_URL, include_in_schema=False)
    async def dashboard_redirect(request: Request) -> RedirectResponse:
        # A trailing slash, so that the page's relative links resolve under /ui/ (behind a prefix proxy too).
        return RedirectResponse(f"{request.scope.get('root_path', '')}{UI_URL}/")

    @app.get(f"{UI_URL}/", include_in_schema=False)
    async def dashboard() -> HTMLResponse:
        return HTMLResponse(page, headers={"Cache-Control": "no-cache"})

