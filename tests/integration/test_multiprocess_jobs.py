"""One job as two ranks of a gloo process group (issue 44), end to end with real workers: the same answer as one
rank, two worker processes meeting over loopback as two machines would, a killed rank's attempt retried from the
last checkpoint with every metric point, and a cancel that stops every rank."""

from __future__ import annotations

import io
import signal

import numpy as np
import psutil
import pytest

from tests.integration.test_job_lifecycle import gaussian_spec
from tests.support.stack import wait_for

pytestmark = pytest.mark.integration

FINISHED = {"succeeded", "failed", "cancelled"}


def two_ranks(spec: dict) -> dict:
    return {**spec, "resources": {"processes": 2}}


def particles(stack, job_id: str) -> np.ndarray:
    response = stack.client.get(f"/v1/jobs/{job_id}/particles", headers={"accept": "application/x-npy"})
    assert response.status_code == 200, response.text
    return np.load(io.BytesIO(response.content))


def rank_processes(job_id: str) -> list[psutil.Process]:
    """The local ranks (`python -m workers.rank JOB ...`) rank 0 started for this job."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "workers.rank" in cmdline and job_id in cmdline:
            found.append(process)
    return found


def metric_steps(stack, job_id: str) -> list[int]:
    return [p["step"] for p in stack.client.get(f"/v1/jobs/{job_id}/metrics").json()["points"]]


def test_two_ranks_give_the_one_rank_answer(make_stack) -> None:
    """float64 SVGD: the ranks' direction rows are the one-rank rows up to the order of the gathered sums. The
    embedded shape is one machine: both ranks run there even where the worker offers one for jobs of others."""
    stack = make_stack("embedded", PARVIS_WORKER_LOCAL_RANKS="1")
    stack.start_worker()
    spec = gaussian_spec(steps=200, metrics_every=20, options={"optimizer": {"name": "adam", "lr": 0.05},
                                                               "dtype": "float64"})
    one = stack.succeeded(spec, timeout=240)
    two = stack.succeeded(two_ranks(spec), timeout=240)
    assert (one["ranks"], two["ranks"]) == (1, 2)
    assert two["attempt"] == 1
    np.testing.assert_allclose(particles(stack, two["id"]), particles(stack, one["id"]), rtol=0, atol=1e-6)
    assert metric_steps(stack, two["id"]) == metric_steps(stack, one["id"])
    assert two["metrics"]["cov_error_rel"] == pytest.approx(one["metrics"]["cov_error_rel"], abs=1e-6)
    assert two["quality"]["verdict"] == one["quality"]["verdict"]
    assert rank_processes(two["id"]) == []  # the local rank exited with the job


def test_a_two_rank_generator_samples_as_the_one_rank_generator(make_stack) -> None:
    """GPVI (batch sharing): each rank's rows of the noise batch, gradients summed; the stored samplers' /sample
    answers agree to float32 rounding of the draws (float64 training: the parameters agree to ~1e-15)."""
    stack = make_stack("embedded")
    stack.start_worker()
    spec = {"method": "gpvi", "target": {"kind": "gaussian", "mean": [1.0, -1.0], "cov": [[1.0, 0.5], [0.5, 2.0]]},
            "num_particles": 32, "steps": 60, "seed": 5, "options": {"dtype": "float64"}}
    one = stack.succeeded(spec, timeout=240)
    two = stack.succeeded(two_ranks(spec), timeout=240)
    assert two["ranks"] == 2 and two["sampler_id"] and one["sampler_id"]
    draws_one = stack.sample_npy(one["sampler_id"], 500, seed=11)
    draws_two = stack.sample_npy(two["sampler_id"], 500, seed=11)
    np.testing.assert_allclose(draws_two, draws_one, rtol=0, atol=1e-5)
    assert two["quality"]["verdict"] == one["quality"]["verdict"]


def test_two_workers_meet_over_loopback(make_stack) -> None:
    """Two worker processes offering one rank each, on Redis and PostgreSQL: rank 0's worker publishes the store's
    address in the job's record, the other claims the rank message and joins, as a second machine would."""
    stack = make_stack("cluster", PARVIS_WORKER_LOCAL_RANKS="1", PARVIS_WORKER_ADDRESS="127.0.0.1")
    stack.start_worker()
    stack.start_worker()
    job = stack.succeeded(two_ranks(gaussian_spec(steps=300, metrics_every=30)), timeout=240)
    assert job["ranks"] == 2 and job["attempt"] == 1
    assert metric_steps(stack, job["id"]) == list(range(0, 301, 30))[1:]
    logs = [path.read_text() for path in sorted(stack.logs.glob("worker-*.log"))]
    zero = [text for text in logs if f"job {job['id']}: 2 ranks (1 here, 1 by rank messages)" in text]
    one = [text for text in logs if f"rank 1 of job {job['id']} attempt 1 done" in text]
    assert len(zero) == 1 and len(one) == 1 and zero[0] is not one[0], stack.log_tail()


