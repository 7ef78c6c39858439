"""Issue 15: the lines a worker's heartbeat thread logs carry the job's `job_id` and `tenant` (contextvars are not
inherited by threads; the heartbeat runs in a copy of the run's context). Real API and worker, JSON logs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.stack import Stack, wait_for

pytestmark = pytest.mark.integration


def json_lines(stack: Stack, name: str) -> list[dict[str, Any]]:
    records = []
    for line in (stack.logs / name).read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # Celery's shutdown banner; the other tests check every line is JSON
    return records


def test_heartbeat_lines_carry_the_job_id(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack("embedded", PARVIS_LOG_FORMAT="json")
    stack.start_worker()
    spec = {"method": "svgd", "target": {"kind": "gaussian", "mean": [0.0, 0.0], "cov": [[1.0, 0.0], [0.0, 1.0]]},
            "num_particles": 20, "steps": 1_000_000, "seed": 1}
    submitted = stack.submit(spec)
    assert submitted.status_code == 202, submitted.text
    job_id = submitted.json()["id"]
    stack.wait_status(job_id, {"running"}, timeout=120)
    assert stack.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
    stack.wait_status(job_id, {"cancelled"}, timeout=60)

    def heartbeat_lines() -> list[dict[str, Any]]:
        return [r for r in json_lines(stack, "worker-0.log") if str(r.get("thread", "")).startswith("heartbeat-")]

    lines = wait_for(heartbeat_lines, 30, what="a line from the heartbeat thread")
    assert any("cancel requested" in r["message"] for r in lines), lines
    assert all(r.get("job_id") == job_id and r.get("tenant") == "local" for r in lines), lines
    # The job's context stays in its threads: the worker's own lines outside the run carry no job id.
    assert all("job_id" not in r for r in json_lines(stack, "worker-0.log") if r["logger"].startswith("celery."))
