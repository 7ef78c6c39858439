"""Held-out regression metrics of a posterior predictive (the UCI protocol: Hernández-Lobato & Adams 2015,
as used by MC dropout, SVGD, f-POVI and FVI; data/uci README): everything in the ORIGINAL units of y.

* `rmse`: √((1/m) Σ_j (ŷ_j − y_j)²) of the predictive mean ŷ_j = (1/n) Σ_i f_i(x_j);
* `mixture_log_likelihood`: per point log p(y_j | x_j, D) ≈ log (1/n) Σ_i N(y_j; f_i(x_j), σ_i²) — the log of
  the predictive mixture density, by log-sum-exp; the test log-likelihood is its mean over points (the
  tables' "test LL"; NLL is its negative);
* `interval_coverage`: the share of points inside [lower_j, upper_j].
Inputs are tensors or arrays; the arithmetic is float64.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

_LOG_2PI = math.log(2 * math.pi)


def _as64(value: Any) -> Tensor:
    if isinstance(value, Tensor):
        return value.detach().to(device="cpu", dtype=torch.float64)
    return torch.as_tensor(value, dtype=torch.float64)  # lists straight to float64, never through float32


def rmse(mean: Any, y: Any) -> float:
    """Root mean squared error of predictions `mean` [m] against `y` [m]."""
    mean, y = _as64(mean), _as64(y)
    if mean.shape != y.shape or mean.ndim != 1 or mean.shape[0] == 0:
        raise ValueError(f"mean and y must be non-empty vectors of one length, got {list(mean.shape)} and "
                         f"{list(y.shape)}")
    return float((mean - y).square().mean().sqrt())


def mixture_log_likelihood(y: Any, loc: Any, scale: Any) -> Tensor:
    """log (1/n) Σ_i N(y_j; loc[i, j], scale_i²) per point, [m] float64; scale [n] or [n, m], positive."""
    y, loc, scale = _as64(y), _as64(loc), _as64(scale)
    if loc.ndim != 2 or y.shape != loc.shape[1:]:
        raise ValueError(f"loc must be [n, m] with y [m], got {list(loc.shape)} and {list(y.shape)}")
    scale = scale.unsqueeze(-1) if scale.ndim == 1 else scale
    if not bool((scale > 0).all()):
        raise ValueError("noise stds must be positive")
    log_density = -0.5 * ((y - loc) / scale).square() - torch.log(scale) - 0.5 * _LOG_2PI   # [n, m]
    return torch.logsumexp(log_density, dim=0) - math.log(loc.shape[0])


def interval_coverage(y: Any, lower: Any, upper: Any) -> float:
    """Share of points j with lower_j ≤ y_j ≤ upper_j."""
    y, lower, upper = _as64(y), _as64(lower), _as64(upper)
    if not y.shape == lower.shape == upper.shape or y.ndim != 1 or y.shape[0] == 0:
        raise ValueError("y, lower and upper must be non-empty vectors of one length")
    return float(((lower <= y) & (y <= upper)).to(torch.float64).mean())
