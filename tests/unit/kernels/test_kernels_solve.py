"""kernel_solve: Cholesky (float64) and matrix-free CG against torch.linalg.solve on an explicit Gram."""

from __future__ import annotations

import pytest
import torch

from inference_core.kernels import IMQ, RBF, kernel_solve

F64 = torch.float64


def problem(n=60, d=3, p=4, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=F64)
    b = torch.randn(n, p, generator=g, dtype=F64)
    return x.to(dtype), b.to(dtype)


def explicit_solve(x, b, kernel, eps):
    x = x.double()
    sq = ((x[:, None] - x[None]) ** 2).sum(-1)
    k = kernel.f(sq) + eps * torch.eye(x.shape[0], dtype=F64)
    return torch.linalg.solve(k, b.double())


@pytest.mark.parametrize("kernel", [RBF(2.0), IMQ(1.0, -0.5, 1.5)], ids=repr)
def test_cholesky_matches_explicit_solve(kernel):
    x, b = problem()
    sol, info = kernel_solve(x, b, kernel, 1e-3, return_info=True)
    torch.testing.assert_close(sol, explicit_solve(x, b, kernel, 1e-3), rtol=1e-9, atol=1e-9)
    assert info.method == "cholesky" and info.converged and info.residual < 1e-10


def test_float32_input_is_solved_in_float64():
    """ε = 1e-5 makes κ ~ 1e6+: an fp32 factorisation would lose everything; ours keeps fp32 round-off."""
    x, b = problem(dtype=torch.float32)
    sol = kernel_solve(x, b, 2.0, 1e-5)
    assert sol.dtype == torch.float32
    ref = explicit_solve(x, b, RBF(2.0), 1e-5)
    assert float((sol.double() - ref).abs().max() / ref.abs().max()) < 1e-5


@pytest.mark.parametrize("backend", ["dense", "chunked"])
def test_cg_matches_cholesky_and_reports(backend):
    x, b = problem(80, 2, 3, seed=1)
    ref = explicit_solve(x, b, RBF(1.0), 1e-2)
    sol, info = kernel_solve(x, b, 1.0, 1e-2, method="cg", tol=1e-10, maxiter=500, backend=backend, return_info=True)
    assert info.method == "cg" and info.converged and 0 < info.iterations <= 500
    assert info.residual <= 1e-10
    torch.testing.assert_close(sol, ref, rtol=1e-7, atol=1e-7)
    # Warm start at the solution: nothing left to do.
    again, info2 = kernel_solve(x, b, 1.0, 1e-2, method="cg", tol=1e-8, x0=sol, return_info=True)
    assert info2.iterations == 0 and info2.converged


def test_cg_reports_non_convergence_instead_of_raising():
    x, b = problem(80, 2, 1, seed=2)
    _, info = kernel_solve(x, b, 1.0, 1e-8, method="cg", tol=1e-12, maxiter=3, return_info=True)
    assert info.iterations == 3 and not info.converged and info.residual > 1e-12


def test_solve_rejects_bad_arguments():
    x, b = problem(10, 2, 1)
    for kwargs in ({"eps": 0.0}, {"eps": -1.0}, {"eps": float("nan")}):
        with pytest.raises(ValueError):
            kernel_solve(x, b, 1.0, **kwargs)
    with pytest.raises(ValueError):
        kernel_solve(x, b, 1.0, 1e-3, method="lu")
    with pytest.raises(ValueError):
        kernel_solve(x, b[:5], 1.0, 1e-3)
    with pytest.raises(ValueError):
        kernel_solve(x, b, 1.0, 1e-3, method="cg", maxiter=0)
