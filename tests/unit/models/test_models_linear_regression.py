"""Bayesian linear regression: the closed-form posterior against independent computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from inference_core import errors
from inference_core.targets import BuildContext, build_target

CONTEXT = BuildContext(dtype=torch.float64)


def make_data(n: int = 30, d: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + 0.5 * rng.normal(size=n)
    return X, y


def target(X: np.ndarray, y: np.ndarray, **fields):
    spec = {"kind": "bayesian_linear_regression", "dataset": {"X": X.tolist(), "y": y.tolist()}, **fields}
    return build_target(spec, CONTEXT)


def sequential_posterior(X: np.ndarray, y: np.ndarray, noise_std: float, prior_std: float):
    """Independent path: Bayesian updating one observation at a time in covariance form (rank-1 Kalman
    updates, no precision matrix, no joint solve)."""
    mean = np.zeros(X.shape[1])
    cov = prior_std**2 * np.eye(X.shape[1])
    for x, target_value in zip(X, y, strict=True):
        gain = cov @ x / (x @ cov @ x + noise_std**2)
        mean = mean + gain * (target_value - x @ mean)
        cov = cov - np.outer(gain, x @ cov)
    return mean, cov


@pytest.mark.parametrize(("noise_std", "prior_std"), [(0.5, 2.0), (1.0, 0.3), (2.0, 10.0)])
def test_posterior_matches_sequential_bayesian_updating(noise_std: float, prior_std: float) -> None:
    X, y = make_data()
    reference = target(X, y, noise_std=noise_std, prior_std=prior_std).reference()
    mean, cov = sequential_posterior(X, y, noise_std, prior_std)
    np.testing.assert_allclose(reference.mean.numpy(), mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(reference.cov.numpy(), cov, rtol=1e-8, atol=1e-14)


def test_flat_prior_unit_noise_covariance_is_the_inverse_gram_matrix() -> None:
    """The GPVI paper prints XᵀX; the correct covariance is (XᵀX)⁻¹ (DESIGN.md errata)."""
    X, y = make_data(d=4)
    reference = target(X, y, noise_std=1.0).reference()
    np.testing.assert_allclose(reference.cov.numpy(), np.linalg.inv(X.T @ X), rtol=1e-10)
    np.testing.assert_allclose(reference.mean.numpy(), np.linalg.lstsq(X, y, rcond=None)[0], rtol=1e-9)


def test_log_prob_differences_equal_gaussian_posterior_log_density_differences() -> None:
    X, y = make_data()
    for fields in ({"noise_std": 0.7, "prior_std": 1.5}, {"noise_std": 0.7}):
        blr = target(X, y, **fields)
        reference = blr.reference()
        posterior = stats.multivariate_normal(reference.mean.numpy(), reference.cov.numpy())
        thetas = torch.as_tensor(np.random.default_rng(1).normal(size=(6, 3)))
        log_prob = blr.log_prob(thetas).numpy()
        exact = posterior.logpdf(thetas.numpy())
        np.testing.assert_allclose(log_prob - log_prob[0], exact - exact[0], rtol=1e-9, atol=1e-9)


def test_log_prob_is_prior_plus_likelihood_with_normalising_constants() -> None:
    X, y = make_data()
    blr = target(X, y, noise_std=0.7, prior_std=1.5)
    theta = np.random.default_rng(2).normal(size=(4, 3))
    expected = (stats.norm(0, 1.5).logpdf(theta).sum(-1)
                + stats.norm(theta @ X.T, 0.7).logpdf(y[None, :]).sum(-1))
    np.testing.assert_allclose(blr.log_prob(torch.as_tensor(theta)).numpy(), expected, rtol=1e-12)


def test_score_is_minus_precision_times_offset() -> None:
    X, y = make_data()
    for fields in ({"noise_std": 0.7, "prior_std": 1.5}, {"noise_std": 1.3}):
        blr = target(X, y, **fields)
        reference = blr.reference()
        theta = torch.as_tensor(np.random.default_rng(3).normal(size=(5, 3)))
        expected = -(theta - reference.mean) @ torch.linalg.inv(reference.cov)
        torch.testing.assert_close(blr.score(theta), expected, rtol=1e-9, atol=1e-9)


def test_minibatch_score_matches_autograd_of_the_minibatch_log_prob() -> None:
    X, y = make_data(n=40)
    blr = target(X, y, noise_std=0.7, prior_std=1.5, batch_size=7)
    batch = blr.sample_batch(torch.Generator().manual_seed(0))
    assert batch.shape == (7,)
    theta = torch.randn(5, 3, dtype=torch.float64).requires_grad_(True)
    (grad,) = torch.autograd.grad(blr.log_prob(theta, batch).sum(), theta)
    torch.testing.assert_close(blr.score(theta.detach(), batch), grad, rtol=1e-10, atol=1e-10)


def test_reference_sampler_draws_from_the_posterior() -> None:
    X, y = make_data()
    reference = target(X, y, noise_std=0.7, prior_std=1.5).reference()
    n = 100_000
    draws = reference.sample(n, torch.Generator().manual_seed(0)).numpy()
    # Whitened with an independently computed factor, exact draws are N(0, I): every entry of the sample
    # mean and covariance is within a few standard errors (1/√n and about √2/√n) of 0 and I.
    whitened = np.linalg.solve(np.linalg.cholesky(reference.cov.numpy()), (draws - reference.mean.numpy()).T).T
    assert np.abs(whitened.mean(0)).max() < 5 / np.sqrt(n)
    assert np.abs(np.cov(whitened.T) - np.eye(3)).max() < 7 / np.sqrt(n)


def test_bias_and_standardize_transform_the_design_matrix() -> None:
    X, y = make_data()
    X = X * [1.0, 10.0, 0.1] + [5.0, -3.0, 0.0]
    biased = target(X, y, noise_std=0.7, prior_std=1.5, bias=True, standardize=True)
    assert biased.dim == 4
    Xs = (X - X.mean(0)) / X.std(0)
    ys = (y - y.mean()) / y.std()
    manual = target(np.column_stack([Xs, np.ones(len(X))]), ys, noise_std=0.7, prior_std=1.5)
    torch.testing.assert_close(biased.reference().mean, manual.reference().mean, rtol=1e-10, atol=1e-12)
    assert biased.standardization.y_std == pytest.approx(y.std())
    np.testing.assert_allclose(biased.standardization.x_mean, X.mean(0))


def test_singular_design_with_a_flat_prior_is_rejected() -> None:
    X, y = make_data()
    X = np.column_stack([X, X[:, 0]])  # a repeated column: XᵀX is singular
    with pytest.raises(errors.TargetInvalid, match="singular"):
        target(X, y)
    assert target(X, y, prior_std=1.0).dim == 4  # a proper prior fixes it


def test_runs_in_float32_by_default() -> None:
    X, y = make_data()
    spec = {"kind": "bayesian_linear_regression", "dataset": {"X": X.tolist(), "y": y.tolist()}}
    blr = build_target(spec)
    assert blr.X.dtype == torch.float32 and blr.reference().mean.dtype == torch.float32
    blr64 = target(X, y)
    torch.testing.assert_close(blr.reference().mean.double(), blr64.reference().mean, rtol=1e-6, atol=1e-6)
