"""`chunked` (fp32, one block and many) against the float64 `dense` reference; the offset test; autograd."""

from __future__ import annotations

import pytest
import torch

from inference_core.kernels import (
    IMQ,
    RBF,
    kernel_grad_sum,
    kernel_matmul,
    ksd2,
    median_heuristic,
    mmd2,
    svgd_direction,
)

F64 = torch.float64
SMALL_BUDGET = 4096  # forces many row blocks (and checkpointing under autograd)
FP32_TOL = 1e-5


def rel_err(a, b):
    """max |a - b| / max |b|: error relative to the scale of the reference output."""
    return float((a.double() - b).abs().max() / b.abs().max())


def cloud(n, d, seed, offset=0.0, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    x = (offset + spread * torch.randn(n, d, generator=g, dtype=F64)).float()
    s = torch.randn(n, d, generator=g, dtype=F64).float()
    return x, s


def kernels_for(x):
    h = median_heuristic(x.double())
    return [RBF(float(h)), IMQ(1.0, -0.5, float(h))]


SHAPES = [(2, 1), (37, 2), (37, 7), (130, 33), (61, 300)]


@pytest.mark.parametrize(("n", "d"), SHAPES)
@pytest.mark.parametrize("budget", [None, SMALL_BUDGET], ids=["one-block", "many-blocks"])
def test_chunked_svgd_and_grad_sum_match_float64_dense(n, d, budget):
    x, s = cloud(n, d, seed=n + d)
    for kernel in kernels_for(x):
        ref = svgd_direction(x.double(), s.double(), kernel, backend="dense")
        ours = svgd_direction(x, s, kernel, backend="chunked", memory_budget=budget)
        assert ours.dtype == torch.float32
        assert rel_err(ours, ref) < FP32_TOL
        ref = kernel_grad_sum(x.double(), kernel, backend="dense")
        ours = kernel_grad_sum(x, kernel, backend="chunked", memory_budget=budget)
        assert rel_err(ours, ref) < FP32_TOL


@pytest.mark.parametrize(("n", "m", "d", "p"), [(37, 5, 3, 1), (5, 90, 2, 4), (130, 61, 33, 3), (40, 70, 300, 2)])
@pytest.mark.parametrize("budget", [None, SMALL_BUDGET], ids=["one-block", "many-blocks"])
def test_chunked_kernel_matmul_with_y_not_x(n, m, d, p, budget):
    x, _ = cloud(n, d, seed=1)
    y, _ = cloud(m, d, seed=2, offset=0.3)
    v = torch.randn(m, p, generator=torch.Generator().manual_seed(3))
    for kernel in kernels_for(torch.cat([x, y])):
        ref = kernel_matmul(x.double(), y.double(), v.double(), kernel, backend="dense")
        ours = kernel_matmul(x, y, v, kernel, backend="chunked", memory_budget=budget)
        assert ours.shape == (n, p)
        assert rel_err(ours, ref) < FP32_TOL


@pytest.mark.parametrize(("n", "d"), [(37, 2), (130, 33), (61, 300)])
@pytest.mark.parametrize("unbiased", [False, True])
def test_chunked_ksd2_and_mmd2_match_float64_dense(n, d, unbiased):
    x, s = cloud(n, d, seed=7)
    y, _ = cloud(n // 2 + 3, d, seed=8, offset=0.2)
    for kernel in kernels_for(x):
        for budget in (None, SMALL_BUDGET):
            ref = ksd2(x.double(), s.double(), kernel, unbiased, backend="dense")
            ours = ksd2(x, s, kernel, unbiased, backend="chunked", memory_budget=budget)
            assert abs(float(ours) - float(ref)) < FP32_TOL * abs(float(ref))
            ref = mmd2(x.double(), y.double(), kernel, unbiased, backend="dense")
            ours = mmd2(x, y, kernel, unbiased, backend="chunked", memory_budget=budget)
            # MMD² is a difference of O(1) means: its error is relative to those, not to itself.
            assert abs(float(ours) - float(ref)) < FP32_TOL


def test_offset_cloud_stays_accurate_where_cdist_fails():
    """Particles at 1e3 with spread 1e-2 (notes §2): centring keeps fp32 accurate; cdist's GEMM path does not."""
    x, s = cloud(200, 3, seed=11, offset=1e3, spread=1e-2)
    x64 = x.double()
    h = median_heuristic(x64)
    ref = svgd_direction(x64, s.double(), h, backend="dense")
    for budget in (None, SMALL_BUDGET):
        ours = svgd_direction(x, s, float(h), backend="chunked", memory_budget=budget)
        assert rel_err(ours, ref) < 1e-4
    assert rel_err(svgd_direction(x, s, float(h), backend="dense"), ref) < 1e-4
    # Our bandwidth from fp32 particles matches the float64 one too.
    assert abs(float(median_heuristic(x)) / float(h) - 1) < 1e-4

    # The same direction from torch.cdist (matmul form on raw particles) is garbage.
    dist = torch.cdist(x, x, compute_mode="use_mm_for_euclid_dist") ** 2
    k = torch.exp(-dist / float(h))
    naive = (k @ s + (2 / float(h)) * (x * k.sum(1, keepdim=True) - k @ x)) / x.shape[0]
    assert rel_err(naive, ref) > 0.1
    true_dist = ((x64[:, None] - x64[None]) ** 2).sum(-1)
    assert float((dist.double() - true_dist).abs().max() / true_dist.max()) > 1.0


def test_float64_chunked_matches_dense_to_roundoff():
    x, s = cloud(90, 5, seed=12)
    x, s = x.double(), s.double()
    for kernel in kernels_for(x):
        a = svgd_direction(x, s, kernel, backend="chunked", memory_budget=SMALL_BUDGET)
        b = svgd_direction(x, s, kernel, backend="dense")
        assert rel_err(a, b) < 1e-12


def test_bf16_precision_has_a_stated_looser_bound():
    x, s = cloud(80, 6, seed=13)
    kernel = kernels_for(x)[0]
    ref = svgd_direction(x.double(), s.double(), kernel, backend="dense")
    ours = svgd_direction(x, s, kernel, backend="chunked", precision="bf16")
    assert rel_err(ours, ref) < 3e-2
    # tf32 has no meaning on a CPU: identical to ieee there.
    torch.testing.assert_close(
        svgd_direction(x, s, kernel, backend="chunked", precision="tf32"),
        svgd_direction(x, s, kernel, backend="chunked"),
        rtol=0,
        atol=0,
    )


# ---- autograd (ksd2/mmd2 are optimised w.r.t. induced points Y and log h by later methods) ----


def _grads(fn, *tensors):
    out = fn(*tensors)
    return torch.autograd.grad(out, tensors)


@pytest.mark.parametrize("kernel_kind", ["rbf", "imq"])
def test_chunked_gradients_match_dense_float64(kernel_kind):
    x, s = cloud(45, 4, seed=14)
    y, _ = cloud(23, 4, seed=15, offset=0.4)

    def make(log_h):
        h = log_h.exp()
        return RBF(h) if kernel_kind == "rbf" else IMQ(1.0, -0.5, h)

    def losses(backend, dtype, budget):
        xx = x.to(dtype).requires_grad_(True)
        yy = y.to(dtype).requires_grad_(True)
        ss = s.to(dtype).requires_grad_(True)
        log_h = torch.tensor(1.2, dtype=dtype, requires_grad=True)
        kw = {"backend": backend, "memory_budget": budget}
        val = (
            mmd2(xx, yy, make(log_h), True, **kw)
            + ksd2(xx, ss, make(log_h), False, **kw)
            + (svgd_direction(xx, ss, make(log_h), **kw) ** 2).sum()
        )
        return torch.autograd.grad(val, (xx, yy, ss, log_h))

    ref = losses("dense", F64, None)
    for budget in (None, SMALL_BUDGET):
        ours = losses("chunked", torch.float32, budget)
        for a, b in zip(ours, ref, strict=True):
            assert rel_err(a, b) < 2e-5


def test_gradcheck_chunked_float64_many_blocks():
    g = torch.Generator().manual_seed(16)
    x = torch.randn(9, 2, generator=g, dtype=F64, requires_grad=True)
    y = torch.randn(7, 2, generator=g, dtype=F64, requires_grad=True)
    s = torch.randn(9, 2, generator=g, dtype=F64, requires_grad=True)
    log_h = torch.tensor(0.3, dtype=F64, requires_grad=True)
    budget = 512  # one row per block: 9 checkpointed blocks

    def f(x, y, s, log_h):
        kernel = IMQ(1.0, -0.5, log_h.exp())
        return (
            mmd2(x, y, RBF(log_h.exp()), True, backend="chunked", memory_budget=budget),
            ksd2(x, s, kernel, True, backend="chunked", memory_budget=budget),
            kernel_matmul(x, y, y, RBF(log_h.exp()), backend="chunked", memory_budget=budget),
        )

    assert torch.autograd.gradcheck(f, (x, y, s, log_h))
