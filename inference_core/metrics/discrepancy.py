"""Sample-quality discrepancies used by a job's eval diagnostics and by the benchmarks.

* `ksd_imq`: the kernel Stein discrepancy with the inverse multiquadric kernel k = (c² + r²/h)^β, c = 1,
  β = −1/2 (Gorham & Mackey 2017: with h fixed it detects non-convergence), as the unbiased U-statistic
  (1/(n(n−1))) Σ_{i≠j} u_p(x_i, x_j) of `inference_core.kernels.ksd2`. Needs only the score.
* `mmd2_rbf`: the squared MMD between two samples with k = exp(−r²/h) (Gretton et al. 2012), h = the median
  of the squared distances between distinct points of the union X ∪ Y (no log divisor) unless given.
"""

from __future__ import annotations

import torch
from torch import Tensor

from inference_core.kernels import IMQ, RBF, ksd2, median_heuristic, mmd2


def ksd_imq(x: Tensor, score: Tensor, *, h: float = 1.0, c: float = 1.0, beta: float = -0.5,
            unbiased: bool = True) -> float:
    """KSD² with the IMQ kernel (c² + ||x − y||²/h)^β: U-statistic (default) or V-statistic, a float."""
    with torch.no_grad():
        return float(ksd2(x.detach(), score.detach(), IMQ(c, beta, h), unbiased))


def union_median_bandwidth(x: Tensor, y: Tensor) -> float:
    """Median of ||z_i − z_j||² over distinct pairs of the union Z = X ∪ Y (exact up to 4096 points, a fixed
    seeded subsample of 2048 beyond); 1 if it is 0."""
    with torch.no_grad():
        union = torch.cat([x.detach(), y.detach().to(x)], dim=0)
        return float(median_heuristic(union, divisor="none", include_diagonal=False))


def mmd2_rbf(x: Tensor, y: Tensor, *, h: float | None = None, unbiased: bool = False) -> tuple[float, float]:
    """(MMD², h) between samples x [n, d] and y [m, d] with the RBF kernel exp(−r²/h), h = the union median
    when None. V-statistic (biased, ≥ 0; the speed-up paper's eq. 28 squared) unless `unbiased`."""
    with torch.no_grad():
        bandwidth = union_median_bandwidth(x, y) if h is None else float(h)
        y = y.detach().to(x)
        return float(mmd2(x.detach(), y, RBF(bandwidth), unbiased)), bandwidth
