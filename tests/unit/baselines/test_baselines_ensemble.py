"""`ensemble`: every member reaches the MAP of a unimodal target (the Gaussian's mean; Bayesian linear
regression's ridge solution, computed independently with numpy), members never interact, per-member batches,
resume, bad options."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from baselines_support import GAUSSIAN, exact_moments

from inference_core import errors, run
from inference_core.serialization import state_from_bytes
from inference_core.spec import validate_job_spec
from inference_core.training import build_method
from tests.support.resume import StopAt

NO_EVAL = {"ksd": False, "mmd": False}
RNG = np.random.default_rng(4)
X = RNG.normal(size=(60, 3))
Y = X @ np.array([1.5, -0.5, 2.0]) + 0.3 * RNG.normal(size=60)
NOISE_STD, PRIOR_STD = 0.5, 2.0
BLR = {"kind": "bayesian_linear_regression", "dataset": {"X": X.tolist(), "y": Y.tolist()},
       "noise_std": NOISE_STD, "prior_std": PRIOR_STD}
SGD = {"name": "sgd", "lr": 0.1, "momentum": 0.5}


def job(target: dict, options: dict, n: int = 8, steps: int = 400, **extra) -> dict:
    return {"method": "ensemble", "target": target, "num_particles": n, "steps": steps, "seed": 2,
            "options": {"dtype": "float64", **options}, "eval": NO_EVAL, **extra}


def test_every_member_reaches_the_gaussian_mode() -> None:
    result = run(job(GAUSSIAN, {"optimizer": SGD, "init": {"scale": 3.0}}, steps=600))
    mean, _, _ = exact_moments()
    x = result.particles
    assert x.shape == (8, 3)
    assert (x - mean).abs().max() < 1e-8
    start = build_method(validate_job_spec(job(GAUSSIAN, {"init": {"scale": 3.0}}))).particles()
    assert start.std(0).min() > 1.0  # they started apart


def test_every_member_reaches_the_ridge_solution_of_linear_regression() -> None:
    precision = X.T @ X / NOISE_STD**2 + np.eye(3) / PRIOR_STD**2
    ridge = np.linalg.solve(precision, X.T @ Y / NOISE_STD**2)
    result = run(job(BLR, {"optimizer": {"name": "sgd", "lr": 1e-3, "momentum": 0.5}}, n=5, steps=800))
    assert np.abs(result.particles.numpy() - ridge).max() < 1e-6


def test_members_do_not_interact() -> None:
    many = run(job(GAUSSIAN, {}, n=6, steps=30)).particles
    few = run(job(GAUSSIAN, {}, n=3, steps=30)).particles
    torch.testing.assert_close(many[:3], few, rtol=0, atol=1e-12)  # rows 0-2 do not see rows 3-5


def test_independent_batches_change_only_the_other_members() -> None:
    """After one step: member 0 used the step's batch in both runs, members 1-3 their own batches."""
    target = {**BLR, "batch_size": 10}
    shared = run(job(target, {"optimizer": SGD | {"lr": 1e-3}}, n=4, steps=1)).particles
    own = run(job(target, {"optimizer": SGD | {"lr": 1e-3}, "independent_batches": True}, n=4, steps=1)).particles
    torch.testing.assert_close(own[0], shared[0], rtol=0, atol=1e-12)
    assert ((own[1:] - shared[1:]).abs().amax(-1) > 1e-6).all()


@pytest.mark.parametrize("independent", [False, True])
def test_resume_from_a_serialised_checkpoint_is_bit_identical(independent: bool) -> None:
    spec = job({**BLR, "batch_size": 10}, {"independent_batches": independent}, n=5, steps=12, checkpoint_every=4)
    straight = run(spec)
    hooks = StopAt(7)
    run(spec, hooks=hooks)
    resumed = run(spec, resume_state=state_from_bytes(hooks.checkpoints[4]))
    assert resumed.steps_completed == 12 and torch.equal(resumed.particles, straight.particles)


@pytest.mark.parametrize("options", [{"independent_batches": "sometimes"}, {"optimizer": {"lr": -1}},
                                     {"kernel": {}}, {"init": {"method": "uniform"}}])
def test_bad_options_are_clear_errors(options: dict) -> None:
    with pytest.raises(errors.MethodOptionsInvalid) as caught:
        validate_job_spec(job(GAUSSIAN, options))
    assert "options" in caught.value.detail
