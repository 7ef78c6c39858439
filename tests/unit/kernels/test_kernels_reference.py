"""The dense float64 reference against independent naive computations (explicit loops, autograd, finite
differences) on tiny inputs. Everything else is tested against `dense`, so this is the anchor."""

from __future__ import annotations

import math

import pytest
import torch

from inference_core.kernels import IMQ, RBF, kernel_grad_sum, kernel_matmul, ksd2, mmd2, svgd_direction

F64 = torch.float64


def k_rbf(x, y, h):
    return torch.exp(-((x - y) ** 2).sum() / h)


def k_imq(x, y, c, beta, h):
    return (c * c + ((x - y) ** 2).sum() / h) ** beta


KERNELS = [
    pytest.param(RBF(0.7), lambda x, y: k_rbf(x, y, 0.7), id="rbf"),
    pytest.param(IMQ(1.3, -0.5, 0.9), lambda x, y: k_imq(x, y, 1.3, -0.5, 0.9), id="imq"),
    pytest.param(IMQ(0.5, -1.5, 2.0), lambda x, y: k_imq(x, y, 0.5, -1.5, 2.0), id="imq-steep"),
]


def data(n=6, d=3, seed=0, offset=0.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64) + offset
    s = torch.randn(n, d, generator=g, dtype=torch.float64)
    return x, s


