"""Every particle direction against an independent float64 reference written naively here (explicit loops,
dense matrices, autograd on single pairs, numpy solves, finite differences) on tiny inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from methods_support import F64, grad_first, gram, imq, rbf, stein_kernel

from inference_core.kernels import IMQ, RBF, svgd_direction
from inference_core.methods.directions import gfsf_direction, svgd_direction_two_batch
from inference_core.methods.directions import svgd_direction as weighted_svgd_direction
from inference_core.methods.kernel_sums import cross_median_bandwidth, stein_kernel_matrix
from inference_core.methods.pisgld import pisgld_direction
from inference_core.methods.speedups import (
    adagrad_momentum_ascent,
    control_functional_weights,
    induced_ksd,
    induced_points_repulsion,
    induced_svgd_direction,
    subset_svgd_direction,
)
from inference_core.methods.wsgld import wsgld_direction

KERNELS = [
    pytest.param(RBF(0.8), rbf(0.8), id="rbf"),
    pytest.param(IMQ(1.2, -0.5, 0.7), imq(1.2, -0.5, 0.7), id="imq"),
]


def cloud(n: int, d: int = 3, seed: int = 0, offset: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=F64) + offset
    s = torch.randn(n, d, generator=g, dtype=F64)
    return x, s


# ---------------------------------------------------------------------------------------- naive versions


def naive_svgd(k, x, s):
    n = x.shape[0]
    out = torch.zeros_like(x)
    for i in range(n):
        for j in range(n):
            out[i] += k(x[j], x[i]) * s[j] + grad_first(k, x[j], x[i])
    return out / n


def naive_gfsf(k, x, s, eps):
    n = x.shape[0]
    K = gram(k, x, x).detach().numpy()
    R = np.zeros(tuple(x.shape))
    for i in range(n):
        for j in range(n):
            R[i] += grad_first(k, x[j], x[i]).numpy()
    return s.numpy() + np.linalg.solve(K + eps * np.eye(n), R)


def naive_wsgld(k, x, s):
    """f-POVI Table 1: s_i + Σ_j ∇_{x_j}K_ji / Σ_k K_jk + Σ_j ∇_{x_j}K_ji / Σ_k K_ik."""
    n = x.shape[0]
    K = gram(k, x, x).detach()
    rows = K.sum(1)
    out = s.clone()
    for i in range(n):
        for j in range(n):
            g = grad_first(k, x[j], x[i])
            out[i] += g / rows[j] + g / rows[i]
    return out


def naive_subset(k, x, y, sy, w):
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        for j in range(y.shape[0]):
            out[i] += w[j] * (k(y[j], x[i]) * sy[j] + grad_first(k, y[j], x[i]))
    return out


def naive_induced(k, x, s, y):
    """Kang eq. 13: φ(x') = (1/m) Σ_j k(x', y_j) (1/n) Σ_i [k(x_i, y_j) s_i + ∇_{x_i} k(x_i, y_j)]."""
    n, m = x.shape[0], y.shape[0]
    a = torch.zeros(m, x.shape[1], dtype=F64)
    for j in range(m):
        for i in range(n):
            a[j] += (k(x[i], y[j]) * s[i] + grad_first(k, x[i], y[j])) / n
    out = torch.zeros_like(x)
    for p in range(n):
        for j in range(m):
            out[p] += k(x[p], y[j]) * a[j] / m
    return out


def naive_induced_ksd(k, x, s, y, u_statistic):
    """(1/(n(n−1)m)) Σ_j Σ_{i≠i'} ξ_ij·ξ_i'j (or the V-statistic), ξ_ij = k(x_i,y_j)s_i + ∇_{x_i}k(x_i,y_j)."""
    n, m = x.shape[0], y.shape[0]
    xi = [[k(x[i], y[j]).detach() * s[i] + grad_first(k, x[i], y[j]) for j in range(m)] for i in range(n)]
    total = 0.0
    for j in range(m):
        for i in range(n):
            for q in range(n):
                if u_statistic and i == q:
                    continue
                total += float(xi[i][j] @ xi[q][j])
    return total / (n * (n - 1) * m) if u_statistic else total / (n * n * m)


# ----------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize(("kernel", "k"), KERNELS)
def test_svgd_direction_with_the_method_kernel(kernel, k) -> None:
    x, s = cloud(7, offset=40.0)  # far from the origin: the library centres, the naive loop does not need to
    torch.testing.assert_close(svgd_direction(x, s, kernel, backend="chunked"), naive_svgd(k, x, s),
                               rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize(("kernel", "k"), KERNELS)
def test_gfsf_direction(kernel, k) -> None:
    x, s = cloud(8)
    phi, residual = gfsf_direction(x, s, kernel, 1e-3)
    np.testing.assert_allclose(phi.numpy(), naive_gfsf(k, x, s, 1e-3), rtol=1e-7, atol=1e-8)
    assert residual < 1e-10


@pytest.mark.parametrize(("kernel", "k"), KERNELS)
def test_wsgld_direction_is_table_1(kernel, k) -> None:
    x, s = cloud(7, offset=-25.0)
    torch.testing.assert_close(wsgld_direction(x, s, kernel), naive_wsgld(k, x, s), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize(("kernel", "k"), KERNELS)
def test_pisgld_is_the_average_of_wsgld_and_svgd(kernel, k) -> None:
    x, s = cloud(6, seed=3)
    expected = 0.5 * (naive_wsgld(k, x, s) + naive_svgd(k, x, s))
    torch.testing.assert_close(pisgld_direction(x, s, kernel), expected, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize(("kernel", "k"), KERNELS)
def test_subset_direction_given_the_subset(kernel, k) -> None:
    x, s = cloud(9, seed=1, offset=12.0)
    index = torch.tensor([7, 2, 4])
    y, sy = x[index], s[index]
    expected = naive_subset(k, x, y, sy, torch.full((3,), 1 / 3, dtype=F64))
    torch.testing.assert_close(subset_svgd_direction(x, y, sy, kernel), expected, rtol=1e-9, atol=1e-10)
    # With every particle in the subset it is SVGD.
    torch.testing.assert_close(subset_svgd_direction(x, x, s, kernel), naive_svgd(k, x, s), rtol=1e-9, atol=1e-10)


def numpy_cf_weights(k0: np.ndarray, lambda_min: float = 1e-8, max_condition: float = 1e11):
    """Kang Alg. 3 / notes §3, re-typed in numpy: λ search with np.linalg.cond, solve with λmI."""
    m = k0.shape[0]
    lam = lambda_min
    while np.linalg.cond(k0 + lam * np.eye(m)) >= max_condition:
        lam *= 10
    inv_ones = np.linalg.solve(k0 + lam * m * np.eye(m), np.ones(m))
    v = inv_ones / (1 + inv_ones.sum())
    return v / v.sum(), lam


@pytest.mark.parametrize(("kernel", "k"), KERNELS)
def test_stein_kernel_matrix_and_control_functional_weights(kernel, k) -> None:
    x, s = cloud(9, seed=2)
    index = torch.tensor([0, 3, 5, 8])
    y, sy = x[index], s[index]
    k0 = stein_kernel_matrix(y, sy, kernel)
    naive = torch.stack([torch.stack([stein_kernel(k, y[i], y[j], sy[i], sy[j]) for j in range(4)])
                         for i in range(4)])
    torch.testing.assert_close(k0, naive, rtol=1e-9, atol=1e-10)
    weights, lam = control_functional_weights(k0)
    expected, expected_lam = numpy_cf_weights(naive.numpy())
    assert lam == pytest.approx(expected_lam, rel=1e-12)
    np.testing.assert_allclose(weights.numpy(), expected, rtol=1e-8, atol=1e-10)
    assert float(weights.sum()) == pytest.approx(1.0, abs=1e-12)
    # ... and the CF direction is the weighted subset sum with those weights.
    phi = subset_svgd_direction(x, y, sy, kernel, weights)
    torch.testing.assert_close(phi, naive_subset(k, x, y, sy, torch.as_tensor(expected)), rtol=1e-8, atol=1e-9)


def test_control_functional_lambda_search_moves_up_for_a_singular_matrix() -> None:
    # Two identical points make K₀ singular, large scores make its top eigenvalue ~1e6: λ = 1e-8 gives
    # cond ~1e14, so λ must rise until cond(K₀ + λI) < 1e11.
    y = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.5]], dtype=F64)
    s = torch.tensor([[100.0, 200.0], [100.0, 200.0], [-300.0, 400.0]], dtype=F64)
    k0 = stein_kernel_matrix(y, s, RBF(1.0))
    weights, lam = control_functional_weights(k0)
    expected, expected_lam = numpy_cf_weights(k0.numpy())
    assert lam == pytest.approx(expected_lam) and lam > 1e-8
    # cond(K₀ + λmI) is up to ~1e10 here: two LAPACK solves agree to ~1e-16 × cond.
    np.testing.assert_allclose(weights.numpy(), expected, rtol=1e-5)


@pytest.mark.parametrize(("kernel", "k"), KERNELS)
def test_induced_direction_is_eq_13(kernel, k) -> None:
    x, s = cloud(8, seed=4, offset=5.0)
    y = x[torch.tensor([1, 6, 3])] + 0.1
    torch.testing.assert_close(induced_svgd_direction(x, s, y, kernel), naive_induced(k, x, s, y),
                               rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("u_statistic", [True, False])
@pytest.mark.parametrize(("kernel", "k"), KERNELS)
def test_induced_ksd_against_the_pair_sum(kernel, k, u_statistic) -> None:
    x, s = cloud(6, seed=5)
    y = torch.randn(3, 3, generator=torch.Generator().manual_seed(9), dtype=F64)
    value = induced_ksd(x, s, y, kernel, u_statistic=u_statistic)
    assert float(value) == pytest.approx(naive_induced_ksd(k, x, s, y, u_statistic), rel=1e-9, abs=1e-12)


def test_adversarial_objective_gradients_against_finite_differences() -> None:
    """∂U/∂Y and ∂U/∂log h by autograd (what the method ascends) against central differences."""
    x, s = cloud(7, seed=6)
    y = torch.randn(4, 3, generator=torch.Generator().manual_seed(1), dtype=F64)
    log_h = torch.tensor(math.log(0.9), dtype=F64)

    def objective(yv: torch.Tensor, lh: torch.Tensor) -> torch.Tensor:
        return induced_ksd(x, s, yv, RBF(lh.exp()))

    yv = y.clone().requires_grad_(True)
    lh = log_h.clone().requires_grad_(True)
    grad_y, grad_h = torch.autograd.grad(objective(yv, lh), [yv, lh])
    step = 1e-6
    fd_y = torch.zeros_like(y)
    for j in range(4):
        for c in range(3):
            e = torch.zeros_like(y)
            e[j, c] = step
            fd_y[j, c] = (objective(y + e, log_h) - objective(y - e, log_h)) / (2 * step)
    fd_h = (objective(y, log_h + step) - objective(y, log_h - step)) / (2 * step)
    torch.testing.assert_close(grad_y, fd_y, rtol=1e-6, atol=1e-9)
    assert float(grad_h) == pytest.approx(float(fd_h), rel=1e-6)
    assert abs(float(grad_h)) > 1e-3  # the test is not vacuous


def test_induced_points_repulsion_gradient_is_eq_16() -> None:
    y = torch.randn(5, 2, generator=torch.Generator().manual_seed(2), dtype=F64)
    yv = y.clone().requires_grad_(True)
    alpha, h = 0.1, 0.6
    (grad,) = torch.autograd.grad(induced_points_repulsion(yv, RBF(h), alpha), yv)
    k = rbf(h)
    expected = torch.zeros_like(y)
    for j in range(5):
        for q in range(5):
            expected[j] -= alpha / 5 * grad_first(k, y[j], y[q])  # −α (1/m) Σ_k ∇_{y_j} k(y_j, y_k)
    torch.testing.assert_close(grad, expected, rtol=1e-10, atol=1e-12)


def test_adagrad_momentum_ascent_matches_the_reference_loop() -> None:
    rng = np.random.default_rng(0)
    grads = [rng.normal(size=(3, 2)) for _ in range(4)]
    param = np.zeros((3, 2))
    hist = None
    p = torch.zeros(3, 2, dtype=F64)
    h = None
    for it, g in enumerate(grads):
        hist = g**2 if it == 0 else 0.9 * hist + 0.1 * g**2
        param = param + 0.1 * g / (1e-6 + np.sqrt(hist))
        p, h = adagrad_momentum_ascent(p, torch.as_tensor(g), h, 0.1, 0.9, 1e-6)
    np.testing.assert_allclose(p.numpy(), param, rtol=1e-12)


def test_cross_median_bandwidth_is_the_median_of_the_n_by_m_distances_over_log_n_plus_1() -> None:
    x, _ = cloud(10, d=2, seed=7, offset=300.0)
    y = x[torch.tensor([2, 5, 9])]
    dists = np.array([[float(((a - b) ** 2).sum()) for b in y] for a in x])
    assert float(cross_median_bandwidth(x, y)) == pytest.approx(np.median(dists) / math.log(11), rel=1e-9)
    assert float(cross_median_bandwidth(x, y, "none")) == pytest.approx(np.median(dists), rel=1e-9)
    assert float(cross_median_bandwidth(x[:1], x[:1])) == 1.0  # median 0 → h = 1


# ---------------------------------------------------------------------- directions with an entropy weight


def naive_two_batch(k, x, y, sy, entropy_weight):
    """(1/m) Σ_j [k(y_j, x_i) s(y_j) + ent · ∇_{y_j} k(y_j, x_i)] (GPVI eq. 13 over an independent batch)."""
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        for j in range(y.shape[0]):
            out[i] += k(y[j], x[i]) * sy[j] + entropy_weight * grad_first(k, y[j], x[i])
    return out / y.shape[0]


@pytest.mark.parametrize("reuse_distances", [True, False])
@pytest.mark.parametrize(("kernel", "k"), KERNELS)
def test_two_batch_svgd_direction(kernel, k, reuse_distances) -> None:
    x, _ = cloud(6, seed=11, offset=2.0)
    y, sy = cloud(5, seed=12, offset=2.5)
    sq = ((y[:, None, :] - x[None, :, :]) ** 2).sum(-1) if reuse_distances else None  # [m, n]
    phi = svgd_direction_two_batch(x, y, sy, kernel, entropy_weight=0.3, sq=sq, backend="chunked")
    torch.testing.assert_close(phi, naive_two_batch(k, x, y, sy, 0.3), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("entropy_weight", [1.0, 0.4])
@pytest.mark.parametrize(("kernel", "k"), KERNELS)
def test_one_batch_svgd_direction_with_an_entropy_weight(kernel, k, entropy_weight) -> None:
    x, s = cloud(7, seed=13, offset=20.0)
    phi = weighted_svgd_direction(x, s, kernel, entropy_weight=entropy_weight, backend="chunked")
    torch.testing.assert_close(phi, naive_two_batch(k, x, x, s, entropy_weight), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize(("kernel", "k"), KERNELS)
def test_gfsf_direction_with_an_entropy_weight(kernel, k) -> None:
    x, s = cloud(8, seed=14)
    phi, _ = gfsf_direction(x, s, kernel, 1e-3, entropy_weight=0.25)
    expected = s.numpy() + 0.25 * (naive_gfsf(k, x, s, 1e-3) - s.numpy())
    np.testing.assert_allclose(phi.numpy(), expected, rtol=1e-7, atol=1e-8)


def test_the_former_import_paths_name_the_shared_functions() -> None:
    """Other modules import these by their former paths; they must be the one implementation, not copies."""
    from inference_core.kernels.bandwidth import distance_median
    from inference_core.methods import directions, gfsf, optim, pisgld, speedups, wsgld
    from inference_core.methods.generative import gpvi_math, optimizers
    from inference_core.methods.generative.base import GenerativeMethod
    from inference_core.methods.generative.networks import MLP as GenerativeMLP
    from inference_core.networks import ACTIVATIONS, MLP
    from inference_core.samplers import ACTIVATIONS as SAMPLER_ACTIVATIONS
    from inference_core.targets.models import network

    assert gfsf.gfsf_direction is directions.gfsf_direction
    assert wsgld.wsgld_direction is directions.wsgld_direction
    assert pisgld.pisgld_direction is directions.pisgld_direction
    assert speedups.adagrad_momentum_ascent is optim.adagrad_momentum_ascent
    assert (optimizers.make_optimizer, optimizers.optimizer_step, optimizers.zero_grads) == (
        optim.make_optimizer, optim.optimizer_step, optim.zero_grads)
    assert GenerativeMLP is MLP and network.ACTIVATION_FUNCTIONS is ACTIVATIONS is SAMPLER_ACTIVATIONS
    assert network.MLP is not MLP  # the batched-over-weight-vectors network is a different thing
    assert callable(GenerativeMethod.apply_direction) and callable(GenerativeMethod.pullback)
    assert gpvi_math.distance_median is distance_median
