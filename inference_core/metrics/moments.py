"""Moment errors against an exact reference (used in tests and in a job's eval diagnostics)."""

from __future__ import annotations

import torch
from torch import Tensor


def sample_cov(x: Tensor) -> Tensor:
    """Unbiased sample covariance of rows (divisor n − 1), computed in float64."""
    x = x.to(torch.float64)
    centred = x - x.mean(0)
    return centred.T @ centred / max(x.shape[0] - 1, 1)


def mean_error(x: Tensor, mean: Tensor) -> float:
    """Euclidean norm of (sample mean − true mean)."""
    return float(torch.linalg.vector_norm(x.to(torch.float64).mean(0) - mean.to(torch.float64)))


def cov_error_relative(x: Tensor, cov: Tensor) -> float:
    """||Σ̂ − Σ||_F / ||Σ||_F (relative Frobenius error of the sample covariance)."""
    cov = cov.to(torch.float64)
    return float(torch.linalg.matrix_norm(sample_cov(x) - cov) / torch.linalg.matrix_norm(cov))
