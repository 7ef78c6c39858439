"""The function-space prior gradient of f-POVI (Wang et al. 2019, §3.2 "the function-space prior" and App. B.2;
thu-ml/fpovi `ffn/utils.py`: `reduce_moments_ax0`, `matrix_inverse`, `mvn_log_prob`).

The prior p(f(x)) of a BNN has no closed form; at each step it is replaced by a Gaussian fitted to S fresh
prior functions evaluated at a few measurement points:

    m = (1/S) Σ_s f_s,     C = (1/(S−1)) Σ_s (f_s − m)(f_s − m)ᵀ        (float64)
    P = V diag(1/max(λ, floor)) Vᵀ   for C = V diag(λ) Vᵀ              (an eigenvalue floor, not added jitter)
    log p̃(f) = −½ (f − m)ᵀ P (f − m),   ∇_f log p̃(f) = −P (f − m)      (no log-determinant: only the gradient
                                                                         with respect to the particles is used)
"""

from __future__ import annotations

import torch
from torch import Tensor


def prior_columns(n_columns: int, n_points: int) -> Tensor:
    """Indices of the prior-fit columns among M = B + E: the first n_points/2 (training rows) and the last
    n_points/2 (extras), as the code's `pg_indices`; every column when M < n_points."""
    if n_points % 2:
        raise ValueError("n_points must be even")
    if n_columns <= n_points:
        return torch.arange(n_columns)
    half = n_points // 2
    return torch.cat([torch.arange(half), torch.arange(n_columns - half, n_columns)])


def fit_gaussian(draws: Tensor, eigen_floor: float) -> tuple[Tensor, Tensor]:
    """(mean [P], precision [P, P]) of prior draws [S, P], in float64 (see the module docstring)."""
    if draws.ndim != 2 or draws.shape[0] < 2:
        raise ValueError(f"draws must have shape [S >= 2, P], got {list(draws.shape)}")
    if not eigen_floor > 0:
        raise ValueError("eigen_floor must be > 0")
    values = draws.to(torch.float64)
    mean = values.mean(0)
    centred = values - mean
    cov = centred.T @ centred / (values.shape[0] - 1)
    eigenvalues, eigenvectors = torch.linalg.eigh(cov)
    precision = (eigenvectors / eigenvalues.clamp_min(eigen_floor)) @ eigenvectors.T
    return mean, precision


def gaussian_score(values: Tensor, mean: Tensor, precision: Tensor) -> Tensor:
    """∇_f log p̃(f) = −P (f − m) for each row of values [n, P], in float64."""
    return -(values.to(torch.float64) - mean) @ precision  # P is symmetric


def gaussian_log_density(values: Tensor, mean: Tensor, precision: Tensor) -> Tensor:
    """−½ (f − m)ᵀ P (f − m) per row [n] (float64): the code's `mvn_log_prob`, no normaliser."""
    centred = values.to(torch.float64) - mean
    return -0.5 * ((centred @ precision) * centred).sum(-1)
