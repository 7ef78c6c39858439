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
from inference_core.schemas.generative import HELPER_LAYERS, HelperOptions

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
    # the matrix helper as GPVI builds it by default (32 wide, HELPER_LAYERS deep)
    helper = (PairwiseHelper(K_DIM, 64, 3, init) if kind == "pairwise"
              else MatrixHelper(K_DIM, HelperOptions().hidden_width, HELPER_LAYERS["matrix"], init))
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
            loss = gpvi_math.helper_loss(gpvi_math.transpose_top_product(predict(jac, w), jac.w_top, LAM,
                                                                         jac.top_vjp()) - w)
            optimizer.zero_grad()
            loss.backward()
        else:  # as in the method: random probes, the analytic gradient
            probes = torch.randn(8, jac.z_prefix.shape[0], K_DIM, generator=g)
            system = gpvi_math.top_system(jac.top_block(jac.features_jacobian()), LAM)
            _, grad_P = gpvi_math.matrix_helper_loss(system, helper(jac.z_prefix), probes)
            helper.backward_into_grad(grad_P)
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


def test_matrix_helper_loss_gradient_matches_autograd() -> None:
    g = torch.Generator().manual_seed(3)
    n_expect, k, q, lam = 5, 3, 4, 0.7
    A = torch.randn(n_expect, k, k, generator=g, dtype=torch.float64)
    P = torch.randn(n_expect, k, k, generator=g, dtype=torch.float64, requires_grad=True)
    probes = torch.randn(q, n_expect, k, generator=g, dtype=torch.float64)
    # reference: the residual written per probe, (A_j + λI)ᵀ (P_j r) − r, differentiated by autograd
    y = torch.einsum("jab,qjb->qja", P, probes)
    residual = torch.einsum("jab,qja->qjb", A, y) + lam * y - probes
    reference = residual.square().mean()
    (reference_grad,) = torch.autograd.grad(reference, P)
    loss, grad_P = gpvi_math.matrix_helper_loss(gpvi_math.top_system(A, lam), P.detach(), probes)
    torch.testing.assert_close(loss, reference.detach(), rtol=1e-12, atol=0)
    torch.testing.assert_close(grad_P, reference_grad, rtol=1e-10, atol=1e-14)


def test_flat_relu_mlp_backward_matches_autograd() -> None:
    from inference_core.methods.generative.networks import MLP, FlatReluMLP

    widths = [3, 7, 5, 4]
    flat = FlatReluMLP(widths, torch.Generator().manual_seed(4)).double()
    reference = MLP(widths, "relu", torch.Generator().manual_seed(4)).double()  # same layer-by-layer init draws
    for layer, (weight, bias) in zip(reference.layers, flat.layers(), strict=True):
        torch.testing.assert_close(layer.weight.detach(), weight.detach(), rtol=0, atol=0)
        torch.testing.assert_close(layer.bias.detach(), bias.detach(), rtol=0, atol=0)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(9, 3, generator=g, dtype=torch.float64)
    upstream = torch.randn(9, 4, generator=g, dtype=torch.float64)
    out = reference(x)
    (out * upstream).sum().backward()
    torch.testing.assert_close(flat(x), out.detach(), rtol=1e-12, atol=1e-14)
    flat.flat.grad = torch.full_like(flat.flat, 7.0)  # overwritten, not accumulated
    flat.backward_into_grad(upstream)
    for layer, (grad_weight, grad_bias) in zip(reference.layers, flat.layers(flat.flat.grad), strict=True):
        torch.testing.assert_close(grad_weight, layer.weight.grad, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(grad_bias, layer.bias.grad, rtol=1e-12, atol=1e-14)


def test_matrix_helper_starts_at_the_identity() -> None:
    helper = MatrixHelper(3, 8, 2, torch.Generator().manual_seed(6))
    z = torch.randn(4, 3, generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(helper(z), torch.eye(3).expand(4, 3, 3), rtol=0, atol=0)


def test_pairwise_helper_is_positively_homogeneous_in_w() -> None:
    # it sees w/‖w‖ and scales by ‖w‖, as the exact map (A + λI)^{-T} w is linear; w = 0 gives exactly 0
    helper = PairwiseHelper(3, 8, 2, torch.Generator().manual_seed(8)).double()
    g = torch.Generator().manual_seed(9)
    z = torch.randn(5, 3, generator=g, dtype=torch.float64)
    w = torch.randn(5, 3, generator=g, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(helper(z, 1e-6 * w), 1e-6 * helper(z, w), rtol=1e-12, atol=0)
        torch.testing.assert_close(helper(z, 37.0 * w), 37.0 * helper(z, w), rtol=1e-12, atol=0)
        assert bool((helper(z, torch.zeros_like(w)) == 0).all())
        assert not torch.allclose(helper(z, -w), -helper(z, w))  # homogeneous, not linear: it is still learned


def test_flat_relu_mlp_cached_views_follow_the_parameter() -> None:
    """The forward/backward reuse their weight views while the storage is the same: an in-place update must
    show, and a new storage (dtype change, a fresh grad buffer) must rebuild them."""
    from inference_core.methods.generative.networks import MLP, FlatReluMLP

    widths = [2, 6, 3]
    flat = FlatReluMLP(widths, torch.Generator().manual_seed(8)).double()
    reference = MLP(widths, "relu", torch.Generator().manual_seed(8)).double()
    x = torch.randn(5, 2, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    flat(x)  # builds the cache
    with torch.no_grad():
        flat.flat.mul_(2.0)
        for layer in reference.layers:
            layer.weight.mul_(2.0)
            layer.bias.mul_(2.0)
    torch.testing.assert_close(flat(x), reference(x).detach(), rtol=1e-12, atol=1e-14)
    flat.float()
    assert flat(x.float()).dtype == torch.float32
    torch.testing.assert_close(flat(x.float()), reference(x).detach().float(), rtol=1e-5, atol=1e-6)
    upstream = torch.ones(5, 3)
    flat.backward_into_grad(upstream)
    first = flat.flat.grad.clone()
    flat.flat.grad = None  # a fresh buffer: the gradient views must point at it
    flat.backward_into_grad(upstream)
    torch.testing.assert_close(flat.flat.grad, first, rtol=0, atol=0)
