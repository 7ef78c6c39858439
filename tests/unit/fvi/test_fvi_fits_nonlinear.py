"""`fvi` with its defaults fits a clear nonlinear signal better than the mean (issue 40, part 2): before the
seventh round the distilled surrogate, frozen in the posterior phase, predicted about the mean of y on UCI."""

from __future__ import annotations

import numpy as np

from inference_core import run


def test_fvi_defaults_fit_a_nonlinear_bnn_regression_well_under_the_std_of_y() -> None:
    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(-2.0, 2.0, 60))
    y = np.sin(3 * x) + 0.1 * rng.standard_normal(60)
    job = {"method": "fvi", "seed": 0, "num_particles": 50, "steps": 1200, "device": "cpu",
           "target": {"kind": "bnn", "dataset": {"X": x[:, None].tolist(), "y": y.tolist()}, "hidden": [50],
                      "activation": "relu", "prior_std": 1.0, "prior_std_scaling": "fan_out", "standardize": True},
           "options": {"distill_steps": 400}, "eval": {"ksd": False, "mmd": False}}
    method = run(job).method
    stats = method.target.standardization
    mean = method.function_draws(100, method.target.X).mean(0).double().numpy() * stats.y_std + stats.y_mean
    rmse = float(np.sqrt(np.mean((mean - y) ** 2)))
    assert rmse <= 0.5 * y.std(), (rmse, y.std())


def test_a_learnt_noise_is_calibrated_on_held_out_rows_the_likelihood_never_sees() -> None:
    """`noise_holdout` (default 0.1): σ_π maximises the held-out rows' predictive log-likelihood. The adapted
    generator overfits its likelihood rows (σ_π learnt there came out 3x too small on Boston), so on data with a
    known noise sd of 0.3 the held-out σ_π must land near it, and the likelihood rows never include a held-out one."""
    import torch

    rng = np.random.default_rng(1)
    x = np.sort(rng.uniform(-2.0, 2.0, 200))
    y = np.sin(3 * x) + 0.3 * rng.standard_normal(200)
    job = {"method": "fvi", "seed": 0, "num_particles": 50, "steps": 1200, "device": "cpu",
           "target": {"kind": "bnn", "dataset": {"X": x[:, None].tolist(), "y": y.tolist()}, "hidden": [50],
                      "prior_std_scaling": "fan_out", "standardize": True, "noise": {"type": "inverse_gamma_std"}},
           "options": {"distill_steps": 400}, "eval": {"ksd": False, "mmd": False}}
    method = run(job).method
    held = set(method.holdout_rows.tolist())
    assert len(held) == 20 and held.isdisjoint(method.fit_rows.tolist())
    assert all(held.isdisjoint(method._likelihood_rows(64).tolist()) for _ in range(20))
    sigma = method.noise_std() * method.target.standardization.y_std
    assert 0.2 <= sigma <= 0.45, sigma
    fixed = run({**job, "target": {**job["target"], "noise": {"type": "fixed", "std": 0.3}}}).method
    assert fixed.holdout_rows is None and torch.equal(fixed.log_noise, torch.tensor(np.log(0.3), dtype=torch.float32))
