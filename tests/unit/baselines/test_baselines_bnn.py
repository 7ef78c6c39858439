"""Short runs of every baseline on a small `bnn` regression target (inline data) and on a `function_posterior`
with a `bnn` prior (its weight-space density): they run through the one run loop, stay finite, and improve what
they optimise (the ensemble its log posterior, MF-VI its ELBO; the chains leave the low-density start)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from baselines_support import regression_data

from inference_core import run
from inference_core.spec import validate_job_spec
from inference_core.training import RunHooks, build_method

DATA = regression_data(40)
BNN = {"kind": "bnn", "dataset": DATA, "hidden": [8], "batch_size": 20,
       "noise": {"type": "inverse_gamma_std", "alpha": 1.0, "beta": 0.1}}
FUNCTION_BNN = {"kind": "function_posterior", "dataset": DATA, "prior": {"type": "bnn", "hidden": [8]},
                "likelihood": {"noise_std": 0.1}}
MCMC_SHORT = {"warmup_steps": 10, "chains": 2, "max_tree_depth": 5}
RUNS: dict[str, tuple[dict[str, Any], int]] = {
    "ensemble": ({"optimizer": {"lr": 0.01}}, 150),
    "mfvi": ({"optimizer": {"lr": 0.01}, "mc_samples": 4}, 150),
    "nuts": (MCMC_SHORT, 20),
    "hmc": ({key: value for key, value in MCMC_SHORT.items() if key != "max_tree_depth"} | {"num_steps": 10}, 20),
}


class Recorder(RunHooks):
    def __init__(self) -> None:
        self.metrics: list[dict[str, float]] = []

    def on_step(self, step: int, total_steps: int, metrics: dict[str, float]) -> None:
        self.metrics.append(metrics)


def mean_log_density(result: Any) -> float:
    return float(result.method.target.log_prob(result.particles.to(result.method.dtype)).mean())


@pytest.mark.parametrize("target", [BNN, FUNCTION_BNN], ids=["bnn", "function_posterior-bnn"])
@pytest.mark.parametrize("name", sorted(RUNS))
def test_each_baseline_runs_on_a_bnn(name: str, target: dict) -> None:
    options, steps = RUNS[name]
    hooks = Recorder()
    job = {"method": name, "target": target, "num_particles": 6, "steps": steps, "seed": 0, "options": options,
           "eval": {"mmd": False}}
    result = run(job, hooks=hooks)
    x = result.particles
    assert x.ndim == 2 and x.shape[1] == result.method.target.dim and torch.isfinite(x).all()
    assert all(math.isfinite(v) for m in hooks.metrics for v in m.values())
    assert math.isfinite(result.final_metrics["ksd_imq"])
    first, last = hooks.metrics[:10], hooks.metrics[-10:]
    if name == "ensemble":
        assert sum(m["log_prob_mean"] for m in last) > sum(m["log_prob_mean"] for m in first)
    elif name == "mfvi":
        assert sum(m["elbo"] for m in last) > sum(m["elbo"] for m in first)
        assert result.method.sampler().sample(3, 0).shape == (3, result.method.target.dim)
    else:
        chains = len(result.method.kernels)  # every stored draw of every chain (draws_returned "all")
        assert x.shape[0] == chains * 10 and result.final_metrics["draws_kept"] == 10
        assert "rhat_max" in result.final_metrics and "ess_bulk_min" in result.final_metrics
        start = build_method(validate_job_spec(job)).particles()  # the chains' starting points
        assert mean_log_density(result) > float(result.method.target.log_prob(start).mean())
