"""The fvi method: distillation lowers the prior-fit loss, a resumed run continues bit-identically across the
phase boundary, targets it refuses, and its sampler (draws at x in original units, zip round trip)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inference_core import errors
from inference_core.samplers import SPGSampler, load
from inference_core.spec import validate_job_spec
from inference_core.training import build_method, run

X = np.linspace(-1.0, 2.0, 40)
Y = np.sin(2 * X)


def spec(prior: dict, steps: int, distill: int, **options) -> dict:
    return {"method": "fvi", "seed": 3, "num_particles": 4, "steps": steps,
            "target": {"kind": "function_posterior", "dataset": {"X": X[:, None].tolist(), "y": Y.tolist()},
                       "prior": prior, "likelihood": {"noise_std": 0.1}, "standardize": True},
            "options": {"distill_steps": distill, "n_basis": 8, "latent_dim": 4, "distill_functions": 16,
                        "distill_points": 20, **options}}


def held_out_distill_loss(method, seed: int = 11) -> float:
    """−ELBO per point of eq. 13 on fixed fresh prior draws (the fit the distillation improves)."""
    g = torch.Generator().manual_seed(seed)
    X = method.target.X
    f = method.target.sample_prior_functions(64, X, g)
    noise = torch.randn(64, method.options.latent_dim, generator=g)
    with torch.no_grad():
        return float(-method.spg.distillation_elbo(f, X, noise).mean() / X.shape[0])


@pytest.mark.parametrize("prior", [{"type": "gp", "lengthscale": 0.5}, {"type": "piecewise_linear"}])
def test_distillation_reduces_the_prior_fit_loss(prior: dict) -> None:
    method = build_method(validate_job_spec(spec(prior, 300, 300)))
    before = held_out_distill_loss(method)
    for _ in range(300):
        metrics = method.step()
    assert metrics["phase"] == 1.0
    after = held_out_distill_loss(method)
    assert after < before - 0.3, (before, after)


def test_resume_is_bit_identical_across_the_phase_boundary() -> None:
    job = spec({"type": "piecewise_constant"}, 30, 15)
    straight = run(job).method
    first = build_method(validate_job_spec(job))
    for _ in range(10):
        first.step()
    state = first.state_dict()
    resumed = run(job, resume_state=state).method
    for name, tensor in straight.state_dict()["spg"].items():
        assert torch.equal(tensor, resumed.state_dict()["spg"][name]), name
    assert torch.equal(straight.q_mean, resumed.q_mean) and torch.equal(straight.q_log_std, resumed.q_log_std)
    assert not torch.equal(straight.q_mean, torch.zeros_like(straight.q_mean))  # phase 2 did move q_η
    assert torch.equal(straight.particles(), resumed.particles())


def test_bnn_regression_learns_the_noise_and_classification_is_refused() -> None:
    bnn = {"kind": "bnn", "dataset": {"X": X[:, None].tolist(), "y": Y.tolist()}, "hidden": [10],
           "standardize": True}
    job = {"method": "fvi", "steps": 25, "target": bnn, "options": {"distill_steps": 20, "n_basis": 4,
                                                                     "latent_dim": 2}}
    method = run(job).method
    assert method.noise_trainable and method.noise_std() != pytest.approx(0.5)
    labels = {**bnn, "task": "classification", "dataset": {"X": X[:, None].tolist(), "y": [0, 1] * 20}}
    with pytest.raises(errors.MethodUnsupportedForTarget):
        run({**job, "target": labels})
    with pytest.raises(errors.MethodUnsupportedForTarget):
        validate_job_spec({**job, "target": {"kind": "gaussian", "mean": [0.0], "cov": [[1.0]]}})


def test_sampler_draws_functions_at_x_in_original_units_and_round_trips() -> None:
    method = run(spec({"type": "gp", "lengthscale": 0.5}, 40, 30)).method
    sampler = method.sampler()
    assert isinstance(sampler, SPGSampler) and sampler.config["generator"]["kind"] == "spg"
    model = sampler.config["model"]
    assert model["network"] is None and model["noise"]["type"] == "fixed"
    x = np.array([[-0.5], [0.25], [1.75]])
    draws = sampler.sample(50, 9, x)
    assert draws.shape == (50, 3) and draws.dtype == torch.float32
    assert torch.equal(draws, sampler.sample(50, 9, x)) and not torch.equal(draws, sampler.sample(50, 10, x))
    again = load(sampler.to_zip_bytes())
    assert isinstance(again, SPGSampler) and torch.equal(again.sample(50, 9, x), draws)
    assert again.to_zip_bytes() == sampler.to_zip_bytes()
    # Independent of the sampler's code path: the method's own draws in model units, mapped back by hand.
    stats = method.target.standardization
    u = torch.as_tensor((x - stats.x_mean) / stats.x_std, dtype=torch.float32)
    eps_h, eps_a = sampler.sample_noise(50, 9)
    zero = torch.zeros(50, 3)
    with torch.no_grad():
        model_units = method._functions(u, eps_h, eps_a, zero)
    np.testing.assert_allclose(draws.numpy(), (stats.y_mean + stats.y_std * model_units).numpy(), rtol=1e-5,
                               atol=1e-5)
    # a function's values do not depend on which other inputs are asked for (to float32 matmul rounding)
    np.testing.assert_allclose(sampler.sample(50, 9, x[1:2])[:, 0].numpy(), draws[:, 1].numpy(), rtol=1e-5,
                               atol=1e-5)
    for bad in (None, np.zeros((3, 2)), np.array([[np.nan]]), np.zeros((0, 1))):
        with pytest.raises(ValueError):
            sampler.sample(5, 0, bad)
