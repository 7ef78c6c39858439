"""Issue 15, items 4 and 5 over real HTTP against real API processes (SQLite + filesystem broker, and
PostgreSQL + Redis): the per-tenant cap on active jobs holds under concurrent submits, and the size caps."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
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
