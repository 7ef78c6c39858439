"""Kernel Stein discrepancy goodness-of-fit test (Liu, Lee & Jordan 2016, ICML, §4-5; Chwialkowski, Strathmann
& Gretton 2016, §2.2, the wild bootstrap): are draws x_1..x_n from p, knowing only the score s = ∇log p?

With the IMQ kernel k(x, y) = (c² + ‖x − y‖²/h)^β (Gorham & Mackey 2017's choice, c = 1, β = −1/2) the Stein
kernel is
    u(x, y) = s(x)ᵀs(y) k + s(x)ᵀ∇_y k + s(y)ᵀ∇_x k + tr ∇_x∇_y k                (Liu et al. eq. 8)
and KSD² = E u(x, x') is 0 iff q = p. The U-statistic Û = (1/(n(n−1))) Σ_{i≠j} u_ij is compared with its
wild-bootstrap null B* = (1/(n(n−1))) Σ_{i≠j} w_i w_j u_ij, w_i = ±1 Rademacher (independent draws; the i.i.d.
case of Chwialkowski et al.): p-value = share of B* ≥ Û. For correlated draws (a Markov chain, e.g. the
independence Metropolis–Hastings correction of a sampler) the weights form a Markov chain instead (Liu et al.
§5, after Chwialkowski et al.): w_t = −w_{t−1} with probability a (`flip_probability`), else w_{t−1}; a = 1/2
is the i.i.d. case, a small a keeps the null's variance right under positive autocorrelation. Draws are first standardised per coordinate (the
score multiplied by the same sd), so one bandwidth, the median squared distance, fits every coordinate.
Dense n × n: at most `max_draws` draws (the first ones) are used.
"""

from __future__ import annotations

import torch
from torch import Tensor

from inference_core.kernels.bandwidth import median_heuristic


def stein_kernel_matrix(x: Tensor, score: Tensor, h: float, c: float = 1.0, beta: float = -0.5) -> Tensor:
    """[n, n] u(x_i, x_j) for the IMQ kernel (module docstring), float64."""
    x, score = x.double(), score.double()
    d = x.shape[1]
    sq = x.square().sum(-1)
    r2 = (sq[:, None] + sq[None, :] - 2 * x @ x.T).clamp_min(0)
    base = c * c + r2 / h
    k = base.pow(beta)
    g = (2 * beta / h) * base.pow(beta - 1)  # ∇_x k(x_i, x_j) = g_ij (x_i − x_j), ∇_y k = −∇_x k
    sx = score @ x.T  # [i, j] = s_iᵀ x_j
    own = sx.diagonal()  # s_iᵀ x_i
    s_dot_diff_i = own[:, None] - sx  # s_iᵀ (x_i − x_j)
    s_dot_diff_j = sx.T - own[None, :]  # s_jᵀ (x_i − x_j)
    trace = -(2 * beta * d / h) * base.pow(beta - 1) - (4 * beta * (beta - 1) / (h * h)) * base.pow(beta - 2) * r2
    return (score @ score.T) * k - g * s_dot_diff_i + g * s_dot_diff_j + trace


def ksd_test(x: Tensor, score: Tensor, *, bootstrap: int = 1000, seed: int = 0,
             max_draws: int = 500, flip_probability: float = 0.5) -> dict[str, float]:
    """{"ksd2": Û, "pvalue": wild-bootstrap p-value, "n": draws used} (see the module docstring)."""
    x, score = x[:max_draws].double(), score[:max_draws].double()
    n = x.shape[0]
    sd = x.std(0).clamp_min(1e-300)
    z, s = (x - x.mean(0)) / sd, score * sd
    h = float(median_heuristic(z, divisor="none", include_diagonal=False))
    u = stein_kernel_matrix(z, s, h)
    u.fill_diagonal_(0.0)
    statistic = float(u.sum()) / (n * (n - 1))
    generator = torch.Generator().manual_seed(seed)
    w = torch.randint(0, 2, (bootstrap, n), generator=generator, dtype=torch.float64) * 2 - 1
    if flip_probability != 0.5:  # Markov-chain weights: a flip of sign at t with probability a
        flips = torch.rand((bootstrap, n - 1), generator=generator, dtype=torch.float64) < flip_probability
        signs = torch.cat([w[:, :1], torch.where(flips, -1.0, 1.0).to(torch.float64)], dim=1)
        w = torch.cumprod(signs, dim=1)
    w = w.to(u.device)  # drawn on the CPU (the same signs on any device), used where the particles are
    null = ((w @ u) * w).sum(-1) / (n * (n - 1))
    pvalue = float((null >= statistic).double().mean())
    return {"ksd2": statistic, "pvalue": pvalue, "n": float(n), "bandwidth": h}
