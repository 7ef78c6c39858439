"""Retention and Prometheus metrics over real HTTP against real API and worker processes (SQLite + filesystem
queue, and PostgreSQL + Redis): expired resources answer 410, the worker's sweeper then deletes rows and
bytes (404 afterwards) but never a job that is still queued or running; `/metrics` agrees with the database
and counts requests per route template without naming any job."""

from __future__ import annotations

import signal
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, update

from service.db import make_engine
from service.models import DatasetRecord, Job, Sampler, utcnow
from tests.integration.conftest import MODES
from tests.support.stack import Stack, free_port, wait_for

pytestmark = pytest.mark.integration

TOKEN = "scrape-secret"
GENERATOR_SPEC = {"method": "gpvi_exact", "target": {"kind": "gaussian", "mean": [1.0, -1.0],
                                                     "cov": [[1.0, 0.3], [0.3, 1.0]]},
                  "num_particles": 16, "steps": 60, "seed": 1,
                  "options": {"generator": {"hidden": []}, "optimizer": {"lr": 0.01}}}


def long_svgd(steps: int = 1_000_000) -> dict:
    return {"method": "svgd", "target": {"kind": "gaussian", "mean": [0.0, 0.0], "cov": [[1.0, 0.0], [0.0, 1.0]]},
            "num_particles": 16, "steps": steps, "seed": 2}


def engine_of(stack: Stack) -> Engine:
    return make_engine(stack.env.get("PARVIS_DATABASE_URL") or f"sqlite:///{stack.data_dir / 'parvis.db'}")


def expire_now(engine: Engine, model: type, object_id: str) -> None:
    """What time would do: move the row's expiry into the past."""
    with engine.begin() as conn:
        conn.execute(update(model).where(model.id == object_id).values(expires_at=utcnow() - timedelta(minutes=1)))


def stop_worker(worker: subprocess.Popen) -> None:
    worker.send_signal(signal.SIGTERM)  # the main process only, as Celery expects
    worker.wait(timeout=60)


