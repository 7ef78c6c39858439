"""FVI's objective against independent references: log Z̃ (eq. 19) against a numerical integral, the SPG
likelihood by Woodbury against a dense multivariate normal, the PoE statistics, and the Russian-roulette
estimator's mean against the full J_N (Prop. 7)."""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import integrate, stats

from inference_core.methods.fvi import objective


def test_log_z_tilde_matches_a_numerical_integral_in_1d() -> None:
    for q_mean, q_std, lam_mean, lam_std in [(0.3, 0.7, -0.4, 0.5), (1.5, 0.2, 0.9, 0.9), (0.0, 1.0, 2.0, 0.3)]:
        def integrand(h: float, qm: float = q_mean, qs: float = q_std, lm: float = lam_mean,
                      ls: float = lam_std) -> float:
            return stats.norm.pdf(h, lm, ls) * stats.norm.pdf(h, qm, qs) / stats.norm.pdf(h, 0.0, 1.0)
        reference = math.log(integrate.quad(integrand, -30, 30, points=[q_mean, lam_mean], limit=200)[0])
        ours = objective.log_z_tilde(torch.tensor([q_mean], dtype=torch.float64),
                                     torch.tensor([q_std**-2], dtype=torch.float64),
                                     torch.tensor([lam_mean], dtype=torch.float64),
                                     torch.tensor([lam_std**-2], dtype=torch.float64))
        assert abs(float(ours) - reference) < 1e-8, (ours, reference)


def test_log_z_tilde_is_zero_when_q_is_the_prior_and_sums_dimensions() -> None:
    lam_mean, lam_precision = torch.randn(3, dtype=torch.float64), 1 + torch.rand(3, dtype=torch.float64)
    zero = objective.log_z_tilde(torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64),
                                 lam_mean, lam_precision)
    assert abs(float(zero)) < 1e-12  # ∫ q̃ p₀/p₀ = 1
    q_mean, q_precision = torch.randn(3, dtype=torch.float64), 0.5 + torch.rand(3, dtype=torch.float64)
    total = objective.log_z_tilde(q_mean, q_precision, lam_mean, lam_precision)
    parts = sum(objective.log_z_tilde(q_mean[i:i + 1], q_precision[i:i + 1], lam_mean[i:i + 1],
                                      lam_precision[i:i + 1]) for i in range(3))
    assert abs(float(total - parts)) < 1e-12


def test_product_of_experts_matches_the_gaussian_product() -> None:
    mean, precision = torch.randn(4, 2, dtype=torch.float64), torch.rand(4, 2, dtype=torch.float64) + 0.1
    weight = torch.tensor([2.0, 2.0, 1.0, 1.0], dtype=torch.float64)
    mu, tau = objective.product_of_experts(mean, precision, weight)
    # Independent: the log of Π N(h; μ_i, 1/τ_i)^{w_i} · N(h; 0, 1) is a quadratic; read its coefficients.
    h = torch.linspace(-1, 1, 3, dtype=torch.float64)
    for d in range(2):
        log_density = (-0.5 * h**2 + (weight[:, None] * (-0.5 * precision[:, d:d + 1]
                                                         * (h[None] - mean[:, d:d + 1]) ** 2)).sum(0)).numpy()
        a, b, _ = np.polyfit(h.numpy(), log_density, 2)
        assert abs(-2 * a - float(tau[d])) < 1e-9 and abs(b / (-2 * a) - float(mu[d])) < 1e-9


def test_spg_log_likelihood_matches_a_dense_normal() -> None:
    g = torch.Generator().manual_seed(0)
    M, m, S = 3, 7, 4
    f = torch.randn(M, m, generator=g, dtype=torch.float64)
    basis = torch.randn(m, S, generator=g, dtype=torch.float64)
    a_mean = torch.randn(M, S, generator=g, dtype=torch.float64)
    a_var = torch.rand(M, S, generator=g, dtype=torch.float64) + 0.1
    noise_var = torch.tensor(0.3, dtype=torch.float64)
    ours = objective.spg_log_likelihood(f, basis, a_mean, a_var, noise_var)
    for i in range(M):
        cov = basis @ torch.diag(a_var[i]) @ basis.T + noise_var * torch.eye(m, dtype=torch.float64)
        dense = stats.multivariate_normal(mean=(basis @ a_mean[i]).numpy(), cov=cov.numpy()).logpdf(f[i].numpy())
        assert abs(float(ours[i]) - dense) < 1e-9
    # fewer points than bases (m < S): the determinant lemma still holds
    few = objective.spg_log_likelihood(f[:, :2], basis[:2], a_mean, a_var, noise_var)
    cov = basis[:2] @ torch.diag(a_var[0]) @ basis[:2].T + noise_var * torch.eye(2, dtype=torch.float64)
    dense = stats.multivariate_normal(mean=(basis[:2] @ a_mean[0]).numpy(), cov=cov.numpy()).logpdf(f[0, :2].numpy())
    assert abs(float(few[0]) - dense) < 1e-9


def test_russian_roulette_estimate_is_unbiased_for_the_full_j() -> None:
    """Mean over many (permutation, R) draws of the debiased estimate = J_N; J_K alone is biased."""
    g = torch.Generator().manual_seed(3)
    N, H, K, p = 12, 2, 3, 0.5
    train_mean = torch.randn(N, H, generator=g, dtype=torch.float64)
    train_precision = 0.05 + 0.3 * torch.rand(N, H, generator=g, dtype=torch.float64)
    ood_mean = torch.randn(2, H, generator=g, dtype=torch.float64)
    ood_precision = torch.rand(2, H, generator=g, dtype=torch.float64)
    q_mean = torch.tensor([0.4, -0.3], dtype=torch.float64)
    q_precision = torch.tensor([3.0, 1.5], dtype=torch.float64)
    full = objective.nested_j(train_mean, train_precision, ood_mean, ood_precision, q_mean, q_precision, N,
                              torch.tensor([N]))[0]
    # the full J_N by its definition: all N points with weight 1, plus the OOD points
    mu, tau = objective.product_of_experts(torch.cat([train_mean, ood_mean]), torch.cat([train_precision,
                                                                                         ood_precision]))
    assert abs(float(full - objective.log_z_tilde(q_mean, q_precision, mu, tau))) < 1e-12
    draws, biased = [], []
    for _ in range(10000):
        order = torch.randperm(N, generator=g)
        extra = objective.geometric(p, g)
        draws.append(float(objective.debiased_j(train_mean[order], train_precision[order], ood_mean,
                                                ood_precision, q_mean, q_precision, N, K, extra, p)))
        biased.append(float(objective.nested_j(train_mean[order], train_precision[order], ood_mean, ood_precision,
                                               q_mean, q_precision, N, torch.tensor([K]))[0]))
    draws_np = np.array(draws)
    standard_error = draws_np.std() / math.sqrt(len(draws))
    assert abs(draws_np.mean() - float(full)) < 4 * standard_error, (draws_np.mean(), float(full), standard_error)
    assert abs(np.mean(biased) - float(full)) > 10 * np.std(biased) / math.sqrt(len(biased))


def test_geometric_draws_have_the_stated_tail() -> None:
    g = torch.Generator().manual_seed(5)
    draws = np.array([objective.geometric(0.3, g) for _ in range(20000)])
    for j in (0, 1, 3):
        assert abs((draws >= j).mean() - 0.7**j) < 0.015
