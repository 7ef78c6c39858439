"""Progress after a resume (issue 15, item 8): a worker dies between two checkpoints, the next attempt resumes
from the last one and re-does the steps the lost attempt had already reported. `progress.step` never goes
back; `progress.resumed_from_step` says the attempt is a re-run and where it started."""

from __future__ import annotations

import signal
import time

import pytest

from tests.integration.test_job_lifecycle import gaussian_spec
from tests.support.stack import wait_for

pytestmark = pytest.mark.integration

TERMINAL = {"succeeded", "failed", "cancelled"}


def test_progress_never_goes_back_after_a_resume(make_stack) -> None:
    stack = make_stack("embedded")
    worker = stack.start_worker()
    job_id = stack.submit(gaussian_spec(steps=4000, checkpoint_every=1000)).json()["id"]
    # Kill well past a checkpoint, so the lost attempt has reported steps the next one must re-do.
    wait_for(lambda: (j := stack.job(job_id))["checkpoint_step"] and j["progress"]["step"] >= j["checkpoint_step"] + 600,
             180, interval=0.05, what="progress well past a checkpoint")
    stack.kill_worker(worker, signal.SIGKILL)
    lost = stack.job(job_id)
    checkpoint, reported = lost["checkpoint_step"], lost["progress"]["step"]
    assert lost["status"] == "running" and reported > checkpoint > 0
    assert lost["progress"]["resumed_from_step"] is None, "a first attempt is not a re-run"

    stack.start_worker()
    seen = []
    while (job := stack.job(job_id))["status"] not in TERMINAL:
        if job["status"] == "running" and job["attempt"] == 2:
            seen.append(job["progress"])
        time.sleep(0.05)
    assert job["status"] == "succeeded", stack.log_tail()
    assert job["resumed_from_step"] == checkpoint
    steps = [p["step"] for p in [lost["progress"], *seen, job["progress"]]]
    assert steps == sorted(steps), f"progress went backwards: {steps}"
    assert any(p["resumed_from_step"] == checkpoint for p in seen), "the re-run never said where it resumed"
    assert job["progress"]["step"] == 4000 and job["progress"]["fraction"] == 1.0
