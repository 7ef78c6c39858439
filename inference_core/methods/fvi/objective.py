"""The FVI objective (Ma & Hernández-Lobato 2021): the product-of-experts posterior over h, the analytic
log Z̃ (eq. 17, per latent dimension as in eq. 19), the nested minibatch estimators J_k and their
Russian-roulette debiasing (Prop. 7), and the distillation ELBO (eq. 13) with the exact Gaussian p̃(f | h).

Conventions [inferred where the paper is silent]:
* PoE: the prior expert p₀ = N(0, I) has precision 1, so τ_λ = 1 + Σ_i w_i τ_i and
  μ_λ = Σ_i w_i τ_i μ_i / τ_λ (the printed minibatch formula drops the 1; with it τ_η + τ_λ − 1 > 0).
* J_k uses the first k rows of one permutation of the training set (nested), weight N/k, plus the OOD
  points with weight 1; Δ_k = J_{k+1} − J_k is 0 for k ≥ N.
* Debiasing: R = K + G, G ~ Geom(p) on {0, 1, ...}; estimate J_K + Σ_{k=K}^{R} Δ_k / P(R ≥ k) with
  P(R ≥ k) = (1 − p)^{k−K}: its mean over G is J_K + Σ_{k≥K} Δ_k = J_N.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

_LOG_2PI = math.log(2 * math.pi)


def product_of_experts(mean: Tensor, precision: Tensor, weight: Tensor | float = 1.0) -> tuple[Tensor, Tensor]:
    """PoE of p₀ = N(0, I) with Gaussian experts (eq. 14): mean, precision [..., m, H] and per-point
    weights [m] (or a float) → (μ_λ, τ_λ) [..., H] with τ_λ = 1 + Σ w τ, μ_λ = Σ w τ μ / τ_λ."""
    weighted = precision * (weight.unsqueeze(-1) if isinstance(weight, Tensor) else weight)
    tau = 1 + weighted.sum(-2)
    return (weighted * mean).sum(-2) / tau, tau


def log_z_tilde(q_mean: Tensor, q_precision: Tensor, lam_mean: Tensor, lam_precision: Tensor) -> Tensor:
    """log ∫ q̃_λ(h|f) q_η(h) / p₀(h) dh for diagonal Gaussians, summed over the last axis (eq. 19):

    ½ Σ_i [log τ_η + log τ_λ − log(τ_η + τ_λ − 1) − μ_λ²τ_λ − μ_η²τ_η + (τ_ημ_η + τ_λμ_λ)²/(τ_η + τ_λ − 1)].

    The integral exists only when τ_η + τ_λ − 1 > 0 (always so with τ_λ ≥ 1 from the PoE's prior expert).
    """
    total = q_precision + lam_precision - 1
    if not bool((total > 0).all()):
        raise ValueError("log Z̃ needs τ_η + τ_λ − 1 > 0 in every latent dimension")
    linear = q_precision * q_mean + lam_precision * lam_mean
    terms = (q_precision.log() + lam_precision.log() - total.log() - lam_mean.square() * lam_precision
             - q_mean.square() * q_precision + linear.square() / total)
    return 0.5 * terms.sum(-1)


def nested_j(train_mean: Tensor, train_precision: Tensor, ood_mean: Tensor, ood_precision: Tensor,
             q_mean: Tensor, q_precision: Tensor, n_data: int, k_values: Tensor) -> Tensor:
    """J_k for each k in k_values [r] (eq. 19 with the minibatch PoE statistics), from the experts at the
    permuted training rows [m, H] (row j = j-th row of the permutation, m ≥ max k) and at the OOD points
    [o, H]: the first k training rows weigh N/k, the OOD points 1. Returns [r]."""
    cum_tau = torch.cumsum(train_precision, 0)  # Σ_{j<k} τ_j, row k−1
    cum_tau_mu = torch.cumsum(train_precision * train_mean, 0)
    index = (k_values - 1).to(torch.int64)
    scale = (n_data / k_values.to(train_mean.dtype)).unsqueeze(-1)
    tau = 1 + scale * cum_tau[index] + ood_precision.sum(0)
    tau_mu = scale * cum_tau_mu[index] + (ood_precision * ood_mean).sum(0)
    return log_z_tilde(q_mean, q_precision, tau_mu / tau, tau)


def roulette_k_values(k: int, extra: int, n_data: int) -> tuple[Tensor, Tensor]:
    """The J_k needed by the debiased estimate with R = K + extra: k = K..min(R + 1, N) [r], and the
    weights [r − 1] of Δ_k = J_{k+1} − J_k, 1/P(R ≥ k) = (1 − p)^{−(k − K)} (given as the ratio below)."""
    top = min(k + extra + 1, n_data)
    return torch.arange(k, max(top, k) + 1), torch.arange(0, max(top - k, 0))


def debiased_j(train_mean: Tensor, train_precision: Tensor, ood_mean: Tensor, ood_precision: Tensor,
               q_mean: Tensor, q_precision: Tensor, n_data: int, k: int, extra: int, p: float) -> Tensor:
    """Russian-roulette estimate of J_N (Prop. 7): J_K + Σ_{k=K}^{K+extra} Δ_k / P(R ≥ k), Δ_k = 0 for k ≥ N.
    `extra` = R − K ~ Geom(p); P(R ≥ k) = (1 − p)^{k−K}. The experts at the first min(K + extra + 1, N)
    permuted training rows must be given."""
    k = min(k, n_data)
    k_values, offsets = roulette_k_values(k, extra, n_data)
    j = nested_j(train_mean, train_precision, ood_mean, ood_precision, q_mean, q_precision, n_data,
                 k_values.to(train_mean.device))
    if offsets.numel() == 0:
        return j[0]
    deltas = j[1:] - j[:-1]
    weights = torch.pow(torch.tensor(1 - p, dtype=j.dtype, device=j.device), -offsets.to(j.device, j.dtype))
    return j[0] + (weights * deltas).sum()


def geometric(p: float, generator: torch.Generator) -> int:
    """G ~ Geom(p) on {0, 1, ...}, P(G ≥ j) = (1 − p)^j, by inversion: ⌊log U / log(1 − p)⌋, U ∈ (0, 1]."""
    if p >= 1:
        return 0
    u = 1 - float(torch.rand((), generator=generator, dtype=torch.float64))
    return int(math.floor(math.log(u) / math.log1p(-p)))


def gaussian_kl_to_standard(mean: Tensor, precision: Tensor) -> Tensor:
    """KL(N(μ, 1/τ) ‖ N(0, 1)) summed over the last axis: ½ Σ (1/τ + μ² − 1 + log τ)."""
    return 0.5 * (1 / precision + mean.square() - 1 + precision.log()).sum(-1)


def spg_log_likelihood(f: Tensor, basis: Tensor, a_mean: Tensor, a_var: Tensor, noise_var: Tensor) -> Tensor:
    """log N(f; Φμ_a, Φ diag(σ_a²) Φᵀ + σ_ν² I) for each row, f [M, m], Φ = basis [m, S], a_mean/a_var
    [M, S], noise_var a scalar: the SPG's f | h with a integrated out, by Woodbury and the determinant lemma in
    dimension S (distillation likelihood, eq. 13), in float64 (a small σ_ν makes the S×S system
    ill-conditioned in float32). Returns [M] in f's dtype."""
    dtype = f.dtype
    f, basis, a_mean, a_var, noise_var = (t.double() for t in (f, basis, a_mean, a_var, noise_var))
    m = f.shape[-1]
    residual = f - a_mean @ basis.T  # [M, m]
    scaled = basis.unsqueeze(0) * a_var.sqrt().unsqueeze(1)  # Φ D^{1/2}, [M, m, S]
    inner = scaled.transpose(1, 2) @ scaled  # D^{1/2} Φᵀ Φ D^{1/2}, [M, S, S]
    eye = torch.eye(basis.shape[1], dtype=f.dtype, device=f.device)
    factor = torch.linalg.cholesky(noise_var * eye + inner)  # σ_ν² I + D^{1/2}ΦᵀΦD^{1/2}
    projected = (scaled.transpose(1, 2) @ residual.unsqueeze(-1))  # [M, S, 1]
    solved = torch.linalg.solve_triangular(factor, projected, upper=False)
    quad = (residual.square().sum(-1) - solved.square().sum((-2, -1))) / noise_var
    # det(σ² I_m + ΦDΦᵀ) = σ^{2(m−S)} det(σ² I_S + D^{1/2}ΦᵀΦD^{1/2})
    log_det = 2 * torch.log(torch.diagonal(factor, dim1=-2, dim2=-1)).sum(-1) + (m - basis.shape[1]) * noise_var.log()
    return (-0.5 * (quad + log_det + m * _LOG_2PI)).to(dtype)
