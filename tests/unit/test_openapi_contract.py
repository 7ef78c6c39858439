"""The API's contract as published: every operation documents its problem responses, a wrong method gets a
405 whose `Allow` lists exactly the methods of that path, and `/v1/docs` works offline. The HTTP checks go
through a real uvicorn server (in a thread of this process) on a loopback port."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from app.main import create_app
from service.api_keys import create_api_key
from service.db import make_engine, make_session_factory
from service.migrate import upgrade
from service.settings import Settings
from tests.support.stack import free_port, wait_for

PROBLEM = "application/problem+json"
PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


class LiveApi:
    def __init__(self, client: httpx.Client, key: str, document: dict[str, Any]):
        self.client = client
        self.key = key
        self.document = document


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveApi]:
    """The app with authentication on, served by uvicorn on a free port, and a valid key."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("contract"), auth_enabled=True)
    upgrade(settings.database_url)
    engine = make_engine(settings.database_url)
    with make_session_factory(engine)() as session:
        key = create_api_key(session, "tenant-a")
    engine.dispose()
    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 60, what="uvicorn to start")
        with httpx.Client(base_url=f"http://127.0.0.1:{server.config.port}", timeout=30) as client:
            yield LiveApi(client, key, client.get("/v1/openapi.json").json())
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield method, path, operation


# -- the problem responses in the OpenAPI document --------------------------------------------------------

def test_the_problem_schema_is_a_component(live: LiveApi) -> None:
    problem = live.document["components"]["schemas"]["Problem"]
    assert set(problem["required"]) == {"type", "title", "status", "detail", "code", "request_id"}
    assert problem["properties"]["status"]["type"] == "integer"
    assert problem["additionalProperties"] is True  # codes may add fields, e.g. `loc`


def test_every_tenant_operation_documents_its_problem_responses(live: LiveApi) -> None:
    tenant_operations = [(m, p, op) for m, p, op in operations(live.document) if not p.startswith(("/v1/health", "/metrics"))]
    assert len(tenant_operations) >= 20
    for method, path, operation in tenant_operations:
        where = f"{method.upper()} {path}"
        assert operation.get("security") == [{"bearer": []}], where
        expected = {"401", "422", "429", "503"}
        if "{" in path:
            expected |= {"404", "410"}
        if "requestBody" in operation:
            expected |= {"400", "408", "413"}
        assert expected <= set(operation["responses"]), where
        for status, response in operation["responses"].items():
            if status.startswith(("4", "5")):
                assert response["content"] == {PROBLEM: {"schema": PROBLEM_REF}}, f"{where} {status}"


def test_fastapis_own_validation_error_is_gone(live: LiveApi) -> None:
    """Our 422 is a problem body; the document must not promise FastAPI's `HTTPValidationError` JSON."""
    schemas = live.document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas and "ValidationError" not in schemas
    for method, path, operation in operations(live.document):
        assert "application/json" not in operation["responses"].get("422", {}).get("content", {}), (method, path)


def test_health_routes_need_no_key_and_keep_their_own_bodies(live: LiveApi) -> None:
    ready = live.document["paths"]["/v1/health/ready"]["get"]
    assert "security" not in ready and "security" not in live.document["paths"]["/v1/health/live"]["get"]
    assert ready["responses"]["503"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Health"}


def test_real_problem_bodies_have_what_the_document_promises(live: LiveApi) -> None:
    required = live.document["components"]["schemas"]["Problem"]["required"]
    auth = {"Authorization": f"Bearer {live.key}"}
    answers = [
        (401, live.client.get("/v1/jobs")),
        (404, live.client.get("/v1/jobs/job_missing", headers=auth)),
        (422, live.client.get("/v1/jobs/job_missing/metrics", params={"since_step": -1}, headers=auth)),
    ]
    for status, response in answers:
        assert response.status_code == status
        assert response.headers["content-type"] == PROBLEM
        body = response.json()
        assert set(required) <= set(body) and body["status"] == status
        assert str(status) in live.document["paths"][response.request.url.path.replace(
            "job_missing", "{job_id}")]["get"]["responses"]


# -- 405 and Allow ------------------------------------------------------------------------------------------

def _template_regex(template: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)) + "$")


def test_405_allow_lists_every_method_of_the_path(live: LiveApi) -> None:
    """For each documented path, a method it lacks answers 405 with `Allow` = the union of the methods of
    every documented path that the concrete URL matches (Starlette named only the first route's)."""
    templates = {path: {m.upper() for m in item} for path, item in live.document["paths"].items()}
    checked = 0
    for template in templates:
        url = re.sub(r"\{[^/]+?\}", "x_1", template)
        served = set().union(*(methods for other, methods in templates.items() if _template_regex(other).match(url)))
        wrong = next(method for method in METHODS if method not in served)
        # with a key: without one, a protected path answers 401 before routing (authentication comes first)
        response = live.client.request(wrong, url, headers={"Authorization": f"Bearer {live.key}"})
        assert response.status_code == 405, (wrong, url, response.text)
        assert response.headers["content-type"] == PROBLEM
        assert response.json()["code"] == "method_not_allowed"
        allowed = {method.strip() for method in response.headers["allow"].split(",")}
        assert allowed == served, (wrong, url)
        checked += 1
    assert checked >= 15


@pytest.mark.parametrize(("method", "url", "allow"), [
    ("POST", "/v1/jobs/job_1", "DELETE, GET"),
    ("PUT", "/v1/jobs", "GET, POST"),
    ("PATCH", "/v1/datasets/ds_1", "DELETE, GET"),
    ("DELETE", "/v1/datasets", "GET, POST"),
])
def test_405_on_paths_shared_by_several_routes(live: LiveApi, method: str, url: str, allow: str) -> None:
    response = live.client.request(method, url, headers={"Authorization": f"Bearer {live.key}"})
    assert response.status_code == 405
    assert response.headers["allow"] == allow
    assert allow in response.json()["detail"]


# -- /v1/docs offline ---------------------------------------------------------------------------------------

ASSET_TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png", ".json": "application/json"}


def test_docs_page_loads_only_same_origin_assets(live: LiveApi) -> None:
    page = live.client.get("/v1/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    urls = re.findall(r'(?:src|href)="([^"]+)"', html) + re.findall(r"url: '([^']+)'", html)
    assert any(url.endswith(".js") for url in urls) and any(url.endswith(".css") for url in urls)
    assert "/v1/openapi.json" in urls
    assert not re.search(r"(https?:)?//", html), "the page refers to another origin"
    for url in urls:
        assert url.startswith("/"), url
        asset = live.client.get(url)
        assert asset.status_code == 200, url
        expected = ASSET_TYPES[Path(url).suffix]
        assert expected in asset.headers["content-type"], (url, asset.headers["content-type"])
        assert len(asset.content) > 1000, url
    bundle = live.client.get(next(url for url in urls if url.endswith(".js"))).text
    assert "SwaggerUIBundle" in bundle


def test_docs_assets_are_not_in_the_api_document(live: LiveApi) -> None:
    assert not any(path.startswith("/v1/docs") for path in live.document["paths"])
