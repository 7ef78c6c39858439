"""Shared checks for the analytic targets (Monte Carlo moment tests with standard-error tolerances)."""

from __future__ import annotations

import numpy as np
import torch


def finite_difference_score(log_prob, x: torch.Tensor, step: float = 1e-6) -> torch.Tensor:
    """Central differences of a float64 log-density, one coordinate at a time."""
    grad = torch.zeros_like(x)
    for j in range(x.shape[1]):
        shift = torch.zeros_like(x)
        shift[:, j] = step
        grad[:, j] = (log_prob(x + shift) - log_prob(x - shift)) / (2 * step)
    return grad


def assert_moments_match(samples: np.ndarray, mean: np.ndarray, cov: np.ndarray, z: float = 5.0) -> None:
    """Sample mean and covariance agree with (mean, cov) within `z` Monte Carlo standard errors per entry.

    The standard error of each covariance entry is estimated from the samples themselves
    (sd of the products (x_i − m_i)(x_j − m_j) over √n).
    """
    n = samples.shape[0]
    sample_mean = samples.mean(0)
    mean_se = samples.std(0) / np.sqrt(n)
    assert np.all(np.abs(sample_mean - mean) <= z * mean_se + 1e-12), (sample_mean, mean, mean_se)
    centred = samples - mean
    products = centred[:, :, None] * centred[:, None, :]
    cov_se = products.std(0) / np.sqrt(n)
    sample_cov = products.mean(0)
    assert np.all(np.abs(sample_cov - cov) <= z * cov_se + 1e-12), (sample_cov, cov, cov_se)


def assert_stein_identities(score: np.ndarray, samples: np.ndarray, z: float = 5.0) -> None:
    """Under the target, E[∇ log p(x)] = 0 and E[∇ log p(x) xᵀ] = −I (integration by parts). This ties a
    sampler to the log-density/score it is supposed to match, independently of any moment formula."""
    n, d = samples.shape
    assert np.all(np.abs(score.mean(0)) <= z * score.std(0) / np.sqrt(n)), score.mean(0)
    products = score[:, :, None] * samples[:, None, :]
    deviation = np.abs(products.mean(0) + np.eye(d))
    assert np.all(deviation <= z * products.std(0) / np.sqrt(n) + 1e-12), products.mean(0)
