"""`noise_holdout` for GPVI on a `bnn` regression (methods.generative.noise_calibration): the likelihood never sees
the held-out rows, the σ factor fitted there maximises their predictive log-likelihood (checked against scipy in
float64 and a closed form), the stored sampler and the particles carry the same factor, and reading out leaves the
trained generator as it was."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar
from scipy.special import logsumexp
from scipy.stats import norm

from inference_core import errors
from inference_core.methods.generative import noise_calibration
from inference_core.methods.generative.noise_calibration import (
    CALIBRATION_DRAWS,
    CALIBRATION_STREAM,
    best_log_std_shift,
)
from inference_core.seeding import derive_seed
from inference_core.spec import validate_job_spec
from inference_core.training import build_method

RNG = np.random.default_rng(11)
X = np.sort(RNG.uniform(-2.0, 2.0, 90))
Y = np.sin(3 * X) + 0.3 * RNG.standard_normal(90)


def job(noise: dict | None = None, **options) -> dict:
    return {"method": "gpvi", "seed": 2, "num_particles": 12, "steps": 30, "device": "cpu",
            "target": {"kind": "bnn", "dataset": {"X": X[:, None].tolist(), "y": Y.tolist()}, "hidden": [8],
                       "standardize": True, "batch_size": 16, "noise": noise or {"type": "inverse_gamma_std"}},
            "options": {"generator": {"hidden": [16], "noise_dim": 6}, "optimizer": {"name": "adam", "lr": 0.01},
                        "noise_holdout": 0.25, **options},
            "eval": {"ksd": False, "mmd": False}}


def trained(spec: dict, steps: int = 30):
    method = build_method(validate_job_spec(spec))
    for _ in range(steps):
        method.step()
    return method


def heldout_scores(method, c: float) -> float:
    """Σ_j log (1/M) Σ_i N(y_j; f_ij, σ_i² e^{2c}) in float64 with scipy, for the calibration's fixed draws."""
    g = torch.Generator().manual_seed(derive_seed(method.seed, CALIBRATION_STREAM))
    z = torch.randn(CALIBRATION_DRAWS, method.noise_dim, generator=g, dtype=method.dtype)
    rows = method.noise_scale.holdout_rows
    Xh, yh = method.target.X.index_select(0, rows), method.target.y.index_select(0, rows).double().numpy()
    with torch.no_grad():
        draws = method.network(z)
        f = method.target.forward(draws, Xh)[..., 0].double().numpy()
        sigma = torch.as_tensor(method.target.log_noise_std(draws)).double().exp().numpy()
    dens = norm.logpdf(yh[None, :], loc=f, scale=sigma[:, None] * math.exp(c))
    return float((logsumexp(dens, axis=0) - math.log(len(f))).sum())


def test_the_shift_of_one_draw_is_the_closed_form_and_of_many_the_float64_optimum() -> None:
    g = torch.Generator().manual_seed(0)
    f, y = torch.randn(1, 40, generator=g), torch.randn(40, generator=g) * 3.0
    log_std = torch.tensor([0.2])
    # one draw: Σ_j log N(y_j; f_j, s²) is maximised at s² = mean (y − f)²
    expected = 0.5 * math.log(float((y - f[0]).double().square().mean())) - 0.2
    assert abs(best_log_std_shift(f, y, log_std) - expected) < 1e-4
    f, log_std = torch.randn(30, 40, generator=g), 0.3 * torch.randn(30, generator=g)
    y = torch.randn(40, generator=g) * 2.0

    def negative(c: float) -> float:
        dens = norm.logpdf(y.double().numpy()[None, :], loc=f.double().numpy(),
                           scale=np.exp(log_std.double().numpy() + c)[:, None])
        return -float((logsumexp(dens, axis=0) - math.log(30)).sum())

    reference = minimize_scalar(negative, bounds=(-5, 5), method="bounded", options={"xatol": 1e-8}).x
    assert abs(best_log_std_shift(f, y, log_std) - reference) < 1e-4


def test_the_likelihood_never_sees_the_held_out_rows(monkeypatch) -> None:
    method = build_method(validate_job_spec(job()))
    held = set(method.noise_scale.holdout_rows.tolist())
    assert len(held) == round(0.25 * 90)
    seen = []
    original = method.target.score

    def recording(x, batch=None):
        seen.extend(batch.tolist())
        return original(x, batch)

    monkeypatch.setattr(method.target, "score", recording)
    for _ in range(10):
        method.step()
    assert seen and not held & set(seen)
    assert len(set(seen)) > 16  # minibatches among the other rows, not one fixed batch


@pytest.mark.parametrize("noise", [{"type": "inverse_gamma_std"}, {"type": "gamma_precision"}])
def test_the_read_out_draws_carry_the_fitted_factor_and_training_is_untouched(noise: dict) -> None:
    method = trained(job(noise))
    c = method.noise_scale.log_std_shift(method.network, method.step_count)
    assert heldout_scores(method, c) >= max(heldout_scores(method, c + 0.01), heldout_scores(method, c - 0.01),
                                             heldout_scores(method, 0.0)) - 1e-6
    assert method.summary_metrics() == {"holdout_noise_factor": pytest.approx(math.exp(c))}
    live = {name: t.detach().clone() for name, t in method.network.state_dict().items()}
    raw = method.last_batch
    particles = method.particles()
    column = method.noise_scale.column
    per_slot = 1.0 if noise["type"] == "inverse_gamma_std" else -2.0
    torch.testing.assert_close(particles[:, column], raw[:, column] + per_slot * c)
    torch.testing.assert_close(particles[:, :column], raw[:, :column], rtol=0, atol=0)
    sampler = method.sampler()
    g = torch.Generator().manual_seed(5)
    z = torch.randn(64, method.noise_dim, generator=g)
    with torch.no_grad():
        unshifted = method.network(z)
    drawn = sampler.forward(z)
    torch.testing.assert_close(drawn[:, column], unshifted[:, column] + per_slot * c, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(drawn[:, :column], unshifted[:, :column], atol=1e-5, rtol=1e-5)
    for name, t in method.network.state_dict().items():
        assert torch.equal(t, live[name]), name  # read-out restored the generator bit for bit


def test_a_run_read_out_midway_goes_on_as_one_that_was_not() -> None:
    straight = trained(job(), 20)
    interrupted = build_method(validate_job_spec(job()))
    for step in range(20):
        interrupted.step()
        if step in (4, 11):
            interrupted.sampler()
            interrupted.particles()
    torch.testing.assert_close(interrupted.particles(), straight.particles(), rtol=0, atol=0)


def test_no_holdout_where_it_does_not_apply() -> None:
    fixed = build_method(validate_job_spec(job({"type": "fixed", "std": 0.3})))
    assert fixed.noise_scale is None and fixed.summary_metrics() == {}
    off = build_method(validate_job_spec(job(noise_holdout=0.0)))
    assert off.noise_scale is None
    few = build_method(validate_job_spec(job(noise_holdout=0.2)))  # 18 rows: too few to fit a factor on
    assert few.noise_scale is None and few.summary_metrics() == {}
    with pytest.raises((errors.InferenceError, ValueError)):
        validate_job_spec(job(noise_holdout=0.5))


def test_a_grid_edge_optimum_is_refined_not_clipped_inside(monkeypatch) -> None:
    monkeypatch.setattr(noise_calibration, "SHIFT_LIMIT", 1.0)
    f, y = torch.zeros(1, 10), torch.full((10,), 100.0)
    assert best_log_std_shift(f, y, torch.zeros(1)) == pytest.approx(1.0, abs=1e-4)  # bounded at the limit
