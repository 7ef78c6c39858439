"""kernel_solve: (K + εI)⁻¹ B for the Gram matrix K = K(X, X) (GFSF / Blob; docs/implementation-notes.md, "Pairwise kernels", GFSF solve).

* `cholesky` (default up to `cholesky_max_n` = 8192 particles): the Gram matrix in float64, then
  `torch.linalg.cholesky` + `cholesky_solve`. Never an fp32 inverse: with ε ~ 1e-5 the condition number can
  exceed 1e8. Differentiable through torch.
* `cg`: matrix-free block conjugate gradient, one column per right-hand side, each matvec a `kernel_matmul`
  pass (fused/chunked), so memory stays O(n·p). Unpreconditioned; iterations grow like √κ, so cap them and
  read the reported residual. Runs without autograd (forward only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from inference_core.kernels import chunked, dense
from inference_core.kernels.common import centre, check_points, check_rows, resolve_memory_budget
from inference_core.kernels.dispatch import kernel_matmul
from inference_core.kernels.functions import KernelLike, as_kernel

SOLVE_METHODS: tuple[str, ...] = ("auto", "cholesky", "cg")
CHOLESKY_MAX_N = 8192


@dataclass(frozen=True)
class SolveInfo:
    """How a solve went: `residual` = max over columns of ||(K + εI)x - b|| / ||b|| (float64 check for
    Cholesky, the CG recurrence's residual for CG), `iterations` (0 for Cholesky)."""

    method: str
    iterations: int
    residual: float
    converged: bool


def _gram_float64(X: Tensor, kernel, backend: str, budget: int) -> Tensor:
    xc, _ = centre(X.to(torch.float64))
    dist = dense.sq_dists(xc, xc, budget) if backend == "dense" else chunked.sq_dists(xc, xc, True, budget)
    return kernel.f(dist)


def kernel_solve(
    X: Tensor,
    B: Tensor,
    h: KernelLike,
    eps: float,
    *,
    method: str = "auto",
    backend: str = "auto",
    precision: str = "ieee",
    tol: float = 1e-6,
    maxiter: int | None = None,
    x0: Tensor | None = None,
    cholesky_max_n: int = CHOLESKY_MAX_N,
    memory_budget: int | None = None,
    return_info: bool = False,
) -> Tensor | tuple[Tensor, SolveInfo]:
    """(K(X, X) + eps·I)⁻¹ B for B [n, p], in B's dtype. With `return_info=True` returns (solution, SolveInfo).

    `method="auto"`: Cholesky in float64 up to `cholesky_max_n` particles, CG beyond. CG stops when every
    column's relative residual is below `tol` or after `maxiter` (default max(100, 10·√n)) iterations, from
    `x0` (warm start) or zero; `backend`/`precision` choose its matvec. A non-converged CG does not raise:
    check `info.converged`.
    """
    kernel = as_kernel(h)
    check_points("X", X)
    n = X.shape[0]
    check_rows("B", B, n, like=X)
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not (0 < eps < math.inf):
        raise ValueError(f"eps must be a finite number > 0, got {eps!r}")
    if method not in SOLVE_METHODS:
        raise ValueError(f"method must be one of {SOLVE_METHODS}, got {method!r}")
    if not (isinstance(tol, int | float) and 0 < tol < 1):
        raise ValueError(f"tol must be in (0, 1), got {tol!r}")
    if maxiter is not None and (isinstance(maxiter, bool) or not isinstance(maxiter, int) or maxiter < 1):
        raise ValueError(f"maxiter must be a positive integer, got {maxiter!r}")
    if x0 is not None:
        check_rows("x0", x0, n, like=X)
        if x0.shape != B.shape:
            raise ValueError(f"x0 must have the shape of B {tuple(B.shape)}, got {tuple(x0.shape)}")
    budget = resolve_memory_budget(memory_budget)
    if method == "auto":
        method = "cholesky" if n <= cholesky_max_n else "cg"
    if method == "cholesky":
        gram = _gram_float64(X, kernel, backend, budget)
        system = gram + eps * torch.eye(n, dtype=torch.float64, device=X.device)
        factor, status = torch.linalg.cholesky_ex(system)
        if int(status) != 0:
            raise ValueError(f"K + eps·I is not numerically positive definite (eps={eps}); increase eps")
        b64 = B.to(torch.float64)
        sol = torch.cholesky_solve(b64, factor)
        if not return_info:
            return sol.to(B.dtype)
        with torch.no_grad():
            res = _relative_residual(system @ sol - b64, b64)
        return sol.to(B.dtype), SolveInfo("cholesky", 0, res, True)
    sol, iterations, res = _conjugate_gradient(
        X, B, kernel, eps, tol, maxiter or max(100, int(10 * math.sqrt(n))), x0, backend, precision, budget
    )
    info = SolveInfo("cg", iterations, res, res <= tol)
    return (sol, info) if return_info else sol


def _relative_residual(r: Tensor, b: Tensor) -> float:
    bn = b.norm(dim=0).clamp_min(torch.finfo(b.dtype).tiny)
    return float((r.norm(dim=0) / bn).max())


@torch.no_grad()
def _conjugate_gradient(
    X: Tensor,
    B: Tensor,
    kernel,
    eps: float,
    tol: float,
    maxiter: int,
    x0: Tensor | None,
    backend: str,
    precision: str,
    budget: int,
) -> tuple[Tensor, int, float]:
    """Independent CG per column (Hestenes & Stiefel 1952), all columns sharing each kernel pass."""
    X = X.detach()

    def matvec(p: Tensor) -> Tensor:
        return kernel_matmul(X, None, p, kernel, backend=backend, precision=precision, memory_budget=budget) + eps * p

    b = B.detach()
    x = torch.zeros_like(b) if x0 is None else x0.detach().clone()
    r = b - matvec(x) if x0 is not None else b.clone()
    p = r.clone()
    rr = (r * r).sum(0)
    bnorm = b.norm(dim=0).clamp_min(torch.finfo(b.dtype).tiny)
    iterations = 0
    while iterations < maxiter and not bool(((rr.sqrt() / bnorm) <= tol).all()):
        ap = matvec(p)
        pap = (p * ap).sum(0)
        # Converged columns have r = 0 and p = 0; guard their 0/0.
        alpha = torch.where(pap > 0, rr / torch.where(pap > 0, pap, torch.ones_like(pap)), torch.zeros_like(rr))
        x = x + alpha * p
        r = r - alpha * ap
        rr_new = (r * r).sum(0)
        beta = torch.where(rr > 0, rr_new / torch.where(rr > 0, rr, torch.ones_like(rr)), torch.zeros_like(rr))
        p = r + beta * p
        rr = rr_new
        iterations += 1
    return x, iterations, float((rr.sqrt() / bnorm).max())
