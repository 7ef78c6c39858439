"""Schemathesis over the whole OpenAPI document against a real uvicorn API (embedded stack, auth on, a valid
key): no 5xx, and every response conforms to the document (status code documented, content type, body
schema). Bounded: a few generated cases per operation, so the whole module takes a couple of minutes.

No worker runs: nothing submitted gets executed (schemathesis can generate valid job specs, and running them
would only spend CPU), and so `/v1/health/ready` answers its documented 503 "not ready" body, the one 5xx
allowed here. Every other operation gets the no-5xx check. Generated ids never exist, so the SSE stream
`/v1/jobs/{id}/events` answers 404 and never opens.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    allow_header_conformance,
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

from app.data.settings import Settings
from app.main import create_app
from tests.support.stack import Stack

# schemathesis cannot build `.npz` bodies; the upload's JSON, CSV and multipart bodies are still generated.
pytestmark = [pytest.mark.integration,
              pytest.mark.filterwarnings("ignore:Skipped test cases with unsupported payload media types")]

MAX_EXAMPLES = 12
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          unsupported_method, allow_header_conformance]
NOT_READY_ALLOWED = {("GET", "/v1/health/ready")}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    """A real API process with authentication on, and one valid key of tenant `fuzz`."""
    stack = Stack("embedded", tmp_path_factory.mktemp("schemathesis"), {"PARVIS_AUTH_ENABLED": "true"})
    try:
        stack.migrate()
        key = subprocess.run([sys.executable, "-m", "app.cli", "keys", "create", "--tenant", "fuzz"],
                             env=stack.env, check=True, capture_output=True, text=True).stdout.strip()
        stack.start_api()
        yield stack, key
    except BaseException:
        print(stack.log_tail())
        raise
    finally:
        stack.stop()


def _document() -> dict:
    """The OpenAPI document, built from the app's code at collection time (schemathesis parametrizes per
    operation before any server runs; its fixture-based lazy loader does not work with pytest 9).
    `test_the_served_document_is_the_one_tested` checks the running API serves this same document."""
    return create_app(Settings(data_dir=Path(tempfile.gettempdir()) / "parvis-openapi")).openapi()


DOCUMENT = _document()
schema = schemathesis.openapi.from_dict(DOCUMENT)
schema.config.update(request_timeout=60)


def test_the_served_document_is_the_one_tested(api: tuple[Stack, str]) -> None:
    stack, _ = api
    assert stack.client.get("/v1/openapi.json").json() == DOCUMENT
    operations = {(method.upper(), path) for path, item in DOCUMENT["paths"].items() for method in item}
    assert ("POST", "/v1/jobs") in operations and ("GET", "/v1/jobs/{job_id}") in operations


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_every_operation_conforms_to_the_document(case: schemathesis.Case, api: tuple[Stack, str]) -> None:
    stack, key = api
    checks = CHECKS
    if (case.method.upper(), case.path) in NOT_READY_ALLOWED:
        checks = [check for check in CHECKS if check is not not_a_server_error]
    case.call_and_validate(base_url=stack.base_url, headers={"Authorization": f"Bearer {key}"}, checks=checks)
