"""`amortized_fsvgd`: a hypernetwork trained with f-SVGD's function-space direction (f-POVI eq. 4) pulled back
through the network and the generator (GPVI eq. 14). Registered and listed; runs and resumes bit-identically
through the run loop; its direction is the explicit VJP of f-SVGD's direction (float64 Jacobian) plus the MAP
gradient of each draw's noise; it fits a small 1-D regression as well as fsvgd's particles; its sampler round-trips
and predicts."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from fpovi_support import build, regression_target_spec

from inference_core import errors, run
from inference_core.catalog import METHODS, NETWORK_KINDS, resolve
from inference_core.prediction import predictor_from_sampler
from inference_core.samplers import load
from inference_core.spec import validate_job_spec
from tests.support.resume import straight_stopped_resumed

RNG = np.random.default_rng(11)
X1 = np.sort(RNG.uniform(-3, 3, size=40))[:, None]
Y1 = np.sin(X1[:, 0]) + 0.1 * RNG.normal(size=40)
SMALL = {"generator": {"hidden": [16], "noise_dim": 4}, "extra_points": 10}


def one_d(**fields: Any) -> dict[str, Any]:
    """A 1-D bnn regression (40 rows of sin x + noise), 16 hidden units."""
    return regression_target_spec(dataset={"X": X1.tolist(), "y": Y1.tolist()}, **fields)


def job(target: dict[str, Any], options: dict[str, Any] | None = None, steps: int = 12, n: int = 8) -> dict:
    return {"method": "amortized_fsvgd", "target": target, "num_particles": n, "steps": steps, "seed": 5,
            "options": {**SMALL, **(options or {})}, "checkpoint_every": 4, "eval": {"ksd": False, "mmd": False}}


def test_registered_for_the_network_kinds_and_listed(client: TestClient) -> None:
    info = METHODS["amortized_fsvgd"]
    assert info.family == "generative" and info.target_kinds == NETWORK_KINDS and callable(resolve(info.builder))
    fields = info.schema.model_fields
    assert {"generator", "optimizer", "extra_points", "ptb_scale", "prior_draws", "prior_points", "kernel",
            "noise_init"} <= set(fields) and not {"init", "pullback", "noise_optimizer"} & set(fields)
    listed = {m["name"]: m for m in client.get("/v1/methods").json()["methods"]}["amortized_fsvgd"]
    assert listed["family"] == "generative" and sorted(listed["target_kinds"]) == sorted(NETWORK_KINDS)
    assert "extra_points" in listed["options_schema"]["properties"]
    with pytest.raises(errors.InferenceError):
        validate_job_spec({**job(one_d()), "target": {"kind": "gaussian", "mean": [0.0], "cov": [[1.0]]}})
    with pytest.raises(errors.MethodOptionsInvalid):
        validate_job_spec(job(one_d(), {"precondition": "pathfinder"}))


@pytest.mark.parametrize("target", [
    one_d(),
    one_d(noise={"type": "gamma_precision"}),
    {"kind": "bnn", "task": "classification", "dataset": "sklearn:iris", "standardize": True, "hidden": [8],
     "prior_std_scaling": "fan_out", "batch_size": 32},
    {"kind": "function_posterior", "dataset": {"X": X1.tolist(), "y": Y1.tolist()}, "standardize": True,
     "prior": {"type": "bnn", "hidden": [8], "prior_std_scaling": "fan_out"}, "likelihood": {"noise_std": 0.3}},
], ids=["inverse_gamma", "gamma_precision", "classification", "function_posterior"])
def test_runs_and_resumes_bit_identically(target: dict) -> None:
    straight, first, resumed = straight_stopped_resumed(job(target))
    assert resumed.steps_completed == 12
    assert torch.equal(resumed.particles, straight.particles)
    assert torch.equal(resumed.method.sampler().sample(30, 2), straight.method.sampler().sample(30, 2))
    assert not torch.equal(first.method.sampler().sample(30, 2), straight.method.sampler().sample(30, 2))
    assert straight.particles.shape == (8, straight.method.target.dim)


def test_the_direction_is_the_vjp_of_fsvgds_direction_and_the_noise_map_gradient() -> None:
    """φ_W = J(W)ᵀ v with J from torch.autograd.functional.jacobian, v f-SVGD's direction on the same values
    (the same RNG state draws the same mixed batch and prior functions); φ_s the analytic ∂/∂s of fsvgd's MAP
    objective scale·Σ_b log N(y_b; f_b, e^{2s}) + log InvGamma(e^s; α, β) (no Jacobian term)."""
    method, target = build("amortized_fsvgd", regression_target_spec(hidden=[3]),
                           {"generator": {"hidden": [5], "noise_dim": 3}, "extra_points": 6, "noise_holdout": 0}, n=4)
    z = method.noise(4)
    batch = target.sample_batch(method.rng)
    x = method.network(z)
    state = method.rng.get_state()
    phi, _, _ = method.weight_direction(x, batch)
    after = method.rng.get_state()

    method.rng.set_state(state)
    _, y = target.rows(batch)
    scale = target.likelihood_scale(batch)
    points, n_train = method.mixed_batch(batch)
    W = x.detach()[:, : method.n_weights]
    values = method.function_values(W, points)
    s = x.detach()[:, -1]
    v, _ = method.function_direction(values, points, n_train, y, scale, s)
    assert torch.equal(method.rng.get_state(), after)  # the same draws, in the same order
    for i in range(4):
        jac = torch.autograd.functional.jacobian(lambda w: method.function_values(w[None], points)[0], W[i])
        assert jac.dtype == torch.float64 and jac.shape == (points.shape[0], method.n_weights)
        torch.testing.assert_close(phi[i, : method.n_weights], jac.T @ v[i], rtol=1e-10, atol=1e-10)
    r2 = (y - values[:, :n_train]).square().sum(-1)
    alpha, beta = target.noise.alpha, target.noise.beta
    expected = scale * (r2 * torch.exp(-2 * s) - n_train) - (alpha + 1) + beta * torch.exp(-s)
    torch.testing.assert_close(phi[:, -1], expected, rtol=1e-10, atol=1e-10)
    assert phi.shape == x.shape == (4, target.dim)


def rmse_of_mean(predict_mean: np.ndarray) -> float:
    return float(np.sqrt(np.mean((predict_mean - Y1) ** 2)))


def test_the_generator_fits_a_1d_regression_as_well_as_fsvgds_particles() -> None:
    """Train RMSE of the predictive mean (original units, through the stored sampler's predictor) against the
    data's std and against fsvgd's own particles on the same target and schedule."""
    steps, n = 1500, 16
    method, target = build("amortized_fsvgd", one_d(), {**SMALL, "generator": {"hidden": [32], "noise_dim": 8},
                                                         "noise_holdout": 0}, n=n, dtype=torch.float32)
    for _ in range(steps):
        info = method.step()
    amortised = rmse_of_mean(predictor_from_sampler(method.sampler()).predict(X1, n=500, seed=1)["mean"])
    particles, _ = build("fsvgd", one_d(), {"extra_points": 10}, n=n, dtype=torch.float32)
    for _ in range(steps):
        particles.step()
    reference = rmse_of_mean(predictor_from_sampler_or_particles(particles))
    assert amortised < 0.25 * Y1.std(), (amortised, Y1.std())
    assert amortised < 2 * reference + 0.05, (amortised, reference)
    assert 0.03 < info["noise_std"] < 0.6  # σ in standardised units moved from 0.5 towards the data's 0.1/std(y)


def predictor_from_sampler_or_particles(method) -> np.ndarray:
    from inference_core.prediction import predictor_for_method

    return predictor_for_method(method).predict(X1, n=16, seed=1)["mean"]


def test_the_sampler_round_trips_and_predicts_from_its_draws(tmp_path) -> None:
    result = run(job(one_d(), steps=20))
    sampler = result.method.sampler()
    assert sampler.config["method"] == "amortized_fsvgd" and sampler.config["layout"][-1]["name"] == "log_noise_std"
    path = tmp_path / "sampler.zip"
    path.write_bytes(sampler.to_zip_bytes())
    loaded = load(str(path))
    assert torch.equal(loaded.sample(64, 3), sampler.sample(64, 3))
    assert not torch.equal(loaded.sample(64, 4), sampler.sample(64, 3))
    # /predict's predictor: weights through the layout, σ from each draw's log_noise_std, in original units
    out = predictor_from_sampler(loaded).predict(X1[:5], n=40, seed=2)
    draws = loaded.sample(40, 2).double()
    std = sampler.config["model"]["standardization"]
    target = result.method.target
    f = std["y_mean"] + std["y_std"] * target.forward(draws.to(target.X.dtype), torch.as_tensor(
        (X1[:5] - std["x_mean"]) / std["x_std"], dtype=target.X.dtype)).double()[..., 0]
    sigma = std["y_std"] * draws[:, -1].exp()
    np.testing.assert_allclose(out["mean"], f.mean(0).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["std"], np.sqrt(f.var(0, unbiased=False).numpy() + float(sigma.square().mean())),
                               rtol=1e-4)
    assert math.isfinite(float(out["std_epistemic"].mean()))


def test_held_out_rows_calibrate_one_shared_noise_the_weights_never_fit(monkeypatch) -> None:
    """`noise_holdout` (default 0.1): the weights' minibatches never contain a held-out row; one σ, shared by the
    draws (their noise coordinate is the slot's bias; λz adds at most λ·|z|), maximises the held-out rows'
    predictive log-likelihood, and on data with a known noise sd it lands near it (original units)."""
    from inference_core.methods.generative import amortized_fsvgd

    rng = np.random.default_rng(2)
    x = np.sort(rng.uniform(-3, 3, 200))[:, None]
    y = np.sin(x[:, 0]) + 0.3 * rng.standard_normal(200)
    target = regression_target_spec(dataset={"X": x.tolist(), "y": y.tolist()}, batch_size=32)
    method, built = build("amortized_fsvgd", target, {**SMALL, "generator": {"hidden": [32], "noise_dim": 8}}, n=16,
                          dtype=torch.float32)
    held = set(method.holdout_rows.tolist())
    assert len(held) == 20 and held.isdisjoint(method.fit_rows.tolist())
    seen: set[int] = set()

    def recorded(*args):
        rows = amortized_fsvgd.holdout_fit_batch(*args)
        seen.update(rows.tolist())
        return rows

    monkeypatch.setattr(amortized_fsvgd, "holdout_fit_batch", amortized_fsvgd.fit_batch, raising=False)
    monkeypatch.setattr(amortized_fsvgd, "fit_batch", recorded)
    for _ in range(1500):
        info = method.step()
    assert held.isdisjoint(seen) and len(seen) == 180
    column = method.noise_slot[0]
    slots = method.sampler().sample(200, 3)[:, column]
    assert float(slots.max() - slots.min()) < 0.2  # shared: only λz varies it
    sigma = info["noise_std"] * built.standardization.y_std
    assert 0.2 <= sigma <= 0.45, sigma
