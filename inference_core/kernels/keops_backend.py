"""`keops` backend (optional): symbolic LazyTensor reductions from pykeops, used only when it is importable.

KeOps compiles one kernel per (formula, d, dtype) on first use (8-14 s on a 2-core CPU, docs/implementation-notes.md, "Pairwise kernels") and its
CPU backend is slower than torch; it is an anchor for benchmarks and a fallback, never chosen by `auto`.
Pairs are formed as direct differences inside the generated kernel, so the repulsion is accumulated as
Σ_j g_ij (x_i - x_j) per pair. Differentiable through KeOps' own autograd.
"""

from __future__ import annotations

from pykeops.torch import LazyTensor
from torch import Tensor

from inference_core.kernels.functions import RBF, Kernel


def _scalar(value: object) -> float:
    return float(value.detach()) if isinstance(value, Tensor) else float(value)


def _k_and_g(xi: LazyTensor, yj: LazyTensor, kernel: Kernel) -> tuple[LazyTensor, LazyTensor]:
    sq = ((xi - yj) ** 2).sum(-1)
    h = _scalar(kernel.h)
    if isinstance(kernel, RBF):
        k = (-sq / h).exp()
        return k, k * (2.0 / h)
    c, beta = _scalar(kernel.c), _scalar(kernel.beta)
    base = sq / h + c * c
    k = (base.log() * beta).exp()
    return k, k / base * (-2.0 * beta / h)


def kernel_matmul(x: Tensor, y: Tensor, v: Tensor, kernel: Kernel) -> Tensor:
    """K(x, y) v."""
    k, _ = _k_and_g(LazyTensor(x[:, None, :]), LazyTensor(y[None, :, :]), kernel)
    return k @ v.contiguous()


def stein_sums(x: Tensor, score: Tensor | None, kernel: Kernel) -> Tensor:
    """Σ_j [k_ij s_j + g_ij (x_i - x_j)] per row (only the repulsion when score is None)."""
    xi, xj = LazyTensor(x[:, None, :]), LazyTensor(x[None, :, :])
    k, g = _k_and_g(xi, xj, kernel)
    repulsion = (g * (xi - xj)).sum(dim=1)
    if score is None:
        return repulsion
    return (k * LazyTensor(score[None, :, :])).sum(dim=1) + repulsion
