"""Every weight-space target kind runs as an svgd job through the HTTP API (embedded mode), including one
over an uploaded dataset; a target that is not finite at the start fails fast with `target_nonfinite`."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tests.support.stack import Stack, started_embedded

pytestmark = pytest.mark.integration

RNG = np.random.default_rng(1)
X = RNG.normal(size=(30, 2))
Y_REG = X @ np.array([0.7, -1.2]) + 0.2 * RNG.normal(size=30)

TARGETS = {
    "gaussian": {"kind": "gaussian", "mean": [0.0, 1.0], "precision": [[2.0, 0.5], [0.5, 1.0]]},
    "gaussian_mixture": {"kind": "gaussian_mixture", "weights": [0.3, 0.7], "means": [[-2.0, 0.0], [2.0, 0.0]],
                         "covs": [[[0.5, 0.0], [0.0, 0.5]], [[0.5, 0.0], [0.0, 0.5]]]},
    "banana": {"kind": "banana", "dim": 2},
    "funnel": {"kind": "funnel", "dim": 3},
    "energy": {"kind": "energy", "name": "U1"},
    "expression": {"kind": "expression", "dim": 2, "log_prob": "-0.5*sum((x - mu)**2 / s**2)",
                   "params": {"mu": [1.0, -1.0], "s": 0.5}},
    "bayesian_linear_regression": {"kind": "bayesian_linear_regression",
                                   "dataset": {"X": X.tolist(), "y": Y_REG.tolist()}, "prior_std": 10.0},
    "bayesian_logistic_regression": {"kind": "bayesian_logistic_regression", "dataset": "sklearn:breast_cancer",
                                     "standardize": True, "batch_size": 64},
    "bnn": {"kind": "bnn", "dataset": "uci:yacht:split=0", "hidden": [8], "standardize": True, "batch_size": 32},
}


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory):
    with started_embedded(tmp_path_factory.mktemp("targets")) as stack:
        yield stack


def test_every_weight_space_kind_runs_as_a_job(embedded: Stack) -> None:
    kinds = {k["kind"] for k in embedded.client.get("/v1/targets/kinds").json()["kinds"]}
    svgd = next(m for m in embedded.client.get("/v1/methods").json()["methods"] if m["name"] == "svgd")
    assert set(svgd["target_kinds"]) == set(TARGETS), "a weight-space kind is missing from this test"
    assert kinds == set(TARGETS) | {"function_posterior"}
    jobs = {}
    for name, target in TARGETS.items():
        response = embedded.submit({"method": "svgd", "target": target, "num_particles": 20, "steps": 30})
        assert response.status_code == 202, (name, response.text)
        jobs[name] = response.json()["id"]
    for name, job_id in jobs.items():
        job = embedded.wait_status(job_id, {"succeeded", "failed", "cancelled"}, timeout=120)
        assert job["status"] == "succeeded", (name, job["error"], embedded.log_tail())
        particles = np.asarray(embedded.client.get(f"/v1/jobs/{job_id}/particles").json()["particles"])
        assert particles.shape[0] == 20 and np.isfinite(particles).all()


def test_function_posterior_is_refused_by_weight_space_methods(embedded: Stack) -> None:
    target = {"kind": "function_posterior", "prior": {"type": "gp"}, "dataset": {"X": X.tolist(), "y": Y_REG.tolist()}}
    response = embedded.submit({"method": "svgd", "target": target})
    assert response.status_code == 422 and response.json()["code"] == "method_unsupported_for_target"


def test_uploaded_dataset_job_matches_the_closed_form_posterior(embedded: Stack) -> None:
    dataset = embedded.client.post("/v1/datasets", json={"X": X.tolist(), "y": Y_REG.tolist()}).json()
    spec = {"method": "svgd", "num_particles": 100, "steps": 1500, "seed": 2,
            "target": {"kind": "bayesian_linear_regression", "dataset": dataset["id"], "noise_std": 0.2}}
    job_id = embedded.submit(spec).json()["id"]
    job = embedded.wait_status(job_id, {"succeeded", "failed"}, timeout=120)
    assert job["status"] == "succeeded", job["error"]
    particles = np.asarray(embedded.client.get(f"/v1/jobs/{job_id}/particles").json()["particles"])
    precision = X.T @ X / 0.2**2
    cov = np.linalg.inv(precision)
    mean = cov @ X.T @ Y_REG / 0.2**2
    scale = np.sqrt(np.diag(cov))
    assert np.all(np.abs(particles.mean(0) - mean) < 0.2 * scale)
    assert job["metrics"]["mean_error"] == pytest.approx(np.linalg.norm(particles.mean(0) - mean), abs=1e-6)
    assert embedded.client.delete(f"/v1/datasets/{dataset['id']}").status_code == 204


def test_non_finite_target_fails_fast(embedded: Stack) -> None:
    target = {"kind": "expression", "dim": 2, "log_prob": "log(x[0] - 100)"}
    started = time.monotonic()
    job_id = embedded.submit({"method": "svgd", "target": target, "steps": 1_000_000}).json()["id"]
    job = embedded.wait_status(job_id, {"succeeded", "failed"}, timeout=60)
    assert time.monotonic() - started < 30
    assert job["status"] == "failed" and job["error"]["code"] == "target_nonfinite"
    assert "starting particles after 20 redraws" in job["error"]["detail"]
    assert job["progress"]["step"] == 0


def test_auto_job_reports_quality_and_a_collapsed_job_is_flagged(embedded: Stack) -> None:
    """`auto` over HTTP: it stops on its convergence rule before `steps`, its metrics count gradient
    evaluations, and the job carries a trustworthy `quality` block; a deliberately collapsed svgd run (50
    particles in d = 40 with the paper's bandwidth and Adam) carries `collapsed` and trustworthy false."""
    target = {"kind": "expression", "dim": 3, "log_prob": "-0.5*sum((x - mu)**2 / s**2)",
              "params": {"mu": [100.0, -1.0, 0.0], "s": [0.01, 1.0, 30.0]}}
    auto = embedded.submit({"method": "auto", "target": target, "steps": 5000}).json()["id"]
    d = 40
    collapsed = embedded.submit({"method": "svgd", "num_particles": 50, "steps": 300,
                                 "target": {"kind": "gaussian", "mean": [0.0] * d, "cov": np.eye(d).tolist()}})
    auto_job = embedded.wait_status(auto, {"succeeded", "failed"}, timeout=120)
    assert auto_job["status"] == "succeeded", auto_job["error"]
    assert auto_job["progress"]["step"] < 5000 and auto_job["metrics"]["converged_step"] < 5000
    assert auto_job["metrics"]["grad_evals"] > 0
    assert auto_job["quality"]["trustworthy"] is True, auto_job["quality"]
    draws = np.array(embedded.client.get(f"/v1/jobs/{auto}/particles").json()["particles"])
    errors = np.abs(draws.mean(0) - [100.0, -1.0, 0.0]) / [0.01, 1.0, 30.0]
    assert errors.max() <= 0.15, errors  # the bar of issue 14, in posterior sds
    bad = embedded.wait_status(collapsed.json()["id"], {"succeeded", "failed"}, timeout=120)
    assert bad["quality"]["trustworthy"] is False
    assert "collapsed" in [w["code"] for w in bad["quality"]["warnings"]]
    assert "method: \"auto\"" in bad["quality"]["next_steps"][0]  # and what to do instead
    assert auto_job["quality"]["next_steps"] == []


def test_an_under_trained_fvi_job_is_flagged_over_http_and_so_is_its_sampler(embedded: Stack) -> None:
    """Issue 40: FVI once fitted a 1-D regression no better than ȳ and its job said `good` with no check run.
    Over HTTP an FVI job stopped after 4 steps now carries the predictive check's `no_better_than_mean`, its
    remedy, and its sampler's certificate says the same (predictive checks on the job's data)."""
    x = np.linspace(-2, 2, 60)
    y = 2 * np.sin(2 * x) + 0.1 * RNG.normal(size=60)
    target = {"kind": "bnn", "dataset": {"X": x[:, None].tolist(), "y": y.tolist()}, "hidden": [20],
              "standardize": True, "noise": {"type": "inverse_gamma_std"}}
    job_id = embedded.submit({"method": "fvi", "num_particles": 20, "steps": 4, "seed": 0, "target": target,
                              "options": {"distill_steps": 2}}).json()["id"]
    job = embedded.wait_status(job_id, {"succeeded", "failed"}, timeout=120)
    assert job["status"] == "succeeded", job["error"]
    quality = job["quality"]
    assert quality["verdict"] == "unreliable" and quality["trustworthy"] is False and quality["checks"] == ["predictive"]
    assert "no_better_than_mean" in [w["code"] for w in quality["warnings"]]
    assert quality["predictive"]["train_rmse"] >= 0.9 * quality["predictive"]["y_sd"]
    assert any("`fsvgd`" in step for step in quality["next_steps"])
    certificate = embedded.client.get(f"/v1/samplers/{job['sampler_id']}").json()["quality"]
    assert certificate["verdict"] == "unreliable" and certificate["predictive"]["task"] == "regression"
    assert "no_better_than_mean" in [w["code"] for w in certificate["warnings"]]
