"""The optional KeOps backend against the float64 dense reference (skipped unless pykeops is importable;
its first call compiles for ~10 s per formula)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("pykeops")

from inference_core.kernels import IMQ, RBF, kernel_grad_sum, kernel_matmul, svgd_direction  # noqa: E402


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kernel", [RBF(3.0), IMQ(1.0, -0.5, 2.0)], ids=repr)
def test_keops_matches_dense(kernel):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 3, generator=g)
    s = torch.randn(50, 3, generator=g)
    y = torch.randn(20, 3, generator=g) + 0.5
    v = torch.randn(20, 2, generator=g)

    def rel(a, b):
        return float((a.double() - b).abs().max() / b.abs().max())

    assert rel(kernel_matmul(x, y, v, kernel, backend="keops"),
               kernel_matmul(x.double(), y.double(), v.double(), kernel, backend="dense")) < 1e-5  # fmt: skip
    assert rel(svgd_direction(x, s, kernel, backend="keops"),
               svgd_direction(x.double(), s.double(), kernel, backend="dense")) < 1e-5  # fmt: skip
    assert rel(kernel_grad_sum(x, kernel, backend="keops"), kernel_grad_sum(x.double(), kernel, backend="dense")) < 1e-5
