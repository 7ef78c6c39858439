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
