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

_INV_SQRT_PI = 1 / math.sqrt(math.pi)
MAX_ITERATIONS = 100
FLOAT32_ITERATIONS = 30
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


def _newton(t: Tensor, low: Tensor, high: Tensor, neg_b: Tensor, a: Tensor, q: Tensor, tol: Tensor,
            max_iterations: int) -> tuple[Tensor, Tensor, Tensor]:
    """Safeguarded Newton on F(t) = q for every level and input at once, in the dtype of the arguments.

    v = (t − loc)/(σ√2) = t·a − b (a = 1/(σ√2) [n, 1|m], b = loc·a, given as −b), F(t) = ½ + ½ mean_i erf(v_i),
    F'(t) = mean_i a_i exp(−v_i²)/√π. A Newton step that leaves the bracket [low, high] (kept valid by the sign
    of F − q) is replaced by bisection. A point is done once its Newton step is ≤ tol: Newton's error after
    a step s is O(s²/σ), far below s."""
    for _ in range(max_iterations):
        v = torch.addcmul(neg_b, t.unsqueeze(1), a)                    # [L, n, m]
        excess = 0.5 * torch.erf(v).mean(1) + (0.5 - q)                # F(t) − q
        density = v.square_().neg_().exp_().mul_(a).mean(1) * _INV_SQRT_PI
        low = torch.where(excess < 0, t, low)
        high = torch.where(excess > 0, t, high)
        step = excess / density
        newton = t - step
        inside = (newton >= low) & (newton <= high)  # False for NaN/inf (a density that underflowed)
        proposal = torch.where(inside, newton, 0.5 * (low + high))
        done = (inside & (step.abs() <= tol)) | (excess == 0) | (high - low <= tol)
        t = torch.where(excess == 0, t, proposal)
        if bool(done.all()):
            break
    return t, low, high


def _quantiles_chunk(loc: Tensor, scale: Tensor, levels: Tensor) -> Tensor:
    z = torch.special.ndtri(levels).view(-1, 1, 1)                     # [L, 1, 1]
    candidates = torch.addcmul(loc.unsqueeze(0), scale.unsqueeze(0), z)  # f_i + σ_i z_q, [L, n, m]
    low, high = candidates.amin(1), candidates.amax(1)                 # [L, m]: F(low) ≤ q ≤ F(high)
    del candidates
    # Start from the moment-matched Gaussian's quantile (exact when the noise dominates the spread).
    mean, std, _ = mixture_moments(loc, scale[:, :1] if scale.shape[1] == 1 else scale)
    t = torch.minimum(torch.maximum(torch.addcmul(mean, std, z.view(-1, 1)), low), high)
    q = levels.view(-1, 1)
    a = 1 / (scale * math.sqrt(2))
    neg_b = -(loc * a)
    sigma_min = scale.amin(0)                                          # [m]: the finest scale of each mixture
    # Cheap float32 iterations to a step ≤ 1e-3 σ (float32 erf/exp are several times faster), then float64 Newton
    # from there to a last step ≤ 1e-5 σ, whose error is then O(1e-10 σ).
    t32, _, _ = _newton(t.float(), low.float(), high.float(), neg_b.float(), a.float(), q.float(),
                        (1e-3 * sigma_min).float(), FLOAT32_ITERATIONS)
    t = torch.minimum(torch.maximum(t32.double(), low), high)
    t, _, _ = _newton(t, low, high, neg_b, a, q, 1e-5 * sigma_min, MAX_ITERATIONS)
    return t


def mixture_quantiles(loc: Tensor, scale: Tensor, levels: Tensor | list[float]) -> Tensor:
    """Quantiles [L, m] of the mixtures (1/n) Σ_i N(loc[i, j], scale[i]²) (scale [n] or [n, m], all > 0) at
    levels in (0, 1), float64, to about 1e-10 of the smallest component std (see `_newton`)."""
    loc = loc.to(torch.float64)
    n, m = loc.shape
    scale = _scales(scale.to(torch.float64), loc).expand(n, m)
    levels = torch.as_tensor(levels, dtype=torch.float64)
    if levels.ndim != 1 or not bool(((levels > 0) & (levels < 1)).all()):
        raise ValueError("quantile levels must be a list of numbers strictly between 0 and 1")
    if not bool((scale > 0).all()):
        raise ValueError("every component needs a positive noise std")
    chunk = max(1, CHUNK_ELEMENTS // max(1, levels.shape[0] * n))
    parts = [_quantiles_chunk(loc[:, s: s + chunk], scale[:, s: s + chunk], levels)
             for s in range(0, m, chunk)]
    return torch.cat(parts, dim=1)
