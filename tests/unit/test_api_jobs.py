"""The jobs API in-process (real app, SQLite, filesystem broker; no worker): validation, idempotency,
limits, pagination, tenancy, problem bodies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.api_keys import create_api_key
from service.db import make_engine, make_session_factory
from service.settings import Settings

GOOD = {
    "method": "svgd",
    "target": {"kind": "gaussian", "mean": [0.0, 1.0], "cov": [[1.0, 0.3], [0.3, 2.0]]},
    "num_particles": 50,
    "steps": 10,
}


def queued_messages(settings: Settings) -> list[Path]:
    return [p for p in (settings.broker_dir / "queue").iterdir() if p.is_file()]


def assert_problem(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["code"] == code and body["status"] == status
    assert body["request_id"] == response.headers["x-request-id"]
    assert {"type", "title", "detail"} <= body.keys()
    assert "Traceback" not in body["detail"] and "/work" not in body["detail"]
    return body


@pytest.mark.parametrize(
    ("change", "code", "fragment"),
    [
        ({"method": "hmc2"}, "method_unknown", "unknown method 'hmc2'"),
        ({"target": {"kind": "wormhole"}}, "target_kind_unknown", "unknown target kind 'wormhole'"),
        ({"target": {"kind": "gaussian", "mean": [0, 0], "cov": [[1, 2], [2, 1]]}}, "target_invalid",
         "not positive definite"),
        ({"num_particles": 100_001}, "limit_exceeded", "num_particles 100001 is over the cap"),
        ({"steps": 1_000_001}, "limit_exceeded", "steps 1000001 is over the cap"),
        ({"options": {"optimizer": {"name": "lbfgs"}}}, "method_options_invalid", "options.optimizer.name"),
    ],
)
def test_bad_specs_get_422_and_store_nothing(make_client, change: dict, code: str, fragment: str) -> None:
    client, settings = make_client()
    body = assert_problem(client.post("/v1/jobs", json={**GOOD, **change}), 422, code)
    assert fragment in body["detail"]
    assert client.get("/v1/jobs").json()["jobs"] == []
    assert queued_messages(settings) == []


def test_nan_in_spec_is_rejected(make_client) -> None:
    client, settings = make_client()
    raw = json.dumps(GOOD).replace("0.3, 2.0", "0.3, NaN")
    body = assert_problem(client.post("/v1/jobs", content=raw, headers={"content-type": "application/json"}),
                          422, "spec_invalid")
    assert body["detail"] == "target.cov.1.1: NaN and infinity are not allowed"
    assert body["loc"] == ["target", "cov", 1, 1]
    assert queued_messages(settings) == []


def test_malformed_json_is_a_problem(client: TestClient) -> None:
    response = client.post("/v1/jobs", content=b"{not json", headers={"content-type": "application/json"})
    assert_problem(response, 422, "request_invalid")


def test_oversized_body_is_413(make_client) -> None:
    client, settings = make_client(max_request_bytes=10_000)
    big = {**GOOD, "name": "x" * 20_000}
    assert_problem(client.post("/v1/jobs", json=big), 413, "payload_too_large")

    def chunks():  # no Content-Length: the limit applies to the streamed bytes
        for _ in range(20):
            yield b" " * 1000
        yield json.dumps(GOOD).encode()

    assert_problem(client.post("/v1/jobs", content=chunks(), headers={"content-type": "application/json"}),
                   413, "payload_too_large")
    assert queued_messages(settings) == []


def test_idempotency_key_replays_and_rejects_a_different_body(make_client) -> None:
    client, settings = make_client()
    first = client.post("/v1/jobs", json=GOOD, headers={"Idempotency-Key": "abc-1"})
    assert first.status_code == 202
    again = client.post("/v1/jobs", json=GOOD, headers={"Idempotency-Key": "abc-1"})
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert len(client.get("/v1/jobs").json()["jobs"]) == 1
    assert len(queued_messages(settings)) == 1  # one row, one task

    different = client.post("/v1/jobs", json={**GOOD, "seed": 9}, headers={"Idempotency-Key": "abc-1"})
    assert_problem(different, 422, "idempotency_key_reused")
    assert len(client.get("/v1/jobs").json()["jobs"]) == 1
    # Same body under another key is a new job.
    assert client.post("/v1/jobs", json=GOOD, headers={"Idempotency-Key": "abc-2"}).status_code == 202
    assert len(queued_messages(settings)) == 2


def test_job_shape_and_queued_lifecycle(client: TestClient) -> None:
    job = client.post("/v1/jobs", json={**GOOD, "name": "my run"}).json()
    assert job["id"].startswith("job_") and len(job["id"]) == 36
    assert job["status"] == "queued" and job["name"] == "my run" and job["sampler_id"] is None
    assert job["progress"] == {"step": 0, "total_steps": 10, "fraction": 0.0, "eta_s": None, "resumed_from_step": None}
    assert job["spec"]["options"]["optimizer"]["lr"] == 0.05  # defaults filled in
    assert_problem(client.get(f"/v1/jobs/{job['id']}/particles"), 409, "job_not_finished")
    assert_problem(client.delete(f"/v1/jobs/{job['id']}"), 409, "job_not_finished")
    assert client.post(f"/v1/jobs/{job['id']}/cancel").json()["status"] == "cancelled"
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 204
    assert_problem(client.get(f"/v1/jobs/{job['id']}"), 404, "not_found")
    assert_problem(client.get(f"/v1/jobs/{job['id']}/metrics"), 404, "not_found")


def test_pagination_is_stable_and_tamper_evident(make_client) -> None:
    client, _ = make_client()
    ids = [client.post("/v1/jobs", json={**GOOD, "seed": i}).json()["id"] for i in range(5)]
    seen, token = [], None
    while True:
        params = {"page_size": 2, **({"page_token": token} if token else {})}
        page = client.get("/v1/jobs", params=params).json()
        seen += [j["id"] for j in page["jobs"]]
        token = page["next_page_token"]
        if token is None:
            break
        client.post("/v1/jobs", json={**GOOD, "seed": 99})  # inserts do not shift later pages
    assert seen == list(reversed(ids))
    page = client.get("/v1/jobs", params={"page_size": 2}).json()
    forged = page["next_page_token"][:-2] + ("AA" if not page["next_page_token"].endswith("AA") else "BB")
    assert_problem(client.get("/v1/jobs", params={"page_token": forged}), 422, "page_token_invalid")
    assert_problem(client.get("/v1/jobs", params={"page_token": page["next_page_token"], "status": "failed"}),
                   422, "page_token_invalid")
    assert_problem(client.get("/v1/jobs", params={"status": "weird"}), 422, "request_invalid")


def test_quota_on_active_jobs(make_client) -> None:
    client, settings = make_client(max_active_jobs_per_tenant=2)
    for seed in range(2):
        assert client.post("/v1/jobs", json={**GOOD, "seed": seed}).status_code == 202
    response = client.post("/v1/jobs", json={**GOOD, "seed": 5})
    assert_problem(response, 429, "quota_exceeded")
    assert response.headers["retry-after"]
    assert len(queued_messages(settings)) == 2


def test_tenants_are_isolated(make_client) -> None:
    client, settings = make_client(auth_enabled=True)
    sessions = make_session_factory(make_engine(settings.database_url))
    with sessions() as session:
        key_a, key_b = create_api_key(session, "tenant-a"), create_api_key(session, "tenant-b")
    assert_problem(client.post("/v1/jobs", json=GOOD), 401, "unauthorized")
    assert_problem(client.get("/v1/jobs", headers={"Authorization": "Bearer pvs_nope_nope"}), 401, "unauthorized")
    a = {"Authorization": f"Bearer {key_a}"}
    b = {"Authorization": f"Bearer {key_b}"}
    job_id = client.post("/v1/jobs", json=GOOD, headers=a).json()["id"]
    for method, path in [("GET", ""), ("GET", "/metrics"), ("GET", "/particles"), ("POST", "/cancel"),
                         ("DELETE", "")]:
        assert_problem(client.request(method, f"/v1/jobs/{job_id}{path}", headers=b), 404, "not_found")
    assert client.get("/v1/jobs", headers=b).json()["jobs"] == []
    assert client.get(f"/v1/jobs/{job_id}", headers=a).json()["status"] == "queued"
    # Idempotency keys are per tenant: B's "k" is not A's "k".
    ja = client.post("/v1/jobs", json=GOOD, headers={**a, "Idempotency-Key": "k"}).json()["id"]
    jb = client.post("/v1/jobs", json={**GOOD, "seed": 4}, headers={**b, "Idempotency-Key": "k"})
    assert jb.status_code == 202 and jb.json()["id"] != ja
    # Health and the OpenAPI document need no key.
    assert client.get("/v1/health/live").status_code == 200
    assert client.get("/v1/openapi.json").status_code == 200


def test_catalog_and_openapi(client: TestClient) -> None:
    methods = {m["name"]: m for m in client.get("/v1/methods").json()["methods"]}
    assert "svgd" in methods and "gaussian" in methods["svgd"]["target_kinds"]
    assert methods["svgd"]["options_schema"]["properties"]["optimizer"]
    kinds = {k["kind"]: k for k in client.get("/v1/targets/kinds").json()["kinds"]}
    assert kinds["gaussian"]["has_reference"] is True and "mean" in kinds["gaussian"]["schema"]["properties"]
    spec = client.get("/v1/openapi.json").json()
    assert "JobSpec" in spec["components"]["schemas"]
    body = spec["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/JobSpec"}
    for path in ["/v1/jobs/{job_id}/particles", "/v1/jobs/{job_id}/cancel", "/v1/health/ready", "/v1/methods"]:
        assert path in spec["paths"]


def test_readiness_without_a_worker_is_503(client: TestClient) -> None:
    response = client.get("/v1/health/ready")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert isinstance(checks.pop("warm"), bool)
    assert checks == {"database": "ok", "workers": 0, "broker": "ok"}
