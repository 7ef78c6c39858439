"""`dense` backend: the float64-capable reference, built from direct differences x_i - y_j.

Every n×m quantity is materialised once; the differences themselves are formed over blocks of features
so that only an [n, m, f] slab exists at a time. No Gram (||x||² + ||y||² - 2x·y) form anywhere, so the
result carries no cancellation whatever the offset of the cloud. Slow (O(nmd) elementwise work) and
memory-hungry (n·m entries): a reference and a small-n path, never the default.

Inputs are already centred by `dispatch`; all functions return unnormalised sums over j.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from inference_core.kernels.functions import Kernel


def _feature_blocks(n: int, m: int, d: int, itemsize: int, budget: int) -> Iterator[slice]:
    """Slices of features so that two [n, m, f] slabs fit in the budget (at least one feature)."""
    step = max(1, min(d, budget // max(1, 2 * n * m * itemsize)))
    for start in range(0, d, step):
        yield slice(start, min(d, start + step))


def sq_dists(x: Tensor, y: Tensor, budget: int) -> Tensor:
    """D_ij = Σ_f (x_if - y_jf)², accumulated over feature blocks of direct differences."""
    n, d = x.shape
    m = y.shape[0]
    out = x.new_zeros(n, m)
    for f in _feature_blocks(n, m, d, x.element_size(), budget):
        diff = x[:, None, f] - y[None, :, f]
        out = out + (diff * diff).sum(-1)
    return out


def _weighted_differences(w: Tensor, x: Tensor, y: Tensor, budget: int) -> Tensor:
    """Σ_j w_ij (x_i - y_j), with the differences formed explicitly (never x_i Σw - Σ w y)."""
    n, d = x.shape
    m = y.shape[0]
    parts = []
    for f in _feature_blocks(n, m, d, x.element_size(), budget):
        diff = x[:, None, f] - y[None, :, f]
        parts.append(torch.einsum("ij,ijf->if", w, diff))
    return torch.cat(parts, dim=1)


def kernel_matmul(x: Tensor, y: Tensor, v: Tensor, kernel: Kernel, budget: int) -> Tensor:
    """K(x, y) v."""
    return kernel.f(sq_dists(x, y, budget)) @ v


def stein_sums(x: Tensor, score: Tensor | None, kernel: Kernel, budget: int) -> Tensor:
    """Σ_j [k(x_j, x_i) s_j + ∇_{x_j} k(x_j, x_i)] = Σ_j [k_ij s_j + g_ij (x_i - x_j)], g = -2 f'(r²).

    With `score=None` only the repulsive sum (the GFSF term) is returned.
    """
    k, g = kernel.f_and_g(sq_dists(x, x, budget))
    repulsion = _weighted_differences(g, x, x, budget)
    return repulsion if score is None else k @ score + repulsion


def ksd_sum(x: Tensor, score: Tensor, kernel: Kernel, exclude_diagonal: bool, budget: int) -> Tensor:
    """Σ_ij u_p(x_i, x_j), the Stein kernel of Liu, Lee & Jordan 2016 (speed-up paper eq. 6):

    u = k s_i·s_j - 2 f' (s_i - s_j)·(x_i - x_j) - 4 f'' r² - 2 d f', with both differences explicit.
    """
    n, d = x.shape
    sq = sq_dists(x, x, budget)
    k, d1, d2 = kernel.derivatives(sq)
    cross = x.new_zeros(n, n)
    for f in _feature_blocks(n, n, d, x.element_size(), budget):
        cross = cross + ((x[:, None, f] - x[None, :, f]) * (score[:, None, f] - score[None, :, f])).sum(-1)
    u = k * (score @ score.T) - 2.0 * d1 * cross - 4.0 * d2 * sq - (2.0 * d) * d1
    if exclude_diagonal:
        u = u - torch.diag_embed(torch.diagonal(u))
    return u.sum()
