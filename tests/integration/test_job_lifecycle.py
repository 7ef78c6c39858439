"""The service end to end over real HTTP, in embedded (SQLite + filesystem broker) and cluster (PostgreSQL +
Redis) mode: SVGD on a correlated Gaussian, cancellation, and recovery from a killed worker."""

from __future__ import annotations

import io
import json
import time

import numpy as np
import pytest

from tests.support.stack import Stack, wait_for

pytestmark = pytest.mark.integration

MEAN = [1.0, -2.0]
COV = [[1.0, 0.8], [0.8, 2.0]]


def gaussian_spec(steps: int, **extra: object) -> dict:
    spec = {
        "method": "svgd",
        "target": {"kind": "gaussian", "mean": MEAN, "cov": COV},
        "num_particles": 200,
        "steps": steps,
        "seed": 3,
        "options": {"optimizer": {"name": "adam", "lr": 0.05}},
    }
    spec.update(extra)
    return spec


def test_svgd_fits_a_correlated_gaussian(stack: Stack) -> None:
    response = stack.submit(gaussian_spec(steps=1500, metrics_every=50))
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    assert response.json()["status"] == "queued"
    assert response.headers["location"] == f"/v1/jobs/{job_id}"

    seen = set()
    steps_seen = []

    def finished() -> bool:
        job = stack.job(job_id)
        seen.add(job["status"])
        if job["status"] == "running":
            steps_seen.append(job["progress"]["step"])
        return job["status"] in {"succeeded", "failed", "cancelled"}

    wait_for(finished, 120, interval=0.05, what="the job to finish")
    job = stack.job(job_id)
    assert job["status"] == "succeeded", (job, stack.log_tail())
    assert "running" in seen
    assert job["progress"] == {"step": 1500, "total_steps": 1500, "fraction": 1.0, "eta_s": 0.0,
                               "resumed_from_step": None}
    assert job["started_at"] and job["finished_at"]
    assert steps_seen == sorted(steps_seen), "progress went backwards"
    assert len(set(steps_seen)) >= 2, "progress did not visibly advance while running"

    particles = np.asarray(stack.client.get(f"/v1/jobs/{job_id}/particles").json()["particles"])
    assert particles.shape == (200, 2)
    mean_error = np.linalg.norm(particles.mean(0) - np.asarray(MEAN))
    cov_error = np.linalg.norm(np.cov(particles.T) - np.asarray(COV)) / np.linalg.norm(np.asarray(COV))
    assert mean_error < 0.1
    assert cov_error < 0.15
    # The job reports the same errors, computed by the worker against the exact reference.
    assert job["metrics"]["mean_error"] == pytest.approx(mean_error, rel=1e-3, abs=1e-5)
    assert job["metrics"]["cov_error_rel"] == pytest.approx(cov_error, rel=1e-3)

    npy = stack.client.get(f"/v1/jobs/{job_id}/particles", headers={"Accept": "application/x-npy"})
    assert npy.headers["content-type"] == "application/x-npy"
    array = np.load(io.BytesIO(npy.content), allow_pickle=False)
    assert array.dtype == np.float32 and array.shape == (200, 2)
    np.testing.assert_array_equal(array, particles.astype(np.float32))
    assert stack.client.get(f"/v1/jobs/{job_id}/particles", headers={"Accept": "text/csv"}).status_code == 406

    trace = stack.client.get(f"/v1/jobs/{job_id}/metrics").json()["points"]
    assert [p["step"] for p in trace] == list(range(50, 1501, 50))
    assert all(p["values"]["bandwidth"] > 0 and p["values"]["step_time_s"] > 0 for p in trace)

    listed = stack.client.get("/v1/jobs", params={"status": "succeeded"}).json()["jobs"]
    assert job_id in [j["id"] for j in listed]


def test_cancel_running_job_then_worker_takes_the_next(stack: Stack) -> None:
    long_job = stack.submit(gaussian_spec(steps=1_000_000)).json()["id"]
    wait_for(lambda: stack.job(long_job)["progress"]["step"] > 0, 60, what="the long job to make progress")
    started = time.monotonic()
    response = stack.client.post(f"/v1/jobs/{long_job}/cancel")
    assert response.status_code == 202
    assert response.json()["cancel_requested"] is True
    job = stack.wait_status(long_job, {"cancelled"}, timeout=5)
    assert time.monotonic() - started < 5
    assert 0 < job["progress"]["step"] < 1_000_000
    # Idempotent.
    assert stack.client.post(f"/v1/jobs/{long_job}/cancel").status_code == 202

    short_job = stack.submit(gaussian_spec(steps=50)).json()["id"]
    assert stack.wait_status(short_job, {"succeeded", "failed"}, timeout=60)["status"] == "succeeded"
    conflict = stack.client.post(f"/v1/jobs/{short_job}/cancel")
    assert conflict.status_code == 409
    assert conflict.json()["code"] == "job_finished"
    assert conflict.headers["content-type"] == "application/problem+json"
    assert stack.job(short_job)["status"] == "succeeded"

    # Particles of a cancelled job are not a result.
    assert stack.client.get(f"/v1/jobs/{long_job}/particles").status_code == 409
    # Finished jobs can be deleted, and are gone afterwards.
    assert stack.client.delete(f"/v1/jobs/{short_job}").status_code == 204
    assert stack.client.get(f"/v1/jobs/{short_job}").status_code == 404


def test_events_stream_follows_a_job_to_its_end(stack: Stack) -> None:
    job_id = stack.submit(gaussian_spec(steps=1500)).json()["id"]
    events = []
    with stack.client.stream("GET", f"/v1/jobs/{job_id}/events", params={"poll_seconds": 0.1}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    statuses = [e["status"] for e in events]
    assert statuses[-1] == "succeeded"
    assert "running" in statuses
    steps = [e["progress"]["step"] for e in events]
    assert steps == sorted(steps) and len(set(steps)) >= 3
    assert stack.client.get("/v1/jobs/job_missing/events").status_code == 404


def test_cancel_queued_job_never_starts(stack: Stack) -> None:
    blocker = stack.submit(gaussian_spec(steps=1_000_000)).json()["id"]
    stack.wait_status(blocker, {"running"}, timeout=60)
    queued = stack.submit(gaussian_spec(steps=100)).json()["id"]
    assert stack.client.post(f"/v1/jobs/{queued}/cancel").status_code == 202
    assert stack.job(queued)["status"] == "cancelled"
    stack.client.post(f"/v1/jobs/{blocker}/cancel")
    stack.wait_status(blocker, {"cancelled"}, timeout=10)
    follower = stack.submit(gaussian_spec(steps=20)).json()["id"]
    stack.wait_status(follower, {"succeeded"}, timeout=60)
    job = stack.job(queued)
    assert job["status"] == "cancelled" and job["started_at"] is None and job["attempt"] == 0
