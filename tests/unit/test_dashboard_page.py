"""`/ui` with authentication off (in-process HTTP): the page says no key is needed, its assets are served from
the package, and neither is in the OpenAPI document. With authentication on: tests/integration/test_dashboard_*."""

from __future__ import annotations

from fastapi.testclient import TestClient


def test_the_page_needs_no_key_when_auth_is_off(client: TestClient) -> None:
    page = client.get("/ui/")
    assert page.status_code == 200 and 'data-auth="false"' in page.text
    assert client.get("/ui", follow_redirects=False).headers["location"] == "/ui/"
    for asset in ("app.js", "api.js", "plots.js", "style.css", "vendor/uplot/uPlot.iife.min.js"):
        assert client.get(f"/ui/static/{asset}").status_code == 200, asset
    assert client.get("/ui/static/missing.js").status_code == 404
    assert not any(path.startswith("/ui") for path in client.get("/v1/openapi.json").json()["paths"])
