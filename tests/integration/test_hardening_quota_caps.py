"""Issue 15, items 4 and 5 over real HTTP against real API processes (SQLite + filesystem broker, and
PostgreSQL + Redis): the per-tenant cap on active jobs holds under concurrent submits, and the size caps."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from sqlalchemy import create_engine, text

from tests.support.stack import Stack

pytestmark = pytest.mark.integration

CAP = 5
SUBMITTERS = 30
SPEC = {
    "method": "svgd",
    "target": {"kind": "gaussian", "mean": [0.0, 1.0], "cov": [[1.0, 0.3], [0.3, 2.0]]},
    "num_particles": 20,
    "steps": 10,
}


def stored_job_count(stack: Stack) -> int:
    """Rows in the jobs table, read from the database itself (not through the API)."""
    url = stack.database.url if stack.database else f"sqlite:///{stack.data_dir / 'parvis.db'}"
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(text("SELECT count(*) FROM jobs")).scalar_one())
    finally:
        engine.dispose()


def submit_together(stack: Stack, keys: list[str]) -> list[httpx.Response]:
    """One thread and one connection per request, all released at once."""
    start = threading.Barrier(len(keys))

    def submit(key: str) -> httpx.Response:
        with httpx.Client(base_url=stack.base_url, timeout=120) as client:
            start.wait()
            return client.post("/v1/jobs", json={**SPEC, "name": key}, headers={"Idempotency-Key": key})

    with ThreadPoolExecutor(max_workers=len(keys)) as pool:
        return list(pool.map(submit, keys))


@pytest.mark.parametrize("mode", ["embedded", "cluster"])
def test_concurrent_submits_never_overrun_the_tenant_cap(make_stack, mode: str) -> None:
    # No worker: accepted jobs stay queued, so each one keeps counting against the cap.
    stack = make_stack(mode, PARVIS_MAX_ACTIVE_JOBS_PER_TENANT=str(CAP))
    keys = [f"burst-{i}" for i in range(SUBMITTERS)]
    responses = submit_together(stack, keys)

    statuses = sorted(r.status_code for r in responses)
    assert statuses == [202] * CAP + [429] * (SUBMITTERS - CAP), (statuses, stack.log_tail())
    for response in responses:
        if response.status_code == 429:
            assert response.headers["content-type"] == "application/problem+json"
            assert response.json()["code"] == "quota_exceeded"
            assert response.headers["retry-after"]
    accepted = {r.json()["id"]: key for r, key in zip(responses, keys, strict=True) if r.status_code == 202}
    assert len(accepted) == CAP
    assert stored_job_count(stack) == CAP
    listed = stack.client.get("/v1/jobs").json()["jobs"]
    assert {job["id"] for job in listed} == set(accepted)
    assert all(job["status"] == "queued" for job in listed)

    # At the cap, a retry of an accepted request is still its replay (200, same job), not a 429.
    job_id, key = next(iter(accepted.items()))
    replay = stack.client.post("/v1/jobs", json={**SPEC, "name": key}, headers={"Idempotency-Key": key})
    assert replay.status_code == 200, replay.text
    assert replay.json()["id"] == job_id

    # Once a job leaves the active states, exactly one more fits, however many ask at once.
    assert stack.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
    second = submit_together(stack, [f"second-{i}" for i in range(10)])
    assert sorted(r.status_code for r in second) == [202] + [429] * 9
    assert stored_job_count(stack) == CAP + 1


@pytest.mark.parametrize("mode", ["embedded", "cluster"])
def test_same_key_submitted_concurrently_makes_one_job(make_stack, mode: str) -> None:
    stack = make_stack(mode, PARVIS_MAX_ACTIVE_JOBS_PER_TENANT=str(CAP))
    responses = submit_together(stack, ["same-key"] * 12)
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 11 + [202], statuses
    assert len({r.json()["id"] for r in responses}) == 1
    assert stored_job_count(stack) == 1


def assert_limit_exceeded(response: httpx.Response, loc: list[str], *fragments: str) -> None:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["code"] == "limit_exceeded" and body["loc"] == loc
    for fragment in fragments:
        assert fragment in body["detail"], body["detail"]


@pytest.mark.parametrize("mode", ["embedded", "cluster"])
def test_size_caps_at_submit(make_stack, mode: str) -> None:
    """The memory estimate and the metric-row cap refuse a job before anything is stored or queued."""
    stack = make_stack(mode)
    cap = 8 * 1024**3
    huge = {**SPEC, "target": {"kind": "banana", "dim": 1_000_000}, "num_particles": 100_000}
    # 100,000 particles × 10⁶ dimensions × 4 bytes × 16 copies, plus the pairwise scratch.
    assert_limit_exceeded(stack.submit(huge), ["num_particles"], "memory estimate is 5.8 TiB", f"({cap} bytes)",
                          "100000 particles of dimension 1000000")
    # 10⁶ dimensions fit with fewer particles, but not with MMD's 1,000 float64 reference draws (8 GB) too.
    assert_limit_exceeded(stack.submit({**huge, "num_particles": 100}), ["num_particles"], "13.7 GiB")
    fits = stack.submit({**huge, "num_particles": 100, "eval": {"mmd": False}})
    assert fits.status_code == 202, fits.text

    # A target whose dimension comes from an uploaded data set is checked once the data set's shape is known:
    # a BNN 3 → 500 → 500 → 1 has 253,001 weights and biases, plus its two log-precisions.
    rng = np.random.default_rng(0)
    uploaded = stack.client.post("/v1/datasets", json={"X": rng.normal(size=(20, 3)).tolist(),
                                                       "y": rng.normal(size=20).tolist()})
    assert uploaded.status_code == 201, uploaded.text
    bnn = {**SPEC, "target": {"kind": "bnn", "dataset": uploaded.json()["id"], "hidden": [500, 500]},
           "num_particles": 20_000}
    assert_limit_exceeded(stack.submit(bnn), ["num_particles"], "20000 particles of dimension 253002")

    many_rows = {**SPEC, "steps": 1_000_000, "metrics_every": 1}
    assert_limit_exceeded(stack.submit(many_rows), ["metrics_every"], "1000001 metric points",
                          "cap of 100000", "metrics_every to at least 11")
    assert stored_job_count(stack) == 1


@pytest.mark.parametrize("mode", ["embedded", "cluster"])
def test_metrics_are_paginated_and_downsampled(make_stack, mode: str) -> None:
    stack = make_stack(mode, PARVIS_MAX_PAGE_SIZE="100")
    stack.start_worker()
    steps = 250
    response = stack.submit({**SPEC, "steps": steps, "metrics_every": 1})
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    assert stack.wait_status(job_id, {"succeeded", "failed"}, 300)["status"] == "succeeded", stack.log_tail()
    url = f"/v1/jobs/{job_id}/metrics"

    # Pages of at most PARVIS_MAX_PAGE_SIZE points, each naming the step to continue after.
    pages, since = [], None
    while True:
        params = {"limit": 60} | ({"since_step": since} if since is not None else {})
        page = stack.client.get(url, params=params).json()
        pages.append(page)
        since = page["next_since_step"]
        if since is None:
            break
        assert since == page["points"][-1]["step"]
    assert [len(p["points"]) for p in pages] == [60, 60, 60, 60, 10]
    walked = [point["step"] for page in pages for point in page["points"]]
    assert walked == list(range(1, steps + 1))
    default = stack.client.get(url).json()
    assert [p["step"] for p in default["points"]] == list(range(1, 101)) and default["next_since_step"] == 100
    assert stack.client.get(url, params={"limit": 1000}).json()["next_since_step"] == 100  # clamped to 100
    assert [p["step"] for p in stack.client.get(url, params={"since_step": 245}).json()["points"]] == [
        246, 247, 248, 249, 250]

    # Downsampled: at most max_points, evenly spread, first and last included, in one answer.
    down = stack.client.get(url, params={"max_points": 6}).json()
    assert [p["step"] for p in down["points"]] == [1, 51, 101, 151, 201, 250]
    assert down["next_since_step"] is None
    assert [p["step"] for p in stack.client.get(url, params={"max_points": 1}).json()["points"]] == [250]
    late = stack.client.get(url, params={"max_points": 3, "since_step": 200}).json()
    assert [p["step"] for p in late["points"]] == [201, 226, 250]
    assert len(stack.client.get(url, params={"max_points": 1000}).json()["points"]) == steps
    bad = stack.client.get(url, params={"max_points": 0})
    assert bad.status_code == 422 and bad.json()["code"] == "request_invalid"