def scrape(stack: Stack, base_url: str | None = None) -> dict[tuple[str, tuple], float]:
    response = stack.client.get(f"{base_url or stack.base_url}/metrics",
                                headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def latency_count(samples: dict, route: str, method: str, status: int) -> float:
    key = ("parvis_http_request_duration_seconds_count",
           (("method", method), ("route", route), ("status", str(status))))
    return samples.get(key, 0.0)


def folder(stack: Stack, *parts: str) -> Path:
    return stack.data_dir.joinpath("artifacts", *parts)


@pytest.mark.parametrize("mode", MODES)
def test_expired_resources_answer_410_then_the_sweeper_deletes_rows_and_bytes(make_stack, mode: str) -> None:
    stack = make_stack(mode, PARVIS_SWEEP_INTERVAL_SECONDS="3600", PARVIS_METRICS_TOKEN=TOKEN)
    worker = stack.start_worker()
    engine = engine_of(stack)
    try:
        dataset = stack.client.post("/v1/datasets", json={"X": [[1.0], [2.0], [3.0]], "y": [0.0, 1.0, 1.0]})
        assert dataset.status_code == 201, dataset.text
        dataset_id = dataset.json()["id"]
        submitted = stack.submit(GENERATOR_SPEC)
        assert submitted.status_code == 202, submitted.text
        job_id = submitted.json()["id"]
        # The default retention (30 days) from creation, shown in every representation.
        expires = datetime.fromisoformat(submitted.json()["expires_at"])
        assert abs(expires - (utcnow() + timedelta(days=30))) < timedelta(minutes=10)
        assert abs(datetime.fromisoformat(dataset.json()["expires_at"]) - expires) < timedelta(minutes=10)

        job = stack.wait_status(job_id, {"succeeded", "failed"}, timeout=300)
        assert job["status"] == "succeeded", (job["error"], stack.log_tail())
        sampler_id = job["sampler_id"]
        sampler = stack.client.get(f"/v1/samplers/{sampler_id}").json()
        assert sampler["expires_at"] == job["expires_at"]  # a sampler lives as long as its job
        before = scrape(stack)
        assert stack.client.post(f"/v1/samplers/{sampler_id}/sample", json={"n": 10}).status_code == 200
        after = scrape(stack)
        route = "/v1/samplers/{sampler_id}/sample"
        assert latency_count(after, route, "POST", 200) == latency_count(before, route, "POST", 200) + 1
        finished = after[("parvis_job_duration_seconds_bucket", (("le", "+Inf"), ("status", "succeeded")))]
        assert finished >= 1

        for model, object_id in ((Job, job_id), (Sampler, sampler_id), (DatasetRecord, dataset_id)):
            expire_now(engine, model, object_id)
        for method, path in (("GET", f"/v1/jobs/{job_id}"), ("GET", f"/v1/jobs/{job_id}/particles"),
                             ("GET", f"/v1/samplers/{sampler_id}"), ("GET", f"/v1/datasets/{dataset_id}"),
                             ("POST", f"/v1/samplers/{sampler_id}/sample")):
            response = stack.client.request(method, path, json={"n": 1} if method == "POST" else None)
            assert response.status_code == 410, (path, response.text)
            assert response.json()["code"] == "expired"
            assert response.headers["content-type"] == "application/problem+json"
        assert job_id not in {j["id"] for j in stack.client.get("/v1/jobs").json()["jobs"]}
        assert sampler_id not in {s["id"] for s in stack.client.get("/v1/samplers").json()["samplers"]}
        assert dataset_id not in {d["id"] for d in stack.client.get("/v1/datasets").json()["datasets"]}
        # Not swept yet (this worker sweeps once an hour): the bytes are still there.
        assert folder(stack, "jobs", job_id, "particles.npy").is_file()
        assert folder(stack, "samplers", sampler_id).is_dir()
        assert folder(stack, "datasets", dataset_id).is_dir()

        # A job queued with its expiry already past is kept, runs, and goes only once it has finished.
        stop_worker(worker)
        late = stack.submit(GENERATOR_SPEC).json()["id"]
        expire_now(engine, Job, late)
        assert stack.job(late)["status"] == "queued"

        stack.env["PARVIS_SWEEP_INTERVAL_SECONDS"] = "0.5"
        stack.start_worker()
        for path in (f"/v1/jobs/{job_id}", f"/v1/samplers/{sampler_id}", f"/v1/datasets/{dataset_id}"):
            wait_for(lambda p=path: stack.client.get(p).status_code == 404, 60, what=f"{path} to be swept")
        # the sweeper commits a row's deletion before it deletes the bytes (service.retention.delete_bytes), so
        # a 404 can come a moment before the folder goes
        for kind, object_id in (("jobs", job_id), ("samplers", sampler_id), ("datasets", dataset_id)):
            wait_for(lambda k=kind, i=object_id: not folder(stack, k, i).exists(), 10,
                     what=f"{kind}/{object_id}'s bytes to go")

        seen: set[str] = set()

        def late_job_gone() -> bool:
            response = stack.client.get(f"/v1/jobs/{late}")
            if response.status_code == 200:
                seen.add(response.json()["status"])
            return response.status_code == 404

        wait_for(late_job_gone, 300, interval=0.05, what="the late job to run and then be swept")
        assert seen & {"running", "succeeded"}, seen  # it ran: the sweeper left it alone while it was active
        # rows go before bytes (see above): its folder goes a moment after the 404
        wait_for(lambda: not folder(stack, "jobs", late).exists(), 10, what=f"jobs/{late}'s bytes to go")
    except BaseException:
        print(stack.log_tail())
        raise
    finally:
        engine.dispose()


@pytest.mark.parametrize("mode", MODES)
def test_metrics_match_the_database_and_count_requests_by_route(make_stack, mode: str) -> None:
    stack = make_stack(mode, PARVIS_METRICS_TOKEN=TOKEN, PARVIS_METRICS_CACHE_SECONDS="0")
    try:
        unauthorized = stack.client.get("/metrics")
        assert unauthorized.status_code == 401 and unauthorized.json()["code"] == "unauthorized"
        assert stack.client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401

        job_ids = [stack.submit(long_svgd()).json()["id"] for _ in range(3)]  # no worker yet: all queued
        samples = scrape(stack)
        queued = len(stack.client.get("/v1/jobs", params={"status": "queued"}).json()["jobs"])
        assert queued == 3
        assert samples[("parvis_queue_depth", ())] == queued
        assert samples[("parvis_jobs", (("state", "queued"),))] == queued
        assert samples[("parvis_jobs", (("state", "running"),))] == 0
        assert samples[("parvis_database_up", ())] == 1

        before = scrape(stack)
        for job_id in job_ids:
            stack.job(job_id)
        assert stack.client.get("/v1/jobs/job_unknown").status_code == 404
        assert stack.client.get("/no/such/path/job_123").status_code == 404
        text = stack.client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
        after = scrape(stack)
        route = "/v1/jobs/{job_id}"
        assert latency_count(after, route, "GET", 200) == latency_count(before, route, "GET", 200) + 3
        assert latency_count(after, route, "GET", 404) == latency_count(before, route, "GET", 404) + 1
        assert latency_count(after, "unmatched", "GET", 404) == latency_count(before, "unmatched", "GET", 404) + 1
        assert not any(job_id in text for job_id in job_ids) and "job_unknown" not in text
        assert "job_123" not in text  # labels are route templates, never raw paths or ids

        stack.start_worker()
        running = wait_for(lambda: next((j for j in map(stack.job, job_ids) if j["status"] == "running"
                                         and j["progress"]["step"] > 0 and j["progress"]["eta_s"]), None),
                           180, interval=0.2, what="a job to run and report progress")
        samples = scrape(stack)
        assert samples[("parvis_jobs", (("state", "running"),))] == 1
        assert samples[("parvis_queue_depth", ())] == 2
        assert samples[("parvis_training_steps_per_second", (("method", "svgd"),))] > 0

        for job_id in [*(j for j in job_ids if j != running["id"]), running["id"]]:
            assert stack.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
        for job_id in job_ids:
            stack.wait_status(job_id, {"cancelled"}, timeout=120)
        samples = scrape(stack)
        assert samples[("parvis_jobs", (("state", "cancelled"),))] == 3
        assert samples[("parvis_queue_depth", ())] == 0
        # Only the job that started has a run time; the two cancelled while queued never ran.
        assert samples[("parvis_job_duration_seconds_bucket", (("le", "+Inf"), ("status", "cancelled")))] == 1
        assert ("parvis_training_steps_per_second", (("method", "svgd"),)) not in samples
    except BaseException:
        print(stack.log_tail())
        raise


def test_latency_is_summed_over_api_processes_with_a_multiprocess_dir(make_stack, tmp_path: Path) -> None:
    """Two API processes sharing PROMETHEUS_MULTIPROC_DIR: requests served by one appear in a scrape of the
    other (what `uvicorn --workers N` behind one port needs)."""
    shared = tmp_path / "prom"
    shared.mkdir()
    stack = make_stack("embedded", PARVIS_METRICS_TOKEN=TOKEN, PROMETHEUS_MULTIPROC_DIR=str(shared))
    port = free_port()
    other = subprocess.Popen([sys.executable, "-m", "app.cli", "api", "--port", str(port)], env=stack.env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    other_url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(stack, other_url), 60, what="the second API process")
        route = "/v1/jobs"
        before = latency_count(scrape(stack, other_url), route, "GET", 200)
        for _ in range(4):
            assert stack.client.get("/v1/jobs").status_code == 200  # served by the first process
        # The histogram is observed once the response has been sent, so the client can be a moment ahead of it.
        wait_for(lambda: latency_count(scrape(stack, other_url), route, "GET", 200) >= before + 4, 10,
                 what="the first process's requests in the second's scrape")
        assert latency_count(scrape(stack, other_url), route, "GET", 200) == before + 4
    finally:
        other.terminate()
        other.wait(timeout=30)


def _answers(stack: Stack, base_url: str) -> bool:
    try:
        return stack.client.get(f"{base_url}/v1/health/live").status_code == 200
    except httpx.TransportError:  # not up yet
        return False
