"""Exact draws of random functions at given inputs: f(X) for n functions, [n, m], for the function-space
methods (f-POVI's prior approximation and FVI's prior distillation both need fresh prior draws).

* GP, zero mean, RBF kernel k(x, x') = v·exp(−Σ_j (x_j − x'_j)²/(2ℓ_j²)): f = L z with L Lᵀ = K + jitter·v·I
  (float64 Cholesky; the jitter, 1e-8 relative, grows tenfold until the factorisation succeeds).
* piecewise constant (1-D, on [lo, hi]): K ~ Poisson(rate), change points c_k iid U(lo, hi), levels v_0..v_K
  iid; f(x) = v_{#{k: c_k < x}} (fBNN's PiecewiseConstant, Sun et al. 2019).
* piecewise linear (1-D): K ~ Poisson(rate) interior knots iid U(lo, hi), sorted, plus knots lo and hi;
  values at the K + 2 knots iid; linear interpolation, constant beyond [lo, hi] (fBNN's PiecewiseLinear).
Everything is vectorised over functions: the K's differ per function, so change points are drawn up to the
largest K and the extra ones are masked (pushed to hi, where they change nothing).
"""

from __future__ import annotations

import torch
from torch import Tensor

from inference_core.schemas.models import (
    GPPrior,
    NormalValues,
    PiecewiseConstantPrior,
    PiecewiseLinearPrior,
    UniformValues,
)

_JITTER = 1e-8


def rbf_kernel(A: Tensor, B: Tensor, lengthscale: Tensor, variance: float) -> Tensor:
    """k(a, b) = variance·exp(−Σ_j (a_j − b_j)²/(2ℓ_j²)), [len(A), len(B)]; differences are taken
    directly (no ‖a‖² + ‖b‖² − 2ab expansion, which cancels badly far from the origin)."""
    diff = (A.unsqueeze(1) - B.unsqueeze(0)) / lengthscale
    return variance * torch.exp(-0.5 * diff.square().sum(-1))


def gp_lengthscale(prior: GPPrior, n_features: int) -> Tensor:
    values = prior.lengthscale if isinstance(prior.lengthscale, list) else [prior.lengthscale] * n_features
    return torch.tensor(values, dtype=torch.float64)


def jittered_cholesky(K: Tensor, scale: float) -> Tensor:
    """Cholesky factor of K + jitter·I, the smallest jitter in scale·(1e-8, 1e-7, ..., 1e-2) that works."""
    identity = torch.eye(K.shape[0], dtype=K.dtype, device=K.device)
    jitter = _JITTER * scale
    for _ in range(7):
        factor, info = torch.linalg.cholesky_ex(K + jitter * identity)
        if int(info) == 0:
            return factor
        jitter *= 10
    raise ValueError("the kernel matrix is not positive definite even with jitter")


def _values(distribution: NormalValues | UniformValues, shape: tuple[int, ...],
            generator: torch.Generator) -> Tensor:
    device = generator.device
    if isinstance(distribution, NormalValues):
        noise = torch.randn(shape, generator=generator, dtype=torch.float64, device=device)
        return distribution.mean + distribution.std * noise
    uniform = torch.rand(shape, generator=generator, dtype=torch.float64, device=device)
    return distribution.low + (distribution.high - distribution.low) * uniform


def _change_points(rate: float, n: int, low: float, high: float,
                   generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Counts K [n] ~ Poisson(rate) and points [n, max K] ~ U(low, high), unused slots set to +inf."""
    device = generator.device
    counts = torch.poisson(torch.full((n,), float(rate), dtype=torch.float64, device=device),
                           generator=generator).to(torch.int64)
    width = int(counts.max()) if n else 0
    uniform = torch.rand(n, width, generator=generator, dtype=torch.float64, device=device)
    points = low + (high - low) * uniform
    used = torch.arange(width, device=device).unsqueeze(0) < counts.unsqueeze(1)
    return counts, torch.where(used, points, torch.full_like(points, float("inf")))


def sample_gp(prior: GPPrior, n: int, X: Tensor, generator: torch.Generator) -> Tensor:
    """[n, m] draws of a zero-mean GP at X [m, p] (float64)."""
    X64 = X.to(device=generator.device, dtype=torch.float64)
    K = rbf_kernel(X64, X64, gp_lengthscale(prior, X.shape[1]).to(X64.device), prior.variance)
    factor = jittered_cholesky(K, prior.variance)
    z = torch.randn(X.shape[0], n, generator=generator, dtype=torch.float64, device=generator.device)
    return (factor @ z).T


def sample_piecewise_constant(prior: PiecewiseConstantPrior, n: int, X: Tensor, low: float, high: float,
                              generator: torch.Generator) -> Tensor:
    """[n, m] draws of the piecewise-constant prior at 1-D inputs X [m, 1] (float64)."""
    x = X.to(device=generator.device, dtype=torch.float64)[:, 0]
    counts, points = _change_points(prior.rate, n, low, high, generator)
    levels = _values(prior.values, (n, points.shape[1] + 1), generator)
    # Piece index of each x: how many change points lie strictly left of it (inf slots never count),
    # by binary search in the sorted points: O(n·m·log K) time, O(n·m) memory.
    ordered = torch.sort(points, dim=1).values
    piece = torch.searchsorted(ordered, x.expand(n, -1).contiguous(), right=False)  # [n, m]
    return levels.gather(1, piece)


def sample_piecewise_linear(prior: PiecewiseLinearPrior, n: int, X: Tensor, low: float, high: float,
                            generator: torch.Generator) -> Tensor:
    """[n, m] draws of the piecewise-linear prior at 1-D inputs X [m, 1] (float64)."""
    device = generator.device
    x = X.to(device=device, dtype=torch.float64)[:, 0].clamp(low, high)
    counts, points = _change_points(prior.rate, n, low, high, generator)
    width = points.shape[1]
    interior = torch.sort(points.clamp_max(high), dim=1).values  # unused slots become extra knots at hi
    knots = torch.cat([torch.full((n, 1), low, dtype=torch.float64, device=device), interior,
                       torch.full((n, 1), high, dtype=torch.float64, device=device)], dim=1)  # [n, width + 2]
    values = _values(prior.values, (n, width + 2), generator)
    # Knots at hi (padding) carry the value at hi: slot K_j + 1 is the real end value of function j.
    end_value = values.gather(1, (counts + 1).unsqueeze(1))
    slots = torch.arange(width + 2, device=device).unsqueeze(0)
    values = torch.where(slots > (counts + 1).unsqueeze(1), end_value, values)
    segment = torch.searchsorted(knots, x.expand(n, -1).contiguous(), right=True) - 1
    segment = segment.clamp(0, width)
    left, right = knots.gather(1, segment), knots.gather(1, segment + 1)
    span = right - left
    fraction = torch.where(span > 0, (x.unsqueeze(0) - left) / torch.where(span > 0, span, 1.0), 0.0)
    value_left, value_right = values.gather(1, segment), values.gather(1, segment + 1)
    return value_left + fraction * (value_right - value_left)
