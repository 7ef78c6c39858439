"""Bayesian logistic regression: log density against scipy, closed-form score against finite differences
and autograd, for both priors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import special, stats

from inference_core.targets import BuildContext, build_target
from inference_core.targets.models.random import sample_gamma

CONTEXT = BuildContext(dtype=torch.float64)


def make_data(n: int = 40, p: int = 3, seed: int = 0, labels=(0, 1)) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    positive = rng.random(n) < special.expit(X @ rng.normal(size=p))
    return X, np.where(positive, labels[1], labels[0])


def target(X, y, **fields):
    spec = {"kind": "bayesian_logistic_regression", "dataset": {"X": X.tolist(), "y": y.tolist()}, **fields}
    return build_target(spec, CONTEXT)


PRIORS = [{"prior": {"a0": 1.0, "b0": 0.01}}, {"prior": {"a0": 2.5, "b0": 0.7}}, {"prior_std": 1.7}]


def central_differences(fn, theta: torch.Tensor, step: float = 1e-6) -> torch.Tensor:
    grad = torch.zeros_like(theta)
    for j in range(theta.shape[1]):
        offset = torch.zeros_like(theta)
        offset[:, j] = step
        grad[:, j] = (fn(theta + offset) - fn(theta - offset)) / (2 * step)
    return grad


def scipy_log_joint(theta: np.ndarray, X: np.ndarray, t: np.ndarray, fields: dict) -> np.ndarray:
    """Independent log joint: Bernoulli likelihood, scipy densities, Jacobian of α = e^u added by hand."""
    d = X.shape[1]
    out = []
    for row in theta:
        w = row[:d]
        probability = special.expit(X @ w)
        total = stats.bernoulli(probability).logpmf(t).sum()
        if "prior" in fields:
            a0, b0 = fields["prior"]["a0"], fields["prior"]["b0"]
            alpha = np.exp(row[d])
            total += stats.norm(0, alpha**-0.5).logpdf(w).sum()
            total += stats.gamma(a0, scale=1 / b0).logpdf(alpha) + row[d]  # + log|dα/du|
        else:
            total += stats.norm(0, fields["prior_std"]).logpdf(w).sum()
        out.append(total)
    return np.array(out)


@pytest.mark.parametrize("fields", PRIORS)
def test_log_prob_equals_an_independent_scipy_log_joint(fields: dict) -> None:
    X, y = make_data()
    blr = target(X, y, bias=False, **fields)
    theta = np.random.default_rng(1).normal(size=(5, blr.dim)) * 0.5
    expected = scipy_log_joint(theta, X, y, fields)
    np.testing.assert_allclose(blr.log_prob(torch.as_tensor(theta)).numpy(), expected, rtol=1e-10)


@pytest.mark.parametrize("fields", PRIORS)
@pytest.mark.parametrize("batch_size", [None, 9])
def test_closed_form_score_matches_finite_differences_and_autograd(fields: dict, batch_size: int | None) -> None:
    X, y = make_data()
    blr = target(X, y, batch_size=batch_size, **fields)
    assert blr.dim == 4 + ("prior" in fields)  # 3 features + bias (+ log α)
    batch = blr.sample_batch(torch.Generator().manual_seed(4))
    theta = torch.as_tensor(np.random.default_rng(2).normal(size=(6, blr.dim)) * 0.7)
    score = blr.score(theta, batch)
    numeric = central_differences(lambda t: blr.log_prob(t, batch), theta)
    torch.testing.assert_close(score, numeric, rtol=1e-6, atol=1e-6)
    with torch.enable_grad():
        leaf = theta.clone().requires_grad_(True)
        (autograd,) = torch.autograd.grad(blr.log_prob(leaf, batch).sum(), leaf)
    torch.testing.assert_close(score, autograd, rtol=1e-10, atol=1e-10)


def test_log_alpha_gradient_is_the_svgd_paper_formula() -> None:
    """notes §4 BLR: ∂/∂log α = d/2 − α‖w‖²/2 + (a0 − 1) − b0 α + 1 (prior part; no likelihood term)."""
    X, y = make_data()
    a0, b0 = 2.0, 0.5
    blr = target(X, y, prior={"a0": a0, "b0": b0})
    theta = np.random.default_rng(5).normal(size=(4, blr.dim))
    w, alpha = theta[:, :-1], np.exp(theta[:, -1])
    d = w.shape[1]
    expected = d / 2 - alpha * (w**2).sum(1) / 2 + (a0 - 1) - b0 * alpha + 1
    np.testing.assert_allclose(blr.score(torch.as_tensor(theta))[:, -1].numpy(), expected, rtol=1e-12)


def test_plus_minus_one_labels_are_normalised() -> None:
    X, y01 = make_data()
    _, y_pm = make_data(labels=(-1, 1))
    theta = torch.randn(3, 5, dtype=torch.float64)
    torch.testing.assert_close(target(X, y01).log_prob(theta), target(X, y_pm).log_prob(theta))


def test_large_margins_stay_finite() -> None:
    X, y = make_data()
    blr = target(X * 1e3, y, prior_std=1.0)
    theta = torch.full((2, blr.dim), 50.0, dtype=torch.float64)
    assert torch.isfinite(blr.log_prob(theta)).all() and torch.isfinite(blr.score(theta)).all()


def test_initial_particles_follow_the_original_svgd_code() -> None:
    """α₀ ~ Gamma(a0, scale b0) (numpy's scale argument: mean a0·b0), w₀ ~ N(0, 1/α₀)."""
    X, y = make_data()
    blr = target(X, y, prior={"a0": 3.0, "b0": 0.5})
    first = blr.initial_particles(4000, torch.Generator().manual_seed(0))
    again = blr.initial_particles(4000, torch.Generator().manual_seed(0))
    assert torch.equal(first, again) and first.shape == (4000, blr.dim)
    alpha = first[:, -1].exp().numpy()
    assert stats.kstest(alpha, stats.gamma(3.0, scale=0.5).cdf).pvalue > 1e-3
    standardised = (first[:, :-1] * first[:, -1:].exp().sqrt()).numpy()  # w·√α ~ N(0, 1)
    assert stats.kstest(standardised.ravel(), "norm").pvalue > 1e-3


@pytest.mark.parametrize("shape", [0.3, 1.0, 4.5])
def test_gamma_sampler_matches_scipy(shape: float) -> None:
    draws = sample_gamma(shape, 20_000, torch.Generator().manual_seed(1)).numpy()
    assert stats.kstest(draws, stats.gamma(shape).cdf).pvalue > 1e-3
    assert np.all(draws > 0)
