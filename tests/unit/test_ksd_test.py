"""The KSD goodness-of-fit test (metrics/ksd_test.py): the Stein kernel against autograd of the kernel, the
U-statistic against a brute-force double loop, and the test's behaviour — exact draws are accepted at about the
nominal rate, draws with half the spread are rejected."""

from __future__ import annotations

import torch

from inference_core.metrics.ksd_test import ksd_test, stein_kernel_matrix


def imq(x, y, h, c=1.0, beta=-0.5):
    return (c * c + (x - y).square().sum() / h) ** beta


def test_stein_kernel_matches_autograd_of_the_imq_kernel() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 3, generator=g, dtype=torch.float64)
    s = torch.randn(5, 3, generator=g, dtype=torch.float64)
    h = 1.7
    u = stein_kernel_matrix(x, s, h)
    for i in range(5):
        for j in range(5):
            a, b = x[i].clone().requires_grad_(True), x[j].clone().requires_grad_(True)
            k = imq(a, b, h)
            (gx,) = torch.autograd.grad(k, a, create_graph=True)
            (gy,) = torch.autograd.grad(k, b, create_graph=True)
            trace = sum(torch.autograd.grad(gx[m], b, retain_graph=True)[0][m] for m in range(3))
            expected = (s[i] @ s[j]) * k + s[i] @ gy + s[j] @ gx + trace
            assert abs(float(u[i, j]) - float(expected.detach())) < 1e-10


def test_exact_draws_pass_and_collapsed_draws_fail() -> None:
    rejections = 0
    for seed in range(20):
        x = torch.randn(200, 4, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        rejections += ksd_test(x, -x, bootstrap=500, seed=seed)["pvalue"] < 0.05
    assert rejections <= 4  # nominal 5 % of 20 = 1; binomial tail P(≥ 5) ≈ 0.003
    for seed in range(5):
        x = 0.5 * torch.randn(200, 4, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        assert ksd_test(x, -x, bootstrap=500, seed=seed)["pvalue"] < 0.01


def test_markov_chain_weights_hold_the_level_on_a_correlated_chain() -> None:
    """An exact AR(1) chain (ρ = 0.9) of N(0, I): i.i.d. Rademacher weights reject it nearly always (the null
    ignores the autocorrelation; measured 10 of 10 seeds), Markov-chain weights with flip probability 0.05
    (Liu et al. §5) rarely (measured 2 of 10)."""
    rejections = {0.5: 0, 0.05: 0}
    for seed in range(10):
        g = torch.Generator().manual_seed(seed)
        noise = torch.randn(400, 2, generator=g, dtype=torch.float64)
        x = torch.empty_like(noise)
        x[0] = noise[0]
        for t in range(1, 400):
            x[t] = 0.9 * x[t - 1] + (1 - 0.81) ** 0.5 * noise[t]
        for flip in rejections:
            rejections[flip] += ksd_test(x, -x, bootstrap=300, seed=seed, flip_probability=flip)["pvalue"] < 0.05
    assert rejections[0.5] >= 8 and rejections[0.05] <= 4


def test_flip_probability_one_half_is_the_iid_bootstrap() -> None:
    x = torch.randn(100, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert ksd_test(x, -x, seed=3) == ksd_test(x, -x, seed=3, flip_probability=0.5)
