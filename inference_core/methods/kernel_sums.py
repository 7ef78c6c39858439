"""Kernel sums shared by the particle methods that `inference_core.kernels` has no primitive for: weighted
and cross (X ≠ Y) Stein sums, the dense Stein-kernel matrix, cross distances and their median, and
the cross kernel product that reuses a distance matrix already formed.

Everything here is built on `kernel_matmul`, so the O(nm) sums stay memory-bounded and use the chunked
(CPU) or fused (CUDA) backend. Notation: k(x, y) = f(||x − y||²), g = −2 f'(r²) ≥ 0, so that
∇_x k(x, y) = −g (x − y) and ∇_y k(y, x) = g (x − y) (see `inference_core.kernels.functions`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from inference_core.kernels import IMQ, RBF, Kernel, KernelLike, as_kernel, kernel_matmul
from inference_core.kernels.bandwidth import bandwidth_from_median, distance_median
from inference_core.kernels.common import centre


def gradient_weight_kernel(kernel: Kernel) -> tuple[float | Tensor, Kernel]:
    """g(r²) = −2 f'(r²) written as scale × another kernel, so that Σ_j g_ij v_j is one `kernel_matmul`.

    RBF(h): g = (2/h) exp(−r²/h) → (2/h, RBF(h)).  IMQ(c, β, h): g = (−2β/h)(c² + r²/h)^(β−1) →
    (−2β/h, IMQ(c, β − 1, h)).
    """
    if isinstance(kernel, RBF):
        return 2.0 / kernel.h, kernel
    if isinstance(kernel, IMQ):
        return -2.0 * kernel.beta / kernel.h, IMQ(kernel.c, kernel.beta - 1.0, kernel.h)
    raise ValueError(f"unsupported kernel {type(kernel).__name__}")


def weighted_cross_stein_sums(
    x: Tensor,
    y: Tensor,
    score_y: Tensor,
    weights: Tensor,
    kernel: Kernel,
    *,
    backend: str = "auto",
    precision: str = "ieee",
) -> Tensor:
    """Σ_j w_j [k(y_j, x_i) s(y_j) + ∇_{y_j} k(y_j, x_i)] = Σ_j w_j [k_ij s_j + g_ij (x_i − y_j)], [n, d].

    The Stein operator applied to the kernel at m points y_j with weights w_j (random-subset SVGD, Kang
    Alg. 2 with w_j = 1/m; control functionals, Alg. 3). X and Y are centred by the mean of their union
    first, so x_i Σ_j g_ij w_j − Σ_j g_ij w_j y_j does not cancel far from the origin.
    """
    if weights.dim() != 1 or weights.shape[0] != y.shape[0]:
        raise ValueError(f"weights must have shape [{y.shape[0]}], got {tuple(weights.shape)}")
    xc, yc = centre(x, y)
    w = weights.unsqueeze(1)
    scale, gkernel = gradient_weight_kernel(kernel)
    kw = {"backend": backend, "precision": precision}
    if gkernel is kernel:  # RBF: g = (2/h) k, one pass for all three sums
        out = kernel_matmul(xc, yc, torch.cat([w * score_y, w, w * yc], dim=1), kernel, **kw)
        d = x.shape[1]
        ks, gw, gy = out[:, :d], out[:, d : d + 1], out[:, d + 1 :]
        return ks + scale * (xc * gw - gy)
    ks = kernel_matmul(xc, yc, w * score_y, kernel, **kw)
    out = kernel_matmul(xc, yc, torch.cat([w, w * yc], dim=1), gkernel, **kw)
    return ks + scale * (xc * out[:, :1] - out[:, 1:])


def induced_stein_sums(
    x: Tensor, score: Tensor, y: Tensor, kernel: Kernel, *, backend: str = "auto", precision: str = "ieee"
) -> Tensor:
    """A_j = (1/n) Σ_i [k(x_i, y_j) s(x_i) + ∇_{x_i} k(x_i, y_j)] = (1/n) Σ_i [k_ij s_i − g_ij (x_i − y_j)], [m, d]:
    the Stein operator of the kernel at each induced point y_j, averaged over the particles (Kang eq. 13)."""
    xc, yc = centre(x, y)
    n, d = x.shape
    scale, gkernel = gradient_weight_kernel(kernel)
    kw = {"backend": backend, "precision": precision}
    ones = xc.new_ones(n, 1)
    if gkernel is kernel:
        out = kernel_matmul(yc, xc, torch.cat([score, ones, xc], dim=1), kernel, **kw)
        ks, g1, gx = out[:, :d], out[:, d : d + 1], out[:, d + 1 :]
    else:
        ks = kernel_matmul(yc, xc, score, kernel, **kw)
        out = kernel_matmul(yc, xc, torch.cat([ones, xc], dim=1), gkernel, **kw)
        g1, gx = out[:, :1], out[:, 1:]
    return (ks - scale * (gx - yc * g1)) / n


def stein_kernel_matrix(y: Tensor, score: Tensor, kernel: Kernel) -> Tensor:
    """K₀_ij = u_p(y_i, y_j), the Stein kernel (Kang eqs. 6 and 11; Oates et al. 2017), dense [m, m]:

        u = k s_i·s_j − 2f'(s_i − s_j)·(y_i − y_j) − 4f'' r² − 2d f'

    (for RBF exp(−r²/h): k [s_i·s_j + (2/h)(s_i − s_j)·(y_i − y_j) + 2d/h − 4r²/h²]). Differences are
    formed directly (m is small), in the dtype of y.
    """
    m, d = y.shape
    diff = y[:, None, :] - y[None, :, :]
    sq = diff.square().sum(-1)
    k, d1, d2 = kernel.derivatives(sq)
    cross = (diff * (score[:, None, :] - score[None, :, :])).sum(-1)
    return k * (score @ score.T) - 2.0 * d1 * cross - 4.0 * d2 * sq - (2.0 * d) * d1


def cross_sq_dists(x: Tensor, y: Tensor) -> Tensor:
    """||x_i − y_j||² [n, m] in the centred Gram form (clamped at 0)."""
    xc, yc = centre(x, y)
    return ((xc * xc).sum(1, keepdim=True) + (yc * yc).sum(1)[None, :] - 2.0 * (xc @ yc.T)).clamp_min(0.0)


def cross_median_bandwidth(x: Tensor, y: Tensor, divisor: str = "log_n_plus_1") -> Tensor:
    """h = median_ij ||x_i − y_j||² / divisor(n) over the n×m cross distances (Kang's code: the median of
    pdist2(x, y), log(n + 1) with the full n; numpy's median convention), by the one median rule
    (`kernels.bandwidth.bandwidth_value`: h = 1 if the median is 0). A detached 0-dim tensor in x's dtype.

    The paper writes exp(−d²/2h̃²) with h̃² = 0.5·med/log(n+1), which is exp(−d²/h) with this h = 2h̃².
    """
    with torch.no_grad():
        med = distance_median(cross_sq_dists(x.detach(), y.detach()))
    return bandwidth_from_median(med, divisor, x.shape[0], x)


#: Up to this many pairs `cross_kernel_matmul` reuses a distance matrix the caller already formed (for its
#: bandwidth); beyond, it goes through kernels.kernel_matmul (memory-bounded chunks).
DENSE_MAX_PAIRS = 2**22


def cross_kernel_matmul(x: Tensor, y: Tensor, V: Tensor, kernel: KernelLike, sq: Tensor | None = None, *,
                        backend: str = "auto", precision: str = "ieee") -> Tensor:
    """Σ_j k(x_i, y_j) V_j, [n, p]: from `sq` [m, n] (the squared distances ||y_j − x_i||² of the bandwidth
    rule) when given and small enough, else by `kernels.kernel_matmul`."""
    kernel = as_kernel(kernel)
    if sq is not None and sq.numel() <= DENSE_MAX_PAIRS:
        return kernel.f(sq).T @ V
    return kernel_matmul(x, y, V, kernel, backend=backend, precision=precision)
