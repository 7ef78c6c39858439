"""Workers die; jobs do not: SIGKILL mid-job resumes from the checkpoint, repeated loss ends in
`worker_lost`, and a graceful SIGTERM checkpoints the running job and hands it back to the queue."""

from __future__ import annotations

import signal

import pytest

from tests.integration.conftest import MODES
from tests.integration.test_job_lifecycle import gaussian_spec
from tests.support.stack import wait_for

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("mode", MODES)
def test_sigkilled_worker_job_resumes_from_checkpoint(make_stack, mode: str) -> None:
    stack = make_stack(mode)
    worker = stack.start_worker()
    job_id = stack.submit(gaussian_spec(steps=2000, checkpoint_every=250, metrics_every=100)).json()["id"]
    wait_for(lambda: (stack.job(job_id)["checkpoint_step"] or 0) >= 250, 120, what="a checkpoint")
    stack.kill_worker(worker, signal.SIGKILL)
    killed = stack.job(job_id)
    assert killed["status"] == "running" and killed["attempt"] == 1
    checkpoint = killed["checkpoint_step"]
    assert 0 < checkpoint < 2000

    stack.start_worker()
    job = stack.wait_status(job_id, {"succeeded", "failed", "cancelled"}, timeout=180)
    assert job["status"] == "succeeded", stack.log_tail()
    assert job["attempt"] == 2
    # The checkpoint's bytes are stored before its step is committed, so a SIGKILL between the two leaves the next
    # checkpoint's bytes under a record that still names this one: the retry then resumes from that later one
    # (seen once in a full run: recorded 250, resumed 500), which is what it should do.
    resumed = job["resumed_from_step"]
    assert resumed is not None and checkpoint <= resumed < 2000 and resumed % 250 == 0, \
        "the second attempt did not start from the last checkpoint"
    assert job["metrics"]["cov_error_rel"] < 0.15
    steps = [p["step"] for p in stack.client.get(f"/v1/jobs/{job_id}/metrics").json()["points"]]
    assert steps == list(range(100, 2001, 100)), "metric trace has gaps or duplicates after the resume"


def test_job_fails_with_worker_lost_after_max_attempts(make_stack) -> None:
    stack = make_stack("embedded", PARVIS_MAX_ATTEMPTS="1")
    worker = stack.start_worker()
    job_id = stack.submit(gaussian_spec(steps=1_000_000)).json()["id"]
    wait_for(lambda: stack.job(job_id)["progress"]["step"] > 0, 60, what="progress")
    stack.kill_worker(worker, signal.SIGKILL)
    stack.start_worker()
    job = stack.wait_status(job_id, {"failed", "succeeded", "queued"}, timeout=60)
    assert job["status"] == "failed"
    assert job["error"]["code"] == "worker_lost"
    assert stack.client.get("/v1/jobs", params={"status": "running"}).json()["jobs"] == []


def test_sigterm_checkpoints_and_requeues_the_running_job(make_stack) -> None:
    stack = make_stack("embedded")
    worker = stack.start_worker()
    # Long enough that the job is still running when the signal lands (2,000 steps took 4 s on a fast machine,
    # and the progress seen here lags the run by well under a second), short enough to finish after the resume.
    job_id = stack.submit(gaussian_spec(steps=6_000, checkpoint_every=100_000)).json()["id"]
    wait_for(lambda: stack.job(job_id)["progress"]["step"] > 100, 60, what="progress")
    worker.send_signal(signal.SIGTERM)  # the main process only, as `parvis serve` does
    assert worker.wait(timeout=30) == 0
    job = stack.job(job_id)
    assert job["status"] == "queued", stack.log_tail()
    assert job["attempt"] == 0, "a graceful hand-back must not use up an attempt"
    assert job["checkpoint_step"] > 100

    stack.start_worker()
    done = stack.wait_status(job_id, {"succeeded", "failed"}, timeout=300)
    assert done["status"] == "succeeded"
    assert done["resumed_from_step"] == job["checkpoint_step"]
