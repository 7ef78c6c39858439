"""Kernel property tests (DESIGN.md): symmetry, k(x, x) = 1 for RBF, PSD Gram, monotone in the bandwidth."""

from __future__ import annotations

import pytest
import torch

from inference_core.kernels import IMQ, RBF, as_kernel, kernel_matmul

F64 = torch.float64


def gram(x, kernel, backend):
    return kernel_matmul(x, None, torch.eye(x.shape[0], dtype=x.dtype), kernel, backend=backend)


def points(n=40, d=3, offset=0.0, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return (offset + torch.randn(n, d, generator=g, dtype=F64)).to(dtype)


KERNELS = [RBF(0.5), RBF(7.0), IMQ(), IMQ(0.3, -1.2, 2.0)]


@pytest.mark.parametrize("kernel", KERNELS, ids=repr)
@pytest.mark.parametrize("backend", ["dense", "chunked"])
def test_gram_is_symmetric_and_psd(kernel, backend):
    k = gram(points(), kernel, backend)
    torch.testing.assert_close(k, k.T, rtol=1e-14, atol=1e-15)
    assert float(torch.linalg.eigvalsh(k).min()) > -1e-10


@pytest.mark.parametrize("backend", ["dense", "chunked"])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_rbf_diagonal_is_exactly_one_even_far_from_the_origin(backend, dtype):
    x = points(offset=1e4, dtype=dtype)
    k = gram(x, RBF(1e-3), backend)
    assert torch.equal(k.diagonal(), torch.ones(x.shape[0], dtype=dtype))
    k_imq = gram(x, IMQ(2.0, -0.5), backend)
    torch.testing.assert_close(k_imq.diagonal(), torch.full((x.shape[0],), 0.5, dtype=dtype), rtol=1e-6, atol=0)


@pytest.mark.parametrize("backend", ["dense", "chunked"])
def test_kernel_values_in_unit_interval_and_monotone_in_bandwidth(backend):
    x = points(30, 4, seed=1)
    hs = [0.1, 0.5, 2.0, 10.0]
    for make in (RBF, lambda h: IMQ(1.0, -0.5, h)):
        grams = [gram(x, make(h), backend) for h in hs]
        for small, large in zip(grams, grams[1:], strict=False):
            assert bool((small <= large).all())
            off = ~torch.eye(30, dtype=torch.bool)
            assert bool((small[off] < large[off]).all())
        assert bool(((grams[0] > 0) & (grams[-1] <= 1)).all())


def test_kernel_decreases_with_distance():
    x = torch.tensor([[0.0], [0.5], [1.0], [3.0]], dtype=F64)
    for kernel in (RBF(1.0), IMQ()):
        row = gram(x, kernel, "dense")[0]
        assert bool((row[:-1] > row[1:]).all())


def test_invalid_kernel_parameters_raise_value_error():
    for bad in (0.0, -1.0, float("nan"), float("inf"), True):
        with pytest.raises(ValueError):
            RBF(bad)
    with pytest.raises(ValueError):
        RBF(torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="beta"):
        IMQ(1.0, 0.5)
    with pytest.raises(ValueError):
        IMQ(0.0, -0.5)
    with pytest.raises(ValueError):
        as_kernel("rbf")
    assert as_kernel(2.0) == RBF(2.0)
