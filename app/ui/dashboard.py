"""`/ui`: the dashboard page, and its script, style sheet and vendored uPlot under `/ui/static/`.

The page and its assets need no key (they hold no data); every data call the page makes carries the key the
user entered once (kept in the browser's localStorage). The page is told whether the service wants a key, so
that it asks for one before its first call instead of collecting a 401.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

UI_URL = "/ui"
STATIC_URL = "/ui/static"
ASSETS = files("app.ui") / "static"


def install_dashboard(app: FastAPI, auth_enabled: bool) -> None:
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