@pytest.mark.parametrize(("kernel", "k"), KERNELS)
def test_kernel_matmul_matches_double_loop(kernel, k):
    x, _ = data(5, 3)
    y = torch.randn(4, 3, generator=torch.Generator().manual_seed(1), dtype=F64) * 2
    v = torch.randn(4, 2, generator=torch.Generator().manual_seed(2), dtype=F64)
    naive = torch.zeros(5, 2, dtype=F64)
    for i in range(5):
        for j in range(4):
            naive[i] += k(x[i], y[j]) * v[j]
    torch.testing.assert_close(kernel_matmul(x, y, v, kernel, backend="dense"), naive, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(kernel_matmul(x, y, v, kernel, backend="chunked"), naive, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(("kernel", "k"), KERNELS)
def test_svgd_direction_matches_autograd_loop(kernel, k):
    """φ(x_i) = (1/n) Σ_j [k(x_j, x_i) s_j + ∇_{x_j} k(x_j, x_i)], ∇ by autograd on each pair."""
    x, s = data()
    n = x.shape[0]
    naive = torch.zeros_like(x)
    grad_sum = torch.zeros_like(x)
    for i in range(n):
        for j in range(n):
            xj = x[j].clone().requires_grad_(True)
            kij = k(xj, x[i])
            (gj,) = torch.autograd.grad(kij, xj)
            naive[i] += kij.detach() * s[j] + gj
            grad_sum[i] += gj
    naive /= n
    torch.testing.assert_close(svgd_direction(x, s, kernel, backend="dense"), naive, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(kernel_grad_sum(x, kernel, backend="dense"), grad_sum, rtol=1e-12, atol=1e-14)


def test_rbf_gradient_matches_finite_differences():
    """∇_{x_j} k(x_j, x_i) = (2/h) k_ij (x_i - x_j), by central differences, summed over j."""
    x, _ = data(5, 2, seed=3)
    h, eps = 0.8, 1e-6
    fd = torch.zeros_like(x)
    for i in range(5):
        for j in range(5):
            for a in range(2):
                e = torch.zeros(2, dtype=F64)
                e[a] = eps
                fd[i, a] += (k_rbf(x[j] + e, x[i], h) - k_rbf(x[j] - e, x[i], h)) / (2 * eps)
    torch.testing.assert_close(kernel_grad_sum(x, h, backend="dense"), fd, rtol=1e-7, atol=1e-9)
    # Sign convention of the docstring: the repulsion is -∇_{x_i} Σ_j k(x_i, x_j).
    xi = x.clone().requires_grad_(True)
    total = sum(k_rbf(xi[i], x[j], h) for i in range(5) for j in range(5))
    (g,) = torch.autograd.grad(total, xi)
    torch.testing.assert_close(kernel_grad_sum(x, h, backend="dense"), -g, rtol=1e-12, atol=1e-14)


def stein_kernel_naive(k, x, y, sx, sy):
    """u_p(x, y) = sxᵀ k sy + sxᵀ ∇_y k + syᵀ ∇_x k + tr ∇_x ∇_y k, all by autograd."""
    d = x.shape[0]
    xr = x.clone().requires_grad_(True)
    yr = y.clone().requires_grad_(True)
    kxy = k(xr, yr)
    gx, gy = torch.autograd.grad(kxy, (xr, yr), create_graph=True)
    trace = sum(torch.autograd.grad(gx[a], yr, retain_graph=True)[0][a] for a in range(d))
    return kxy.detach() * (sx @ sy) + sx @ gy.detach() + sy @ gx.detach() + trace.detach()


@pytest.mark.parametrize(("kernel", "k"), KERNELS)
def test_ksd2_matches_autograd_stein_kernel(kernel, k):
    x, s = data(5, 3, seed=4)
    n = 5
    u = torch.zeros(n, n, dtype=F64)
    for i in range(n):
        for j in range(n):
            u[i, j] = stein_kernel_naive(k, x[i], x[j], s[i], s[j])
    v_stat = u.sum() / n**2
    u_stat = (u.sum() - u.diagonal().sum()) / (n * (n - 1))
    for backend in ("dense", "chunked"):
        torch.testing.assert_close(ksd2(x, s, kernel, False, backend=backend), v_stat, rtol=1e-11, atol=1e-13)
        torch.testing.assert_close(ksd2(x, s, kernel, True, backend=backend), u_stat, rtol=1e-11, atol=1e-13)


def test_ksd2_of_exact_gaussian_sample_is_small_and_of_wrong_one_is_not():
    """Behaviour, not algebra: KSD separates samples of p = N(0, I) from a shifted cloud."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(400, 2, generator=g, dtype=F64)
    good = ksd2(x, -x, IMQ(), True, backend="dense")
    y = x + 1.0
    bad = ksd2(y, -y, IMQ(), True, backend="dense")
    assert abs(float(good)) < 0.01 < float(bad)


@pytest.mark.parametrize(("kernel", "k"), KERNELS)
def test_mmd2_matches_double_loop(kernel, k):
    x, _ = data(5, 2, seed=6)
    y = torch.randn(4, 2, generator=torch.Generator().manual_seed(7), dtype=F64) + 0.5

    def mean_k(a, b, skip_diag):
        vals = [k(a[i], b[j]) for i in range(len(a)) for j in range(len(b)) if not (skip_diag and i == j)]
        return sum(vals) / len(vals)

    v_stat = mean_k(x, x, False) + mean_k(y, y, False) - 2 * mean_k(x, y, False)
    u_stat = mean_k(x, x, True) + mean_k(y, y, True) - 2 * mean_k(x, y, False)
    for backend in ("dense", "chunked"):
        torch.testing.assert_close(mmd2(x, y, kernel, False, backend=backend), v_stat, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(mmd2(x, y, kernel, True, backend=backend), u_stat, rtol=1e-12, atol=1e-14)


def test_single_particle_direction_is_its_score():
    x, s = data(1, 4)
    for backend in ("dense", "chunked"):
        torch.testing.assert_close(svgd_direction(x, s, 1.0, backend=backend), s)


def test_rbf_is_not_the_2h2_convention():
    """h divides r² directly: exp(-r²/h), not exp(-r²/(2h²))."""
    x = torch.tensor([[0.0], [1.0]], dtype=F64)
    val = kernel_matmul(x[:1], x[1:], torch.ones(1, 1, dtype=F64), 2.0, backend="dense")
    assert math.isclose(float(val), math.exp(-0.5), rel_tol=1e-14)