def test_a_killed_rank_costs_one_attempt_and_nothing_else(make_stack) -> None:
    stack = make_stack("embedded", PARVIS_RANK_TIMEOUT_SECONDS="20")
    stack.start_worker()
    spec = two_ranks(gaussian_spec(steps=3000, checkpoint_every=300, metrics_every=100))
    job_id = stack.submit(spec).json()["id"]
    wait_for(lambda: (stack.job(job_id)["checkpoint_step"] or 0) >= 300, 180, what="a checkpoint")
    ranks = wait_for(lambda: rank_processes(job_id), 30, what="the local rank")
    checkpoint = stack.job(job_id)["checkpoint_step"]
    for process in ranks:
        process.send_signal(signal.SIGKILL)

    job = stack.wait_status(job_id, FINISHED, timeout=300)
    assert job["status"] == "succeeded", stack.log_tail()
    assert job["attempt"] == 2 and job["error"] is None
    assert checkpoint <= job["resumed_from_step"] < 3000 and job["resumed_from_step"] % 300 == 0
    assert metric_steps(stack, job_id) == list(range(100, 3001, 100))  # every point, once, in order
    assert job["metrics"]["cov_error_rel"] < 0.15


def test_a_killed_rank_zero_is_requeued_and_every_rank_resumes(make_stack) -> None:
    """Rank 0 is the process that claimed the job (the parent of the local rank it started). SIGKILLed alone, its
    lease runs out and the job is requeued; the rank it left finds its next collective failing and exits within
    PARVIS_RANK_TIMEOUT_SECONDS; the next attempt starts both ranks again from the last checkpoint, with every
    metric point once."""
    stack = make_stack("embedded", PARVIS_RANK_TIMEOUT_SECONDS="20")
    stack.start_worker()
    spec = two_ranks(gaussian_spec(steps=3000, checkpoint_every=300, metrics_every=100))
    job_id = stack.submit(spec).json()["id"]
    wait_for(lambda: (stack.job(job_id)["checkpoint_step"] or 0) >= 300, 180, what="a checkpoint")
    (rank_one,) = wait_for(lambda: rank_processes(job_id), 30, what="the local rank")
    rank_zero = rank_one.parent()
    checkpoint = stack.job(job_id)["checkpoint_step"]
    rank_zero.send_signal(signal.SIGKILL)
    wait_for(lambda: not rank_one.is_running() or rank_one.status() == psutil.STATUS_ZOMBIE, 90,
             what="the rank rank 0 left to exit")

    job = stack.wait_status(job_id, FINISHED, timeout=300)
    assert job["status"] == "succeeded", stack.log_tail()
    assert job["attempt"] == 2 and job["error"] is None and job["ranks"] == 2
    assert checkpoint <= job["resumed_from_step"] < 3000 and job["resumed_from_step"] % 300 == 0
    assert metric_steps(stack, job_id) == list(range(100, 3001, 100))  # every point, once, in order
    assert job["metrics"]["cov_error_rel"] < 0.15


def test_cancel_stops_every_rank(make_stack) -> None:
    stack = make_stack("embedded")
    stack.start_worker()
    job_id = stack.submit(two_ranks(gaussian_spec(steps=200_000, metrics_every=1000))).json()["id"]
    wait_for(lambda: (stack.job(job_id)["progress"]["step"] or 0) > 50, 180, what="steps")
    assert rank_processes(job_id)
    assert stack.client.post(f"/v1/jobs/{job_id}/cancel").status_code in (200, 202)
    job = stack.wait_status(job_id, FINISHED, timeout=60)
    assert job["status"] == "cancelled"
    wait_for(lambda: rank_processes(job_id) == [], 30, what="the local rank to exit")
