"""Each particle method fits a 2-D correlated Gaussian and the 3-D Bayesian linear regression posterior
(GPVI §4.2 data, closed-form reference) within stated tolerances; SVGD keeps both modes of a two-Gaussian
mixture. 100 particles, Adam, fixed seeds; each fit runs in seconds on one CPU thread.

Tolerances (relative Frobenius covariance error ||Σ̂ − Σ||/||Σ||, mean error in units of the posterior
scale √tr Σ):
* exact-interaction methods (svgd, gfsf, wsgld, pisgld) and the critic-based ksd: covariance < 0.3, mean < 0.1;
* random-subset / induced-point speed-ups (their update is a random O(nm) estimate, so the particles keep
  jittering at the scale of the learning rate): covariance < 0.5, mean < 0.25.
The BLR posterior has std ≈ 0.14 around weights ≈ 5.5: particles start at N(5.5, I) (init loc) and contract,
with Adam lr 0.01 (a larger step jitters at the posterior's own scale; ksd: 0.003, see below).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from methods_support import blr_data

from inference_core import run
from inference_core.catalog import METHODS

SEED = 3  # the tolerances also hold for seeds 10 and 20 (checked when they were set)
PARTICLE_METHODS = sorted(name for name, info in METHODS.items() if info.family == "particle")
SPEEDUPS = {"svgd_subset", "svgd_subset_cf", "svgd_induced", "svgd_induced_adversarial"}
COV_TOL = {name: (0.5 if name in SPEEDUPS else 0.3) for name in PARTICLE_METHODS}
MEAN_TOL = {name: (0.25 if name in SPEEDUPS else 0.1) for name in PARTICLE_METHODS}

GAUSS = {"kind": "gaussian", "mean": [1.0, -2.0], "cov": [[1.0, 0.8], [0.8, 2.0]]}
X, Y = blr_data(50, 3, seed=0)
BLR = {"kind": "bayesian_linear_regression", "dataset": {"X": X.tolist(), "y": Y.tolist()}}


def options_for(name: str, lr: float) -> dict[str, Any]:
    options: dict[str, Any] = {"optimizer": {"lr": lr}}
    if name in SPEEDUPS:
        options["subset_size"] = 20
    if name == "ksd":
        # The critic must track f* = (∇log p − ∇log q)/20 as the particles move: 5 updates per step.
        options["critic"] = {"steps": 5}
    if name == "svgd_induced_adversarial":
        options.update({"batched": True, "ascent_steps": 5})  # keeps the test short; Alg. 5 otherwise
    return options


def check(result: Any, name: str, scale: float) -> None:
    metrics = result.final_metrics
    assert metrics["cov_error_rel"] < COV_TOL[name], metrics
    assert metrics["mean_error"] / scale < MEAN_TOL[name], metrics


@pytest.mark.parametrize("name", PARTICLE_METHODS)
def test_fits_a_correlated_gaussian(name: str) -> None:
    # GFSF's small-ε score estimate is noisy, which slows Adam down: it gets twice the steps.
    steps = 1000 if name == "gfsf" else 500
    result = run({"method": name, "target": GAUSS, "num_particles": 100, "steps": steps, "seed": SEED,
                  "options": options_for(name, 0.05), "eval": {"ksd": False, "mmd": False}})
    check(result, name, math.sqrt(3.0))


@pytest.mark.parametrize("name", PARTICLE_METHODS)
def test_fits_bayesian_linear_regression(name: str) -> None:
    steps = 1500 if name in SPEEDUPS else 1000
    # The critic–particle game oscillates at lr 0.01 on this narrow posterior: ksd takes lr 0.003 (the GPVI
    # paper uses 1e-3 for 50,000 steps) and 2000 steps.
    options = options_for(name, 0.003 if name == "ksd" else 0.01)
    if name == "ksd":
        steps = 2000
    options["init"] = {"loc": 5.5}
    result = run({"method": name, "target": BLR, "num_particles": 100, "steps": steps, "seed": SEED + 1,
                  "options": options, "eval": {"ksd": False, "mmd": False}})
    cov = result.method.target.reference().cov
    check(result, name, math.sqrt(float(torch.trace(cov))))


def test_svgd_keeps_both_modes_of_a_well_separated_mixture() -> None:
    mixture = {"kind": "gaussian_mixture", "weights": [0.5, 0.5], "means": [[-4.0, 0.0], [4.0, 0.0]],
               "covs": [[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]]}
    result = run({"method": "svgd", "target": mixture, "num_particles": 100, "steps": 800, "seed": 2,
                  "options": {"optimizer": {"lr": 0.05}, "init": {"scale": 4.0}},
                  "eval": {"ksd": False, "mmd": False}})
    x = result.particles.double()
    near_left = float(((x - torch.tensor([-4.0, 0.0], dtype=torch.float64)).norm(dim=1) < 2.5).double().mean())
    near_right = float(((x - torch.tensor([4.0, 0.0], dtype=torch.float64)).norm(dim=1) < 2.5).double().mean())
    assert 0.3 < near_left < 0.7 and 0.3 < near_right < 0.7, (near_left, near_right)
    assert near_left + near_right > 0.9  # nearly every particle sits in one of the two modes
