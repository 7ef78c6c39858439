"""Torch implementations of the expression language's matrix operations, batch-correct (compiler.py).

A matrix value is ``[r, c]`` when it does not depend on x and ``[n, r, c]`` (one per particle) when it does;
a vector is ``[L]`` or ``[n, L]``. The shapes were checked by the parser, so only the batching varies here.
Unbatched operands meeting batched ones are arranged so that torch never copies them once per particle
where avoidable (a constant factor solves all the particles' right-hand sides at once).

Nothing here raises on bad numbers: a matrix that is not symmetric positive definite gives NaN (the
factorisation is `cholesky_ex`, which reports instead of raising), which a job treats like any other
parameter outside its domain.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def matvec(matrix: Tensor, vector: Tensor) -> Tensor:
    """matrix [(n,) r, c] @ vector [(n,) c] → [(n,) r]."""
    if matrix.dim() == 2:  # one matrix for all particles: a single matmul with the particles as rows
        return torch.matmul(vector, matrix.mT)
    return torch.matmul(matrix, vector.unsqueeze(-1)).squeeze(-1)


def vecmat(vector: Tensor, matrix: Tensor) -> Tensor:
    """vector [(n,) r] @ matrix [(n,) r, c] → [(n,) c]."""
    if matrix.dim() == 2:
        return torch.matmul(vector, matrix)
    return torch.matmul(vector.unsqueeze(-2), matrix).squeeze(-2)


def sqdist(a: Tensor, b: Tensor, rows: bool) -> Tensor:
    """Squared distances: vectors [(n,) r], [(n,) c] → [(n,) r, c] exactly, (a_i − b_j)²; with `rows`,
    matrices [(n,) r, p], [(n,) c, p] → [(n,) r, c] between their rows."""
    if not rows:
        return torch.square(a.unsqueeze(-1) - b.unsqueeze(-2))
    # |a_i|² + |b_j|² − 2 a_i·b_j holds only r×c numbers (the differences would hold r×c×p); centring both on
    # a's mean first (an exact shift: distances do not change, so it is detached) keeps the cancellation small,
    # as GPyTorch does. Rounding can leave a tiny negative value where a row meets itself: clamped to 0.
    centre = a.detach().mean(-2, keepdim=True)
    a, b = a - centre, b - centre
    cross = torch.matmul(b, a.mT).mT if a.dim() < b.dim() else torch.matmul(a, b.mT)
    squared = a.square().sum(-1).unsqueeze(-1) + b.square().sum(-1).unsqueeze(-2) - 2 * cross
    return squared.clamp_min(0)


def eye(n: int, like: Tensor) -> Tensor:
    return torch.eye(n, dtype=like.dtype, device=like.device)


def diag(value: Tensor, of_matrix: bool) -> Tensor:
    """The diagonal [(n,) m] of a square matrix, or the diagonal matrix [(n,) m, m] of a vector."""
    if of_matrix:
        return torch.diagonal(value, dim1=-2, dim2=-1)
    return torch.diag_embed(value)


def cholesky(matrix: Tensor) -> Tensor:
    """Lower factor of the symmetric part (A + Aᵀ)/2, NaN for every matrix of the batch that is not positive
    definite. The symmetric part (equal to A when A is symmetric) makes the value and autograd's gradient,
    which treats the input as symmetric, belong to the same function."""
    symmetric = 0.5 * (matrix + matrix.mT)
    factor, info = torch.linalg.cholesky_ex(symmetric)
    failed = (info != 0).unsqueeze(-1).unsqueeze(-1)
    return torch.where(failed, torch.full_like(factor, math.nan), factor)


def trisolve(lower: Tensor, b: Tensor, b_is_matrix: bool) -> Tensor:
    """z with L z = b, L [(n,) m, m] lower-triangular (upper triangle not read); b [(n,) m] or [(n,) m, k].
    A zero or NaN on L's diagonal gives inf/NaN, not an exception."""
    if not b_is_matrix:
        if lower.dim() == 2 and b.dim() == 2:  # one L, every particle's b: one solve with n right-hand sides
            return torch.linalg.solve_triangular(lower, b.mT, upper=False).mT
        return torch.linalg.solve_triangular(lower, b.unsqueeze(-1), upper=False).squeeze(-1)
    return torch.linalg.solve_triangular(lower, b, upper=False)


def logdet(matrix: Tensor) -> Tensor:
    """log det of the symmetric part, 2 Σ log L_ii; NaN where it is not positive definite."""
    factor = cholesky(matrix)
    return 2 * torch.log(torch.diagonal(factor, dim1=-2, dim2=-1)).sum(-1)


def log_mvnormal(y: Tensor, mean: Tensor, cov: Tensor) -> Tensor:
    """log N(y; mean, cov) = −½|L⁻¹(y − mean)|² − Σ log L_ii − (m/2) log 2π, L = cholesky(cov); NaN where
    cov is not positive definite. `y` and `mean` are aligned vectors [(n,) m]."""
    factor = cholesky(cov)
    z = trisolve(factor, y - mean, b_is_matrix=False)
    log_diag = torch.log(torch.diagonal(factor, dim1=-2, dim2=-1)).sum(-1)
    return -0.5 * torch.square(z).sum(-1) - log_diag - cov.shape[-1] * _HALF_LOG_2PI
