"""The regression posterior predictive as an equal-weight mixture of Gaussians, one per posterior draw:

    p(y | x, D) ≈ (1/n) Σ_i N(y; f_i(x), σ_i²)

(f_i the i-th draw's function value, σ_i its observation noise std). Moments in closed form
(mean = (1/n) Σ f_i, variance = Var_i f_i + (1/n) Σ σ_i², the law of total variance) and quantiles exactly:
the mixture CDF F(t) = (1/n) Σ_i Φ((t − f_i)/σ_i) is inverted per input by Newton's method safeguarded with
bisection, inside the bracket [min_i (f_i + σ_i z_q), max_i (f_i + σ_i z_q)] (z_q = Φ⁻¹(q)): every component
CDF is ≤ q at the left end and ≥ q at the right end, so F crosses q in between.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
MAX_ITERATIONS = 100
#: Elements of one [levels, draws, inputs] work array; inputs are processed in chunks below this.
CHUNK_ELEMENTS = 2**22


def _scales(scale: Tensor, loc: Tensor) -> Tensor:
    """σ as [n, m] or broadcastable [n, 1]."""
    return scale.unsqueeze(-1) if scale.ndim == 1 else scale


def mixture_moments(loc: Tensor, scale: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(mean [m], total std [m], epistemic std [m]) of the mixture with components N(loc[i, j], scale[i]²)
    (scale [n] or [n, m]); the epistemic part is the population std of the draws' means."""
    mean = loc.mean(0)
    epistemic_var = (loc - mean).square().mean(0)
    noise_var = _scales(scale, loc).square().expand_as(loc).mean(0)
    return mean, (epistemic_var + noise_var).sqrt(), epistemic_var.sqrt()


def mixture_cdf(t: Tensor, loc: Tensor, scale: Tensor) -> Tensor:
    """F(t_j) = (1/n) Σ_i Φ((t_j − loc[i, j]) / scale[i]) for t [m] (or [L, m] against loc [n, m])."""
    return torch.special.ndtr((t.unsqueeze(-2) - loc) / _scales(scale, loc)).mean(-2)


def _quantiles_chunk(loc: Tensor, scale: Tensor, levels: Tensor, tol: float) -> Tensor:
    z = torch.special.ndtri(levels).view(-1, 1, 1)                     # [L, 1, 1]
    candidates = loc.unsqueeze(0) + scale.unsqueeze(0) * z             # [L, n, m]
    low, high = candidates.min(1).values, candidates.max(1).values     # [L, m]
    t = candidates.mean(1).clamp(low, high)
    q = levels.view(-1, 1)
    for _ in range(MAX_ITERATIONS):
        u = (t.unsqueeze(1) - loc) / scale                             # [L, n, m]
        excess = torch.special.ndtr(u).mean(1) - q                     # F(t) − q
        density = (torch.exp(-0.5 * u.square()) / scale).mean(1) * _INV_SQRT_2PI
        low = torch.where(excess < 0, t, low)
        high = torch.where(excess > 0, t, high)
        newton = t - excess / density
        inside = (newton > low) & (newton < high) & torch.isfinite(newton)
        proposal = torch.where(inside, newton, 0.5 * (low + high))
        proposal = torch.where(excess == 0, t, proposal)
        step = (proposal - t).abs()
        t = proposal
        if bool((step <= tol * (1 + t.abs())).all()) or bool(((high - low) <= tol * (1 + t.abs())).all()):
            break
    return t


def mixture_quantiles(loc: Tensor, scale: Tensor, levels: Tensor | list[float], tol: float = 1e-12) -> Tensor:
    """Quantiles [L, m] of the mixtures (1/n) Σ_i N(loc[i, j], scale[i]²) (scale [n] or [n, m], all > 0) at
    levels in (0, 1), float64, to a relative tolerance `tol` (see the module docstring)."""
    loc = loc.to(torch.float64)
    n, m = loc.shape
    scale = _scales(scale.to(torch.float64), loc).expand(n, m)
    levels = torch.as_tensor(levels, dtype=torch.float64)
    if levels.ndim != 1 or not bool(((levels > 0) & (levels < 1)).all()):
        raise ValueError("quantile levels must be a list of numbers strictly between 0 and 1")
    if not bool((scale > 0).all()):
        raise ValueError("every component needs a positive noise std")
    chunk = max(1, CHUNK_ELEMENTS // max(1, levels.shape[0] * n))
    parts = [_quantiles_chunk(loc[:, s: s + chunk], scale[:, s: s + chunk], levels, tol)
             for s in range(0, m, chunk)]
    return torch.cat(parts, dim=1)
