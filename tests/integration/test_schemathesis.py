"""Schemathesis over the whole OpenAPI document against a real uvicorn API (embedded stack, auth on, a valid
key): no 5xx, and every response conforms to the document (status code documented, content type, body
schema), a method a path lacks gets 405 with the right `Allow`, and data the document allows is not rejected
(schemathesis's `positive_data_acceptance`: only auth, not-found/expired, conflict, quota and size answers, or a
422 whose code is a constraint JSON Schema cannot state, SEMANTIC_422_CODES). Bounded: a few generated cases per
operation, so the whole module takes a minute or two.

Real objects: before the run, a dataset is uploaded and a small GPVI job is submitted and run by the real
worker code in this process (`tests.support.inprocess`), which leaves a succeeded job and its sampler. Generated
path ids are swapped for these real ids half the time (never on DELETE, so they survive the run), so the
success answers of `GET /v1/jobs/{id}`, `/sample`, `/download`, ... are checked against their schemas too.

No worker process runs: what schemathesis submits stays queued (running generated specs would only spend
CPU), and so `/v1/health/ready` answers its documented 503 "not ready" body, the one 5xx allowed here. The
SSE stream `/v1/jobs/{id}/events` opens only on the succeeded job, whose stream sends one event and ends.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    allow_header_conformance,
    content_type_conformance,
    not_a_server_error,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)
from schemathesis.config._checks import PositiveDataAcceptanceConfig

from app.api.openapi import SEMANTIC_422_CODES
from app.main import create_app
from service.settings import Settings
from tests.support.inprocess import run_worker
from tests.support.stack import Stack

# schemathesis cannot build `.npz` bodies; the upload's JSON, CSV and multipart bodies are still generated.
pytestmark = [pytest.mark.integration,
              pytest.mark.filterwarnings("ignore:Skipped test cases with unsupported payload media types")]

MAX_EXAMPLES = 12
# What data the schema allows may still meet: success, auth, a generated id that names nothing (404) or
# something expired (410), state (409: a job not finished, a key reused), a quota or stream cap (429), the
# body caps of the deployment (413). Any other 4xx (chiefly 422) on schema-valid data is a failure.
ACCEPTED_STATUSES = ["2xx", "3xx", "401", "403", "404", "409", "410", "413", "429", "5xx"]
NOT_READY_ALLOWED = {("GET", "/v1/health/ready")}
SEED_JOB = {"method": "gpvi_exact", "target": {"kind": "gaussian", "mean": [1.0, -1.0], "cov": [[1.0, 0.5],
            [0.5, 2.0]]}, "num_particles": 16, "steps": 20, "seed": 1, "options": {"generator": {"hidden": []}}}
REAL_IDS: dict[str, str] = {}  # path parameter name -> an id that exists, filled by the `api` fixture


def _document() -> dict:
    """The OpenAPI document, built from the app's code at collection time (schemathesis parametrizes per
    operation before any server runs; its fixture-based lazy loader does not work with pytest 9).
    `test_the_served_document_is_the_one_tested` checks the running API serves this same document."""
    settings = Settings(data_dir=Path(tempfile.gettempdir()) / "parvis-openapi", auth_enabled=True)
    return create_app(settings).openapi()


DOCUMENT = _document()
schema = schemathesis.openapi.from_dict(DOCUMENT)
schema.config.update(request_timeout=60)
schema.config.checks.positive_data_acceptance = PositiveDataAcceptanceConfig(expected_statuses=ACCEPTED_STATUSES)


@schema.hook
def flatmap_path_parameters(context: schemathesis.HookContext, path_parameters: dict[str, Any]) -> Any:
    """Half the time, the real object instead of a generated id (never for DELETE: the objects must last)."""
    if not path_parameters or context.operation is None or context.operation.method.upper() == "DELETE":
        return st.just(path_parameters)
    real = {name: REAL_IDS.get(name, value) for name, value in path_parameters.items()}
    return st.sampled_from([path_parameters, real])


def positive_data_accepted(ctx: Any, response: Any, case: schemathesis.Case) -> bool | None:
    """schemathesis's `positive_data_acceptance` (ACCEPTED_STATUSES), but a 422 whose stable code is one of
    SEMANTIC_422_CODES passes: the document cannot state that constraint."""
    if response.status_code == 422:
        try:
            code = response.json().get("code")
        except Exception:  # noqa: BLE001 - not a problem body: the check itself judges it
            code = None
        if code in SEMANTIC_422_CODES:
            return None
    return positive_data_acceptance(ctx, response, case)


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          unsupported_method, allow_header_conformance, positive_data_accepted]


def integral_floats_as_integers(value: Any) -> Any:
    """`10.0` as `10`, everywhere in a body. JSON Schema cannot tell them apart (`10.0` is an "integer"), but
    the server's bodies are strict (docs/api.md, "Strict types": `10.0` where an integer is expected is a 422),
    and a JSON integer is a valid float there, so this changes no float field's meaning."""
    if isinstance(value, dict):
        return {key: integral_floats_as_integers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [integral_floats_as_integers(item) for item in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value


def rounded_past_maximum(value: Any) -> bool:
    """A `seed` just past its documented maximum, 2**63 - 1: schemathesis rounds that bound through a float
    (9223372036854775808.0) and then offers e.g. 9223372036854775999 as schema-valid."""
    return isinstance(value, int) and 2**63 <= value < 2**63 + 2**12


def _seed(stack: Stack, key: str) -> None:
    """A dataset, and a succeeded job with its sampler, owned by the fuzzing tenant."""
    auth = {"Authorization": f"Bearer {key}"}
    dataset = stack.client.post("/v1/datasets", json={"X": [[0.0, 1.0], [1.0, 0.5], [2.0, 0.1]],
                                                      "y": [0.0, 1.0, 1.0]}, headers=auth)
    assert dataset.status_code == 201, dataset.text
    submitted = stack.client.post("/v1/jobs", json=SEED_JOB, headers=auth)
    assert submitted.status_code == 202, submitted.text
    job_id = submitted.json()["id"]
    run_worker(Settings(data_dir=stack.data_dir, database_url="", broker_url="", artifacts_url=""), job_id)
    job = stack.client.get(f"/v1/jobs/{job_id}", headers=auth).json()
    assert job["status"] == "succeeded" and job["sampler_id"], job
    REAL_IDS.update(dataset_id=dataset.json()["id"], job_id=job_id, sampler_id=job["sampler_id"])


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    """A real API process with authentication on, one valid key of tenant `fuzz`, and that tenant's objects."""
    stack = Stack("embedded", tmp_path_factory.mktemp("schemathesis"), {"PARVIS_AUTH_ENABLED": "true"})
    try:
        stack.migrate()
        key = subprocess.run([sys.executable, "-m", "app.cli", "keys", "create", "--tenant", "fuzz"],
                             env=stack.env, check=True, capture_output=True, text=True).stdout.strip()
        stack.start_api()
        _seed(stack, key)
        yield stack, key
    except BaseException:
        print(stack.log_tail())
        raise
    finally:
        stack.stop()
        REAL_IDS.clear()


def test_the_served_document_is_the_one_tested(api: tuple[Stack, str]) -> None:
    stack, _ = api
    assert stack.client.get("/v1/openapi.json").json() == DOCUMENT
    operations = {(method.upper(), path) for path, item in DOCUMENT["paths"].items() for method in item}
    assert ("POST", "/v1/jobs") in operations and ("GET", "/v1/jobs/{job_id}") in operations


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_every_operation_conforms_to_the_document(case: schemathesis.Case, api: tuple[Stack, str]) -> None:
    stack, key = api
    if isinstance(case.body, dict) and rounded_past_maximum(case.body.get("seed")):
        case.body = {**case.body, "seed": 2**63 - 1}  # the boundary the generator meant
    if case.meta is not None and case.meta.generation.mode.is_positive:
        case.body = integral_floats_as_integers(case.body)
    checks = CHECKS
    if (case.method.upper(), case.path) in NOT_READY_ALLOWED:
        checks = [check for check in CHECKS if check is not not_a_server_error]
    case.call_and_validate(base_url=stack.base_url, headers={"Authorization": f"Bearer {key}"}, checks=checks)


def test_the_real_objects_survived_the_run(api: tuple[Stack, str]) -> None:
    """The run reached the objects' success answers only if they were still there (nothing deleted them)."""
    stack, key = api
    auth = {"Authorization": f"Bearer {key}"}
    assert stack.client.get(f"/v1/jobs/{REAL_IDS['job_id']}", headers=auth).status_code == 200
    assert stack.client.get(f"/v1/samplers/{REAL_IDS['sampler_id']}", headers=auth).status_code == 200
    assert stack.client.get(f"/v1/datasets/{REAL_IDS['dataset_id']}", headers=auth).status_code == 200
