"""GPVI's functional-gradient pieces against independent references (full D×D Jacobians by autograd and
per-pair solves, explicit loops, numpy). The amortised methods' directions are those of the particle methods
(methods.directions), tested in tests/unit/methods/test_methods_directions.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.func import jacrev, vmap

from inference_core.methods.generative import gpvi_math
from inference_core.methods.generative.jacobian import GeneratorJacobian
from inference_core.samplers.generator import GeneratorNetwork

# (hidden, k, d, λ): linear and nonlinear g; k = d with λ = 0 (no λ term) and with λ > 0; k < d with the
# coupling factorised through the features (m ≤ D − k) and through B (m > D − k).
CASES = [([], 3, 3, 0.0), ([6, 5], 3, 3, 0.0), ([4], 3, 3, 0.8), ([], 2, 5, 0.7), ([7], 2, 6, 0.9), ([3], 2, 9, 0.5)]


def make_network(hidden, k, d, lam, seed=3) -> GeneratorNetwork:
    network = GeneratorNetwork(input_dim=k, hidden=hidden, output_dim=d, activation="tanh", lam=lam,
                               generator=torch.Generator().manual_seed(seed)).double()
    with torch.no_grad():
        for p in network.parameters():
            p.mul_(3.0)  # non-trivial Jacobians
    return network


def batches(network, n=7, n_expect=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    D = network.noise_dim
    return (torch.randn(n, D, generator=g, dtype=torch.float64),
            torch.randn(n_expect, D, generator=g, dtype=torch.float64))


def full_jacobians(network, z_expect):
    return vmap(jacrev(lambda u: network(u.unsqueeze(0)).squeeze(0)))(z_expect)


@pytest.mark.parametrize(("hidden", "k", "d", "lam"), CASES)
def test_block_form_equals_the_full_solve(hidden, k, d, lam) -> None:
    network = make_network(hidden, k, d, lam)
    z, z_expect = batches(network)
    h = 1.3
    reference = gpvi_math.full_solve_repulsion(full_jacobians(network, z_expect), z, z_expect, h)
    jac = GeneratorJacobian(network, z_expect)
    P = gpvi_math.exact_top_inverse_transpose(jac.top_block(jac.features_jacobian()), lam)
    K = torch.exp(-gpvi_math.squared_distances(z_expect, z) / h)
    v = gpvi_math.kernel_gradients(K, z_expect, z, h)
    w = gpvi_math.block_rhs(v, k, lam, jac.coupling_vjp if network.noise_dim > k else None)
    y_top = torch.einsum("jab,ijb->ija", P, w)
    torch.testing.assert_close(gpvi_math.pairwise_repulsion(y_top, v, k, lam), reference, atol=1e-10, rtol=1e-9)
    # the exact top block solves the helper's residual (eq. 10 → 0)
    residual = gpvi_math.transpose_top_product(y_top, jac.w_top, lam, jac.top_vjp()) - w
    assert float(residual.abs().max()) < 1e-10


@pytest.mark.parametrize(("hidden", "k", "d", "lam"), CASES)
def test_kernel_matmul_reduction_equals_the_full_solve(hidden, k, d, lam) -> None:
    network = make_network(hidden, k, d, lam)
    z, z_expect = batches(network, n=9, n_expect=6, seed=1)
    h = 0.9
    reference = gpvi_math.full_solve_repulsion(full_jacobians(network, z_expect), z, z_expect, h)
    jac = GeneratorJacobian(network, z_expect)
    features_jacobian = jac.features_jacobian()
    P = gpvi_math.exact_top_inverse_transpose(jac.top_block(features_jacobian), lam)
    coupling = jac.coupling_factors(features_jacobian, z, z_expect) if network.noise_dim > k else None
    score = torch.randn(6, d, dtype=torch.float64)
    drive, repulsion = gpvi_math.matrix_direction(z, z_expect, score, h, P, lam, coupling, entropy_weight=0.5)
    torch.testing.assert_close(repulsion, 0.5 * reference, atol=1e-10, rtol=1e-9)
    K = torch.exp(-gpvi_math.squared_distances(z_expect, z) / h)
    torch.testing.assert_close(drive, gpvi_math.driving_term(K, score), atol=1e-12, rtol=1e-10)


def test_the_inverse_is_transposed() -> None:
    """J^{-T}∇k, not J^{-1}∇k: for a non-symmetric linear generator the two differ, and ours is the former."""
    network = make_network([], 3, 3, 0.0)
    W = network.output.weight.detach()
    assert float((W - W.T).abs().max()) > 0.1
    z, z_expect = batches(network)
    K = torch.exp(-gpvi_math.squared_distances(z_expect, z) / 1.0)
    v = gpvi_math.kernel_gradients(K, z_expect, z, 1.0)
    wrong = torch.linalg.solve(W, v.unsqueeze(-1)).squeeze(-1).mean(1)
    right = torch.linalg.solve(W.T, v.unsqueeze(-1)).squeeze(-1).mean(1)
    ref = gpvi_math.full_solve_repulsion(full_jacobians(network, z_expect), z, z_expect, 1.0).detach()
    torch.testing.assert_close(ref, right)
    assert float((ref - wrong).abs().max()) > 1e-3


def test_transpose_top_product_is_the_vjp_of_the_top_block() -> None:
    network = make_network([5], 3, 7, 0.6)
    _, z_expect = batches(network)
    jac = GeneratorJacobian(network, z_expect)
    y = torch.randn(4, 5, 3, dtype=torch.float64)
    full = full_jacobians(network, z_expect)  # [n', d, D]
    expected = torch.einsum("jab,qja->qjb", full[:, :3, :3], y)  # (A + λI)ᵀ y
    torch.testing.assert_close(gpvi_math.transpose_top_product(y, jac.w_top, 0.6, jac.top_vjp()), expected)
    c = torch.randn(4, 5, 4, dtype=torch.float64)
    torch.testing.assert_close(jac.coupling_vjp(c), torch.einsum("jab,qja->qjb", full[:, 3:, :3], c))


def test_kernel_gradients_match_autograd() -> None:
    g = torch.Generator().manual_seed(4)
    z, z_expect, h = torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(5, 3, generator=g,
                                                                                         dtype=torch.float64), 0.7
    K = torch.exp(-gpvi_math.squared_distances(z_expect, z) / h)
    v = gpvi_math.kernel_gradients(K, z_expect, z, h)
    for j in range(5):
        for i in range(4):
            a = z_expect[j].clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(torch.exp(-(a - z[i]).square().sum() / h), a)
            torch.testing.assert_close(v[i, j], grad)


def test_median_bandwidth_matches_numpy() -> None:
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(8, 3, generator=g, dtype=torch.float64), torch.randn(6, 3, generator=g, dtype=torch.float64)
    cross = ((a.numpy()[:, None] - b.numpy()[None]) ** 2).sum(-1)
    assert gpvi_math.median_bandwidth(gpvi_math.squared_distances(a, b), "log_n", 8) == pytest.approx(
        np.median(cross) / np.log(8), rel=1e-10)
    own = ((a.numpy()[:, None] - a.numpy()[None]) ** 2).sum(-1)[np.triu_indices(8, 1)]
    assert gpvi_math.median_bandwidth(gpvi_math.squared_distances(a, a), "log_n_squared", 8, distinct_pairs=True) == \
        pytest.approx(np.median(own) / (2 * np.log(8)), rel=1e-10)
    assert gpvi_math.median_bandwidth(torch.zeros(3, 3), "log_n", 3) == 1.0


@pytest.mark.parametrize("activation", ["relu", "tanh", "sigmoid", "softplus", "elu", "leaky_relu", "silu", "gelu"])
def test_features_jacobian_matches_autograd_for_every_activation(activation: str) -> None:
    network = GeneratorNetwork(input_dim=3, hidden=[5, 4], output_dim=6, activation=activation, lam=1.0,
                               generator=torch.Generator().manual_seed(1)).double()
    _, z_expect = batches(network)
    jac = GeneratorJacobian(network, z_expect)
    expected = vmap(jacrev(lambda u: network.features(u.unsqueeze(0)).squeeze(0)))(z_expect[:, :3])
    torch.testing.assert_close(jac.features_jacobian(), expected)
    torch.testing.assert_close(jac.top_block(jac.features_jacobian()), full_jacobians(network, z_expect)[:, :3, :3]
                               - torch.eye(3, dtype=torch.float64))
