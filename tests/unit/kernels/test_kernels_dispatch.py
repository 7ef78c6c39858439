"""Backend selection rules, the environment override, and argument validation (ValueError, never assert)."""

from __future__ import annotations

import pytest
import torch

from inference_core.kernels import (
    BACKEND_ENV,
    IMQ,
    dispatch,
    kernel_grad_sum,
    kernel_matmul,
    ksd2,
    mmd2,
    resolve_backend,
    svgd_direction,
)

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def resolve(backend="auto", device=CPU, d=10, dtype=torch.float32, grad=False, precision="ieee"):
    return resolve_backend(backend, device=device, d=d, dtype=dtype, grad=grad, precision=precision)


def test_auto_rules(monkeypatch):
    monkeypatch.delenv(BACKEND_ENV, raising=False)
    assert resolve() == "chunked"
    assert resolve(d=1) == "chunked"
    monkeypatch.setattr(dispatch, "triton_available", lambda: True)
    # The rule table on CUDA (pure logic: no GPU needed to decide).
    assert resolve(device=CUDA, d=16) == "triton"
    assert resolve(device=CUDA, d=17) == "chunked"
    assert resolve(device=CUDA, d=16, precision="tf32") == "triton"
    assert resolve(device=CUDA, d=64, precision="bf16") == "chunked"
    assert resolve(device=CUDA, d=8, grad=True) == "chunked"
    assert resolve(device=CUDA, d=8, dtype=torch.float64) == "chunked"
    # The fused kernels index in int32: huge operands go to chunked.
    assert resolve_backend("auto", device=CUDA, d=2, dtype=torch.float32, grad=False, precision="ieee",
                           elements=2**31) == "chunked"  # fmt: skip
    monkeypatch.setattr(dispatch, "triton_available", lambda: False)
    assert resolve(device=CUDA, d=8) == "chunked"


def test_environment_override(monkeypatch):
    monkeypatch.setenv(BACKEND_ENV, "dense")
    assert resolve() == "dense"
    assert resolve(backend="chunked") == "chunked"  # an explicit backend wins
    monkeypatch.setenv(BACKEND_ENV, "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert resolve() == "chunked"  # cannot serve CPU tensors: falls back to the auto rule
    monkeypatch.setenv(BACKEND_ENV, "fastest")
    with pytest.raises(ValueError, match=BACKEND_ENV):
        resolve()


def test_environment_override_reaches_the_primitives(monkeypatch):
    calls = []
    real = dispatch.dense.stein_sums
    monkeypatch.setattr(dispatch.dense, "stein_sums", lambda *a: calls.append(1) or real(*a))
    x = torch.randn(5, 2)
    svgd_direction(x, x, 1.0)
    assert calls == []
    monkeypatch.setenv(BACKEND_ENV, "dense")
    svgd_direction(x, x, 1.0)
    assert calls == [1]


def test_explicit_backends_refuse_what_they_cannot_do(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError):
        resolve(backend="fast")
    if dispatch.triton_available():
        with pytest.raises(ValueError, match="CUDA"):
            resolve(backend="triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(dispatch, "triton_available", lambda: True)
    with pytest.raises(ValueError, match="forward-only"):
        resolve(backend="triton", grad=True)
    with pytest.raises(ValueError, match="float32"):
        resolve(backend="triton", dtype=torch.float64)
    monkeypatch.setattr(dispatch, "keops_available", lambda: False)
    with pytest.raises(ValueError, match="pykeops"):
        resolve(backend="keops")


def test_bad_arguments_raise_value_error():
    x = torch.randn(6, 3)
    s = torch.randn(6, 3)
    bad_calls = [
        lambda: svgd_direction(x[0], s, 1.0),
        lambda: svgd_direction(x, s[:, :2], 1.0),
        lambda: svgd_direction(x, s[:4], 1.0),
        lambda: svgd_direction(x, s.double(), 1.0),
        lambda: svgd_direction(x, None, 1.0),
        lambda: svgd_direction(x.long(), s, 1.0),
        lambda: svgd_direction(torch.empty(0, 3), torch.empty(0, 3), 1.0),
        lambda: svgd_direction(x, s, -1.0),
        lambda: svgd_direction(x, s, "median"),
        lambda: svgd_direction(x, s, 1.0, precision="fp8"),
        lambda: svgd_direction(x, s, 1.0, backend="gpu"),
        lambda: svgd_direction(x, s, 1.0, memory_budget=0),
        lambda: kernel_matmul(x, torch.randn(4, 2), torch.randn(4, 1), 1.0),
        lambda: kernel_matmul(x, torch.randn(4, 3), torch.randn(5, 1), 1.0),
        lambda: kernel_matmul(x, torch.randn(4, 3).double(), torch.randn(4, 1), 1.0),
        lambda: kernel_grad_sum(x, IMQ(1.0, 0.1)),
        lambda: mmd2(x, x[:1], 1.0, True),
        lambda: ksd2(x[:1], s[:1], 1.0, True),
        lambda: ksd2(x, s[:, :1], 1.0, False),
    ]
    for call in bad_calls:
        with pytest.raises(ValueError):
            call()


def test_y_none_and_y_is_x_are_the_same_matrix():
    x = torch.randn(7, 2, dtype=torch.float64)
    v = torch.randn(7, 3, dtype=torch.float64)
    a = kernel_matmul(x, None, v, 0.5)
    b = kernel_matmul(x, x, v, 0.5)
    c = kernel_matmul(x, x.clone(), v, 0.5)
    assert torch.equal(a, b)
    torch.testing.assert_close(a, c, rtol=1e-13, atol=1e-14)
