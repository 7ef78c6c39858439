"""Issue 43, item 3: a database blip shorter than the lease costs a running job nothing, with the real
PostgreSQL server stopped and started (docs/architecture.md, "Database outages").

The whole stack in its own processes (the API under uvicorn, a Celery worker on Redis) on a PostgreSQL server of
this test's own (tests/support/stack.py, `PrivatePostgres`: the machine's shared server serves other tests). A job
submitted over HTTP is under way when the server is stopped with `pg_ctl stop -m immediate` (what a crash looks
like to its clients: every connection cut at once, crash recovery at the restart) and started again on the same
port ~11 s later; the lease is 30 s. The job goes on through the outage and finishes as attempt 1 with every
metric point once and in order; the API answers 503 `database_unavailable` meanwhile and recovers without a
restart; the worker process and its pool child live on.

Steps are paced with a floor, so the job outlasts the outage on any machine: as the in-process test
(test_db_outage_worker.py) wraps `ServiceHooks.on_step`, a `sitecustomize` put on the processes' PYTHONPATH here
wraps it in the worker's pool child when `workers.runner` is imported (PARVIS_TEST_STEP_PACE_S).
"""

from __future__ import annotations

import os
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.support.stack import PrivatePostgres, Stack, assert_problem, wait_for

pytestmark = pytest.mark.integration

STEPS = 1500
METRICS_EVERY = 5
PACE_S = 0.015  # a floor on each step's time: at least 22.5 s of run, against an 11 s outage
OUTAGE_S = 11.0
LEASE_S = 30.0

SPEC = {"method": "svgd", "target": {"kind": "gaussian", "mean": [0.0, 0.0], "cov": [[1.0, 0.0], [0.0, 1.0]]},
        "num_particles": 20, "steps": STEPS, "seed": 3, "metrics_every": METRICS_EVERY, "checkpoint_every": 250}

ENV = {
    "PARVIS_LEASE_SECONDS": str(LEASE_S),
    "PARVIS_HEARTBEAT_SECONDS": "1",
    "PARVIS_REAPER_INTERVAL_SECONDS": "0.5",  # the worker's own reaper polls all through the outage
    "PARVIS_PROGRESS_INTERVAL_SECONDS": "0.2",
    "PARVIS_DB_RETRY_SECONDS": "0.5",
    "PARVIS_TEST_STEP_PACE_S": str(PACE_S),
}

PACER = '''"""Test-only (tests/integration/test_db_blip_server.py): a floor of PARVIS_TEST_STEP_PACE_S seconds on each
step of a job run in this process, by wrapping workers.runner.ServiceHooks.on_step when that module is imported."""
import importlib.machinery
import os
import sys
import time

PACE = float(os.environ.get("PARVIS_TEST_STEP_PACE_S") or 0)


class _PaceSteps:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "workers.runner":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            on_step = module.ServiceHooks.on_step

            def paced(self, step, total, metrics):
                time.sleep(PACE)
                on_step(self, step, total, metrics)

            module.ServiceHooks.on_step = paced

        spec.loader.exec_module = exec_module
        return spec


if PACE > 0:
    sys.meta_path.insert(0, _PaceSteps)
'''


def metric_steps(stack: Stack, job_id: str) -> list[dict[str, Any]]:
    """Every stored metric point of the job, page by page."""
    points: list[dict[str, Any]] = []
    since: int | None = None
    while True:
        params = {} if since is None else {"since_step": since}
        page = stack.client.get(f"/v1/jobs/{job_id}/metrics", params=params)
        page.raise_for_status()
        body = page.json()
        points.extend(body["points"])
        since = body["next_since_step"]
        if since is None:
            return points


def seconds_logged(log: str, pattern: str) -> list[float]:
    return [float(match) for match in re.findall(pattern, log)]


def test_a_postgresql_server_stopped_and_started_under_a_running_job_costs_it_nothing(tmp_path: Path) -> None:
    reason = PrivatePostgres.unavailable()
    if reason is not None:
        pytest.skip(f"no private PostgreSQL server: {reason}")
    server = PrivatePostgres()
    try:
        server.start()
        database_url = server.create_database("parvis")
        pacer = tmp_path / "pacer"
        pacer.mkdir()
        (pacer / "sitecustomize.py").write_text(PACER)
        pythonpath = os.pathsep.join(filter(None, [str(pacer), os.environ.get("PYTHONPATH")]))
        stack = Stack("cluster", tmp_path / "stack", {**ENV, "PYTHONPATH": pythonpath}, database_url=database_url)
        try:
            run_blip(server, stack)
        except BaseException:
            print(stack.log_tail(120))
            raise
        finally:
            stack.stop()
    finally:
        server.remove()


