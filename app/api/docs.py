"""`/v1/docs`: Swagger UI from assets installed with the service, so the page works offline.

FastAPI's default page loads Swagger UI from a CDN and is blank without one. The assets come from the
`fastapi-offline` package (Swagger UI 5, which renders OpenAPI 3.1; swagger-ui-bundle ships Swagger UI 4, which
does not); only its static files are used, the app is built as usual.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_URL = "/v1/docs"
STATIC_URL = "/v1/docs/static"
ASSETS = files("fastapi_offline") / "static"


def install_offline_docs(app: FastAPI) -> None:
    app.mount(STATIC_URL, StaticFiles(directory=str(ASSETS)), name="docs-static")

    @app.get(DOCS_URL, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")  # behind a proxy that strips a prefix, links keep it
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} API",
            swagger_js_url=f"{root}{STATIC_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{STATIC_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{STATIC_URL}/favicon.png",
            oauth2_redirect_url=None,
        )
