"""Two deployment options through the real service: artifacts in an S3-compatible bucket (a moto_server process
on loopback, as MinIO would be), and JSON logs (PARVIS_LOG_FORMAT=json) that carry request and job ids.

One embedded stack (uvicorn API + Celery worker) runs with both; the bucket is listed with boto3 to prove
where the bytes went, and the API's and worker's log files are parsed line by line."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.support.s3 import S3Server, running_s3_server
from tests.support.stack import Stack, wait_for

pytestmark = pytest.mark.integration

PREFIX = "parvis-artifacts"
# Printed by Celery's shutdown handler straight to the terminal, not through logging: the one kind of
# non-JSON line a JSON-mode worker writes (docs/architecture.md, "Logs").
TOLERATED_PLAIN_LINES = ("worker: Warm shutdown", "worker: Cold shutdown")
GAUSSIAN = {"kind": "gaussian", "mean": [1.0, -1.0], "cov": [[1.0, 0.3], [0.3, 0.5]]}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, S3Server, str]]:
    root = tmp_path_factory.mktemp("s3logs")
    with running_s3_server(root) as s3:
        bucket = s3.create_bucket()
        stack = Stack("embedded", root / "stack", {**s3.service_env(bucket, PREFIX), "PARVIS_LOG_FORMAT": "json"})
        try:
            stack.migrate()
            stack.start_api()
            stack.start_worker()
            yield stack, s3, bucket
        except BaseException:
            print(stack.log_tail())
            raise
        finally:
            stack.stop()


def log_lines(stack: Stack, name: str) -> list[dict[str, Any]]:
    """Every line of one process's log as JSON (a line that is not JSON fails the test)."""
    records = []
    for line in (stack.logs / name).read_text().splitlines():
        if not line.strip() or line.startswith(TOLERATED_PLAIN_LINES):
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"{name}: a line that is not JSON: {line!r}")
    return records


def test_a_generator_jobs_artifacts_live_in_the_bucket(deployment: tuple[Stack, S3Server, str]) -> None:
    stack, s3, bucket = deployment
    spec = {"method": "gpvi_exact", "target": GAUSSIAN, "num_particles": 32, "steps": 200, "seed": 3,
            "options": {"generator": {"hidden": []}}}
    submitted = stack.submit(spec)
    assert submitted.status_code == 202, submitted.text
    job = stack.wait_status(submitted.json()["id"], {"succeeded", "failed"}, timeout=300)
    assert job["status"] == "succeeded", (job["error"], stack.log_tail())
    job_id, sampler_id = job["id"], job["sampler_id"]

    keys = s3.keys(bucket)
    assert f"{PREFIX}/jobs/{job_id}/particles.npy" in keys
    assert f"{PREFIX}/samplers/{sampler_id}/sampler.zip" in keys
    assert all(key.startswith(f"{PREFIX}/") for key in keys)
    local = stack.data_dir / "artifacts"
    assert not local.exists() or not any(p.is_file() for p in local.rglob("*")), "bytes went to the local folder"

    particles = stack.client.get(f"/v1/jobs/{job_id}/particles", headers={"Accept": "application/x-npy"})
    assert particles.status_code == 200, particles.text
    stored = s3.client().get_object(Bucket=bucket, Key=f"{PREFIX}/jobs/{job_id}/particles.npy")["Body"].read()
    assert particles.content == stored
    assert np.load(io.BytesIO(particles.content)).shape == (32, 2)

    meta = stack.client.get(f"/v1/samplers/{sampler_id}").json()
    digests = {a["role"]: a["sha256"] for a in meta["artifacts"]}
    archive = stack.client.get(f"/v1/samplers/{sampler_id}/download", params={"format": "safetensors"})
    assert archive.status_code == 200 and hashlib.sha256(archive.content).hexdigest() == digests["weights"]
    zipped = s3.client().get_object(Bucket=bucket, Key=f"{PREFIX}/samplers/{sampler_id}/sampler.zip")
    assert zipped["Body"].read() == archive.content

    drawn = stack.client.post(f"/v1/samplers/{sampler_id}/sample", json={"n": 500, "seed": 1},
                              headers={"Accept": "application/x-npy"})
    assert drawn.status_code == 200, drawn.text
    samples = np.load(io.BytesIO(drawn.content))
    assert samples.shape == (500, 2) and np.isfinite(samples).all()

    assert stack.client.delete(f"/v1/jobs/{job_id}").status_code == 204
    left = s3.keys(bucket)
    assert not [key for key in left if f"/jobs/{job_id}/" in key or f"/samplers/{sampler_id}/" in key], left