def run_blip(server: PrivatePostgres, stack: Stack) -> None:
    stack.migrate()
    stack.start_api()
    worker = stack.start_worker()
    submitted = stack.submit(SPEC)
    assert submitted.status_code == 202, submitted.text
    job_id = submitted.json()["id"]

    def under_way() -> dict[str, Any] | None:
        job = stack.job(job_id)
        return job if job["status"] == "running" and job["progress"]["step"] >= 100 else None

    before = wait_for(under_way, 120, interval=0.2, what="the job to be under way")
    assert before["attempt"] == 1
    points_before = len(metric_steps(stack, job_id))
    assert points_before >= 10
    children = {child.pid for child in psutil.Process(worker.pid).children(recursive=True)}
    assert children, "the worker has no pool process"

    # The blip: the server quits as if it crashed, and comes back on the same port and data directory.
    down_wall = time.time()
    down_at = time.monotonic()
    server.stop("immediate")
    during: list[httpx.Response] = []
    ready_during: list[httpx.Response] = []
    live_during: list[int] = []
    while time.monotonic() - down_at < OUTAGE_S:
        during.append(stack.client.get(f"/v1/jobs/{job_id}"))
        ready_during.append(stack.client.get("/v1/health/ready"))
        live_during.append(stack.client.get("/v1/health/live").status_code)
        time.sleep(0.5)
    server.start()
    up_at = time.monotonic()
    up_wall = time.time()
    outage_s = up_at - down_at

    # The API recovers by itself (its pool pre-pings): its first answer after the restart, the job's progress
    # moving past where it was before the outage (the worker's buffered write), and readiness (which needs the
    # worker's maintenance loop to have announced itself again), each timed from the restart.
    recovered: dict[str, float] = {}
    after: dict[str, Any] = {}
    moved: dict[str, Any] = {}

    def recovering() -> bool:
        response = stack.client.get(f"/v1/jobs/{job_id}")
        now = time.monotonic() - up_at
        if response.status_code == 200:
            job = response.json()
            if "api" not in recovered:
                recovered["api"] = now
                after.update(job)
            if "progress" not in recovered and job["progress"]["step"] > before["progress"]["step"]:
                recovered["progress"] = now
                moved.update(job)
        if "ready" not in recovered and stack.client.get("/v1/health/ready").status_code == 200:
            recovered["ready"] = time.monotonic() - up_at
        return len(recovered) == 3

    wait_for(recovering, 30, interval=0.05, what="the API, the job's progress and readiness after the restart")

    job = stack.wait_status(job_id, {"succeeded", "failed", "cancelled"}, timeout=120)
    finished_at = time.monotonic()

    # During the outage: every read of the job a 503 with a stable problem code, liveness up, readiness down.
    assert len(during) >= 10
    for response in during:
        body = assert_problem(response, 503, "database_unavailable")
        assert response.headers["retry-after"] == "5", body
    assert set(live_during) == {200}
    for response in ready_during:
        assert response.status_code == 503
        assert response.json()["checks"]["database"] == "unreachable", response.json()

    # The job: attempt 1, never handed back, finished; the run went on through the outage.
    assert job["status"] == "succeeded", (job["error"], stack.log_tail())
    assert job["attempt"] == 1 and job["resumed_from_step"] is None
    assert job["progress"]["step"] == STEPS and job["progress"]["fraction"] == 1.0
    assert job["progress"]["resumed_from_step"] is None
    assert job["checkpoint_step"] == 1250
    assert after["status"] == "running" and after["attempt"] == 1
    assert moved["progress"]["step"] > before["progress"]["step"]

    # Every metric point once and in order, those gathered while the server was down included.
    points = metric_steps(stack, job_id)
    assert [point["step"] for point in points] == list(range(METRICS_EVERY, STEPS + 1, METRICS_EVERY))
    grad_evals = [point["values"]["grad_evals"] for point in points]
    assert grad_evals == sorted(grad_evals) and len(set(grad_evals)) == len(grad_evals)
    assert job["metrics"]["grad_evals"] == grad_evals[-1] > 0
    started = datetime.fromisoformat(job["started_at"]).timestamp()
    in_outage = [p["step"] for p in points if down_wall + 1 < started + p["wall_time_s"] < up_wall - 1]
    assert len(in_outage) >= 10, (len(in_outage), down_wall - started, up_wall - started)

    # The worker: alive, the same pool process, no lost lease, no failed job; it saw the outage and its end.
    assert worker.poll() is None
    assert {child.pid for child in psutil.Process(worker.pid).children(recursive=True)} == children
    log = (stack.logs / "worker-0.log").read_text(errors="replace")
    assert "database unreachable" in log
    buffered = [(float(s), int(n)) for s, n in
                re.findall(r"database back after ([\d.]+) s; buffered progress written \((\d+) metric points\)", log)]
    renewed = seconds_logged(log, r"lease renewed after ([\d.]+) s of failed heartbeats")
    lease_left = seconds_logged(log, r"the run goes on while the lease lasts \(([\d.]+) s\)")
    assert len(buffered) == 1 and renewed and lease_left, log[-4000:]
    buffered_s, buffered_points = buffered[0]
    assert buffered_points >= len(in_outage)
    for bad in ("lease not renewed in time", "lease lost", "unexpected error", "lease expired"):
        assert bad not in log, bad
    assert stack.worker_count() >= 1

    print(f"\nPostgreSQL blip: server down {outage_s:.1f} s (pg_ctl stop -m immediate .. start -w); worker "
          f"buffered {buffered_s:.1f} s ({buffered_points} metric points, {len(in_outage)} of them from steps run "
          f"while the server was down); lease renewed after {max(renewed):.1f} s of failed heartbeats (lease "
          f"{LEASE_S:.0f} s, {lease_left[0]:.0f} s of it left at the first failed write); API: {len(during)} reads "
          f"answered 503 database_unavailable, first 200 {recovered['api']:.2f} s after the restart, progress past "
          f"the outage {recovered['progress']:.2f} s, ready {recovered['ready']:.2f} s; job succeeded as attempt 1 "
          f"{finished_at - up_at:.1f} s after the restart, {len(points)} metric points, none missing or repeated.")
