"""GPVI's helpers learn the Jacobian-inverse products of the exact solve (eq. 10 trained through eq. 11).

A fixed small generator; helpers trained on fresh (z', ∇k) batches with the method's loss; then compared
with P_j = (A_j + λI)^{-T} from torch.linalg.solve on a fresh batch: relative Frobenius error < 5e-2 after
the warm-up (and at least five times that before it, so the comparison can fail).
"""

from __future__ import annotations

import pytest
import torch

from inference_core.methods.generative import gpvi_math
from inference_core.methods.generative.jacobian import GeneratorJacobian
from inference_core.methods.generative.networks import MatrixHelper, PairwiseHelper
from inference_core.samplers.generator import GeneratorNetwork

K_DIM, D_DIM, LAM = 2, 4, 1.0


def small_generator() -> GeneratorNetwork:
    # k = 2 < d = 4 with a tanh hidden layer: a z'-dependent Jacobian and the block form's coupling
    network = GeneratorNetwork(input_dim=K_DIM, hidden=[4], output_dim=D_DIM, activation="tanh", lam=LAM,
                               generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for p in network.parameters():
            p.mul_(1.5)  # a Jacobian well away from the identity
    return network


def draw(network, g, n_expect=16, n=16):
    z_expect = torch.randn(n_expect, network.noise_dim, generator=g)
    z = torch.randn(n, network.noise_dim, generator=g)
    sq = gpvi_math.squared_distances(z_expect, z)
    h = gpvi_math.median_bandwidth(sq, "log_n", n)
    v = gpvi_math.kernel_gradients(torch.exp(-sq / h), z_expect, z, h)
    jac = GeneratorJacobian(network, z_expect)
    return jac, v, gpvi_math.block_rhs(v, K_DIM, LAM, jac.coupling_vjp)


def exact_top(jac, w):
    P = gpvi_math.exact_top_inverse_transpose(jac.top_block(jac.features_jacobian()), LAM)
    return torch.einsum("jab,ijb->ija", P, w), P


def relative_error(a, b) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("kind", ["pairwise", "matrix"])
def test_helper_matches_the_exact_solve_after_warm_up(kind: str) -> None:
    network = small_generator()
    g = torch.Generator().manual_seed(1)
    init = torch.Generator().manual_seed(2)
    helper = PairwiseHelper(K_DIM, 64, 3, init) if kind == "pairwise" else MatrixHelper(K_DIM, 32, 3, init)
    optimizer = torch.optim.Adam(helper.parameters(), lr=1e-3)

    def predict(jac, w):
        if kind == "pairwise":
            return helper(jac.z_prefix.unsqueeze(0).expand(w.shape[0], -1, -1), w)
        return torch.einsum("jab,ijb->ija", helper(jac.z_prefix), w)

    jac, _, w = draw(network, g, 64, 64)
    with torch.no_grad():
        before = relative_error(predict(jac, w), exact_top(jac, w)[0])
    for step in range(3000):
        if step == 2500:  # anneal: the last steps at a tenth of the rate, below the minibatch noise floor
            for group in optimizer.param_groups:
                group["lr"] = 1e-4
        jac, _, w = draw(network, g)
        if kind == "pairwise":
            y, target = predict(jac, w), w
        else:  # the matrix helper is trained on random probes, as in the method
            target = torch.randn(8, jac.z_prefix.shape[0], K_DIM, generator=g)
            y = torch.einsum("jab,qjb->qja", helper(jac.z_prefix), target)
        loss = gpvi_math.helper_loss(gpvi_math.transpose_top_product(y, jac.w_top, LAM, jac.top_vjp()) - target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    jac, v, w = draw(network, g, 64, 64)
    with torch.no_grad():
        exact, _ = exact_top(jac, w)
        learned = predict(jac, w)
    assert before > 0.25  # five times the tolerance
    assert relative_error(learned, exact) < 5e-2
    # and the repulsive term built from it matches the exact one
    assert relative_error(gpvi_math.pairwise_repulsion(learned, v, K_DIM, LAM),
                          gpvi_math.pairwise_repulsion(exact, v, K_DIM, LAM)) < 5e-2


def test_helper_training_never_touches_the_generator() -> None:
    network = small_generator()
    helper = PairwiseHelper(K_DIM, 8, 1, torch.Generator().manual_seed(2))
    jac, _, w = draw(network, torch.Generator().manual_seed(1))
    y = helper(jac.z_prefix.unsqueeze(0).expand(w.shape[0], -1, -1), w)
    gpvi_math.helper_loss(gpvi_math.transpose_top_product(y, jac.w_top, LAM, jac.top_vjp()) - w).backward()
    assert all(p.grad is None for p in network.parameters())
    assert all(p.grad is not None for p in helper.parameters())