def test_json_logs_carry_request_and_job_ids(deployment: tuple[Stack, S3Server, str]) -> None:
    stack, _, _ = deployment
    listed = stack.client.get("/v1/jobs", params={"page_size": 5, "api_key": "top-secret-token"},
                              headers={"X-Request-ID": "abc123"})
    assert listed.status_code == 200 and listed.headers["x-request-id"] == "abc123"
    spec = {"method": "svgd", "target": GAUSSIAN, "num_particles": 16, "steps": 30, "seed": 1}
    submitted = stack.submit(spec, headers={"X-Request-ID": "submit-7"})
    assert submitted.status_code == 202, submitted.text
    job_id = submitted.json()["id"]
    assert stack.wait_status(job_id, {"succeeded", "failed"}, timeout=300)["status"] == "succeeded"

    def api_access_line() -> dict[str, Any] | None:
        return next((r for r in log_lines(stack, "api.log")
                     if r.get("logger") == "parvis.access" and r.get("request_id") == "abc123"), None)

    access = wait_for(api_access_line, 30, what="the access line of request abc123")
    assert access["method"] == "GET" and access["path"] == "/v1/jobs" and access["status"] == 200
    assert isinstance(access["duration_ms"], float) and access["duration_ms"] >= 0
    assert {"ts", "level", "logger", "message"} <= set(access)
    assert "top-secret-token" not in (stack.logs / "api.log").read_text()  # no query strings in the logs

    api_records = log_lines(stack, "api.log")
    submit_lines = [r for r in api_records if r.get("request_id") == "submit-7"]
    assert {r["logger"] for r in submit_lines} >= {"parvis.api", "parvis.access"}  # handler's line + access
    assert any(r["logger"].startswith("uvicorn") for r in api_records)  # uvicorn's own lines are JSON too

    def job_lines() -> list[dict[str, Any]]:
        return [r for r in log_lines(stack, "worker-0.log") if r.get("job_id") == job_id]

    lines = wait_for(lambda: len(job_lines()) >= 2 and job_lines(), 30, what="the worker's lines of the job")
    assert all(r["tenant"] == "local" and r["logger"] == "parvis.worker" for r in lines)
    assert any("claimed" in r["message"] for r in lines) and any("succeeded" in r["message"] for r in lines)
    worker_records = log_lines(stack, "worker-0.log")
    assert any(r["logger"].startswith("celery") for r in worker_records)  # Celery's lines are JSON too
    # Outside a job, nothing carries a job id (the context does not leak into the worker's other lines).
    assert all("job_id" not in r for r in worker_records if r["logger"].startswith("celery."))


def test_problem_lines_carry_the_request_id(deployment: tuple[Stack, S3Server, str]) -> None:
    stack, _, _ = deployment
    missing = stack.client.get("/v1/jobs/job_does_not_exist", headers={"X-Request-ID": "rid-404"})
    assert missing.status_code == 404
    access = wait_for(lambda: [r for r in log_lines(stack, "api.log") if r.get("request_id") == "rid-404"], 30,
                      what="the access line of request rid-404")
    assert [(r["status"], r["path"]) for r in access if r["logger"] == "parvis.access"] == [
        (404, "/v1/jobs/job_does_not_exist")]

