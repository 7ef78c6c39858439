"""Particle-space directions: the one home of the update directions φ [n, d] that the particle methods apply
to their particles and the generative methods pull back through a generator (`Method.pullback`).

Every direction is an ASCENT direction on the particles (x ← x + ε φ) computed without a graph, takes the
kernel as an `inference_core.kernels` object (`RBF(h)` or `IMQ(c, β, h)`; a bare h means RBF) and the
pairwise `backend`/`precision` of `inference_core.kernels`. Notation: k(x, y) = f(||x − y||²),
g = −2 f'(r²) ≥ 0, so ∇_{x_j} k(x_j, x_i) = g_ij (x_i − x_j); s = ∇log p; `entropy_weight` multiplies the
repulsive (entropy) term (1 targets the posterior).

* `svgd_direction` / `svgd_direction_two_batch`: SVGD (Liu & Wang 2016, eq. 8; GPVI paper eq. 13), the
  expectation over the batch itself or over an independent batch (amortised SVGD, ALF's svgd3);
* `svgd_direction_rows`, `wsgld_direction_rows`, `pisgld_direction_rows`: the same directions for a block of
  query rows against all n (one rank's share of a ranked step, `inference_core.distributed`);
* `gfsf_direction`: the Wasserstein gradient with the smoothed-function score estimate (Liu et al. 2019, §3.3);
* `wsgld_direction`, `pisgld_direction`: w-SGLD-B and pi-SGLD (Chen et al. 2018, as in Table 1 of the
  f-POVI paper, Wang et al. 2019);
* `stein_critic_loss`, `jacobian_trace`: the learned-critic Stein discrepancy ("KSD"/minmax; Hu et al. 2018,
  Grathwohl et al. 2020), whose critic f is the direction.

The speed-up variants of SVGD (random subsets, induced points) are in `methods.speedups`, GPVI's noise-space
direction with the Jacobian inverse in `methods.generative.gpvi_math`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from inference_core.kernels import (
    RBF,
    KernelLike,
    as_kernel,
    kernel_grad_sum,
    kernel_matmul,
    kernel_solve,
    resolve_backend,
)
from inference_core.kernels import svgd_direction as svgd_direction_one_pass
from inference_core.kernels.chunked import stein_sums_from_sq
from inference_core.kernels.common import centre, check_precision, needs_grad
from inference_core.methods.kernel_sums import cross_kernel_matmul, gradient_weight_kernel

# ------------------------------------------------------------------------------------------------ SVGD


def reuses_sq_dists(x: Tensor, kernel_name: str, *, backend: str = "auto", precision: str = "ieee") -> bool:
    """Whether `svgd_direction` takes a squared-distance matrix its caller already formed (`sq`) for particles
    like x: an RBF kernel, no autograd, and a call the pairwise dispatcher gives to the `chunked` backend (the
    CPU default; `dense` stays the direct-difference reference, `triton` its fused kernel)."""
    if kernel_name != "rbf" or needs_grad(x):
        return False
    be = resolve_backend(backend, device=x.device, d=x.shape[1], dtype=x.dtype, grad=False,
                         precision=check_precision(precision), elements=x.numel())
    return be == "chunked"


def svgd_direction(x: Tensor, score: Tensor, kernel: KernelLike, *, entropy_weight: float = 1.0,
                   backend: str = "auto", precision: str = "ieee", sq: Tensor | None = None) -> Tensor:
    """SVGD's φ with the expectation over the batch itself (SVGD eq. 8; GPVI eq. 13), [n, d]:

        φ(x_i) = (1/n) Σ_j [k(x_j, x_i) s(x_j) + ent · ∇_{x_j} k(x_j, x_i)]      (self term j = i included).

    With ent = 1, one kernel pass K·[S, X, 1] (`kernels.svgd_direction`); otherwise two (K·S, then the
    repulsion `kernel_grad_sum`).

    `sq`: the [n, n] squared distances of x centred by its mean, exact 0 on the diagonal, that the bandwidth
    rule formed (`BandwidthRule.with_sq_dists`); where `reuses_sq_dists` holds (and ent = 1) the kernel is
    formed from it in place (it is consumed: `kernels.chunked.stein_sums_from_sq`), which saves the distance
    GEMM; otherwise it is ignored. Same φ to float32 rounding.
    """
    kw = {"backend": backend, "precision": precision}
    if entropy_weight == 1.0:
        kernel = as_kernel(kernel)
        if (sq is not None and isinstance(kernel, RBF) and score.shape == x.shape and score.dtype == x.dtype
                and reuses_sq_dists(x, kernel.name, **kw) and not needs_grad(score, kernel.h)):
            xc, _ = centre(x)
            return stein_sums_from_sq(xc, score, kernel, sq, precision) / x.shape[0]
        return svgd_direction_one_pass(x, score, kernel, **kw)
    n = x.shape[0]
    drive = kernel_matmul(x, None, score, kernel, **kw) / n
    return drive + entropy_weight * kernel_grad_sum(x, kernel, **kw) / n


def svgd_direction_rows(x: Tensor, score: Tensor, kernel: KernelLike, start: int, stop: int, *,
                        entropy_weight: float = 1.0, sq: Tensor | None = None, backend: str = "auto",
                        precision: str = "ieee", gather: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """Rows [start, stop) of `svgd_direction`, [stop − start, d]: the expectation over all n particles, evaluated
    for the query rows only (one rank's share of a ranked step, `inference_core.distributed`; (stop − start)·n
    kernel entries instead of n²):

        φ(x_i) = (1/n) Σ_j [k(x_j, x_i) s(x_j) + ent · g_ij (x_i − x_j)],   i ∈ [start, stop)   (SVGD eq. 8),

    as K(x_rows, x)·[s, x, 1]/n (RBF: g = (2/h) k, one pass) or two passes (IMQ: g is another kernel), every point
    centred by the mean of all n first. `sq`: the [n, n] squared distances the bandwidth rule formed
    (`BandwidthRule.with_sq_dists`), read (columns [start, stop)), not consumed. `gather` is not used (the
    signature of the other `*_rows` directions). Equal to `svgd_direction(...)[start:stop]` up to the order of
    the additions."""
    kernel = as_kernel(kernel)
    n, d = x.shape
    xc, _ = centre(x)
    rows = xc[start:stop]
    ones = xc.new_ones(n, 1)
    scale, gkernel = gradient_weight_kernel(kernel)
    cols = None if sq is None else sq[:, start:stop]  # ||x_j − x_i||², [n, rows]
    kw = {"backend": backend, "precision": precision}
    if gkernel is kernel:
        KV = cross_kernel_matmul(rows, xc, torch.cat([score, xc, ones], dim=1) / n, kernel, cols, **kw)
        drive, k_x, k_sum = KV[:, :d], KV[:, d: 2 * d], KV[:, 2 * d:]
        return drive + entropy_weight * scale * (k_sum * rows - k_x)
    drive = cross_kernel_matmul(rows, xc, score / n, kernel, cols, **kw)
    G = cross_kernel_matmul(rows, xc, torch.cat([xc, ones], dim=1) / n, gkernel, cols, **kw)
    return drive + entropy_weight * scale * (G[:, d:] * rows - G[:, :d])


def svgd_direction_two_batch(x: Tensor, y: Tensor, score_y: Tensor, kernel: KernelLike, *,
                             entropy_weight: float = 1.0, sq: Tensor | None = None, backend: str = "auto",
                             precision: str = "ieee") -> Tensor:
    """SVGD's φ at x [n, d] with the expectation over an independent batch y [m, d] (GPVI eq. 13 with
    x' = f(z'), ALF's svgd3; Wang & Liu 2016's amortised SVGD):

        φ(x_i) = (1/m) Σ_j [k(y_j, x_i) s(y_j) + ent · g_ij (x_i − y_j)],

    as K(x, y)·[s_y, y, 1] (RBF: g = (2/h) k, one kernel pass) or two passes (IMQ: g is another kernel).
    `sq` [m, n]: the squared distances ||y_j − x_i||² the bandwidth rule already formed, reused when small.
    x and y are not centred (the distances come from `sq` or the centred primitives; the epilogue
    x_i Σ_j g_ij − Σ_j g_ij y_j is then formed in the caller's coordinates).
    """
    kernel = as_kernel(kernel)
    m, d = y.shape
    ones = torch.ones(m, 1, dtype=x.dtype, device=x.device)
    scale, gkernel = gradient_weight_kernel(kernel)
    kw = {"backend": backend, "precision": precision}
    if gkernel is kernel:
        KV = cross_kernel_matmul(x, y, torch.cat([score_y, y, ones], dim=1), kernel, sq, **kw) / m
        drive, k_y, k_sum = KV[:, :d], KV[:, d: 2 * d], KV[:, 2 * d:]
        return drive + entropy_weight * scale * (k_sum * x - k_y)
    drive = cross_kernel_matmul(x, y, score_y, kernel, sq, **kw) / m
    G = cross_kernel_matmul(x, y, torch.cat([y, ones], dim=1), gkernel, sq, **kw) / m
    return drive + entropy_weight * scale * (G[:, d:] * x - G[:, :d])


# ------------------------------------------------------------------------------------------------ GFSF


def gfsf_direction(x: Tensor, score: Tensor, kernel: KernelLike, eps: float, *, entropy_weight: float = 1.0,
                   solve_method: str = "auto", backend: str = "auto", precision: str = "ieee"
                   ) -> tuple[Tensor, float]:
    """GFSF (Liu et al. 2019, "Understanding and accelerating particle-based variational inference", §3.3;
    GPVI paper §2; ALF's `_gfsf_grad`): the score of the particle distribution is estimated as

        ∇log q(x_i) ≈ −[(K + εI)⁻¹ R]_i,    R_i = Σ_j ∇_{x_j} k(x_j, x_i)  (= `kernel_grad_sum`),

    and φ(x_i) = ∇log p(x_i) − ent · ∇log q(x_i) = s_i + ent · [(K + εI)⁻¹ R]_i, the Wasserstein gradient of
    −KL(q‖p). No 1/n (ALF's non-amortised ParVI, which produced the GPVI paper's numbers; the f-POVI code
    divides both terms by n, which Adam does not see). ε regularises the solve (ALF: 1e-5, "crucial for
    convergence"); the solve is float64 Cholesky (never an fp32 inverse) up to 8192 particles, CG beyond
    (`kernels.kernel_solve`). Returns (φ, the solve's relative residual).
    """
    repulsion = kernel_grad_sum(x, kernel, backend=backend, precision=precision)
    solved, info = kernel_solve(x, repulsion, kernel, eps, method=solve_method, backend=backend,
                                precision=precision, return_info=True)
    return score + entropy_weight * solved, info.residual


# ----------------------------------------------------------------------------------- w-SGLD and pi-SGLD


def wsgld_direction(x: Tensor, score: Tensor, kernel: KernelLike, *, backend: str = "auto",
                    precision: str = "ieee") -> Tensor:
    """w-SGLD-B, the blob approximation of Wasserstein SGLD (Chen et al. 2018; f-POVI paper Table 1 and its
    authors' code), [n, d], three kernel passes:

        φ(x_i) = s_i + Σ_j ∇_{x_j} k(x_j, x_i) / S_j + Σ_j ∇_{x_j} k(x_j, x_i) / S_i,   S_i = Σ_l k(x_i, x_l)
               = s_i + Σ_j g_ij (x_i − x_j) / S_j + Σ_j g_ij (x_i − x_j) / S_i.

    The row sums S include k(x_i, x_i) and are constants of the step (the code's stop-gradient); no 1/n.
    The blob variant replaces the Brownian motion of SGLD by this deterministic repulsion: no injected noise.
    """
    kernel = as_kernel(kernel)
    kw = {"backend": backend, "precision": precision}
    xc, _ = centre(x)
    n = x.shape[0]
    row_sums = kernel_matmul(xc, None, xc.new_ones(n, 1), kernel, **kw)  # S_i, [n, 1]
    inv = 1.0 / row_sums
    repulsion = kernel_grad_sum(xc, kernel, **kw)  # Σ_j g_ij (x_i − x_j)
    scale, gkernel = gradient_weight_kernel(kernel)
    weighted = kernel_matmul(xc, None, torch.cat([inv, inv * xc], dim=1), gkernel, **kw)
    # Σ_j g_ij (x_i − x_j)/S_j = x_i Σ_j g_ij/S_j − Σ_j g_ij x_j/S_j
    first = scale * (xc * weighted[:, :1] - weighted[:, 1:])
    return score + first + repulsion * inv


def wsgld_direction_rows(x: Tensor, score: Tensor, kernel: KernelLike, start: int, stop: int, *,
                         gather: Callable[[Tensor], Tensor], sq: Tensor | None = None, backend: str = "auto",
                         precision: str = "ieee") -> Tensor:
    """Rows [start, stop) of `wsgld_direction` (w-SGLD-B, Chen et al. 2018; f-POVI Table 1), one rank's share:

        φ(x_i) = s_i + Σ_j g_ij (x_i − x_j) / S_j + Σ_j g_ij (x_i − x_j) / S_i,   S_i = Σ_l k(x_i, x_l),

    for i ∈ [start, stop), against all n particles. The first term needs S_j for every j: each rank forms its own
    rows' S (one pass, K(x_rows, x)·1) and `gather` (the ranks' all-gather of rows, in rank order) assembles all n;
    then one pass K_g(x_rows, x)·[1, x, 1/S, x/S] gives both repulsions. `sq` is not used. Equal to
    `wsgld_direction(...)[start:stop]` up to the order of the additions."""
    kernel = as_kernel(kernel)
    kw = {"backend": backend, "precision": precision}
    xc, _ = centre(x)
    n, d = x.shape
    rows = xc[start:stop]
    ones = xc.new_ones(n, 1)
    inv = 1.0 / gather(kernel_matmul(rows, xc, ones, kernel, **kw))  # 1/S_j, [n, 1]
    scale, gkernel = gradient_weight_kernel(kernel)
    G = kernel_matmul(rows, xc, torch.cat([ones, xc, inv, inv * xc], dim=1), gkernel, **kw)
    repulsion = scale * (rows * G[:, :1] - G[:, 1: 1 + d])  # Σ_j g_ij (x_i − x_j)
    first = scale * (rows * G[:, 1 + d: 2 + d] - G[:, 2 + d:])  # Σ_j g_ij (x_i − x_j)/S_j
    return score[start:stop] + first + repulsion * inv[start:stop]


def pisgld_direction_rows(x: Tensor, score: Tensor, kernel: KernelLike, start: int, stop: int, *,
                          gather: Callable[[Tensor], Tensor], sq: Tensor | None = None, backend: str = "auto",
                          precision: str = "ieee") -> Tensor:
    """Rows [start, stop) of `pisgld_direction`: (w-SGLD-B + SVGD)/2 (`wsgld_direction_rows`,
    `svgd_direction_rows`), one rank's share."""
    kw = {"backend": backend, "precision": precision}
    return 0.5 * (wsgld_direction_rows(x, score, kernel, start, stop, gather=gather, **kw)
                  + svgd_direction_rows(x, score, kernel, start, stop, **kw))


def pisgld_direction(x: Tensor, score: Tensor, kernel: KernelLike, *, backend: str = "auto",
                     precision: str = "ieee") -> Tensor:
    """pi-SGLD (Chen et al. 2018) as the f-POVI paper's Table 1 and its authors' code use it:
    φ = (φ_w-SGLD-B + φ_SVGD) / 2 literally, with one kernel and one bandwidth, so each term keeps its own
    scale (w-SGLD-B has no 1/n, SVGD its 1/n; docs/implementation-notes.md, "w-SGLD-B and pi-SGLD"). Deterministic."""
    kw = {"backend": backend, "precision": precision}
    return 0.5 * (wsgld_direction(x, score, kernel, **kw) + svgd_direction_one_pass(x, score, kernel, **kw))


# ------------------------------------------------------------------------------ learned Stein critic (KSD)

#: `trace="auto"` takes the exact Jacobian trace up to this dimension, Hutchinson's estimate above. 16 keeps
#: every recorded run as it was: the particle KSD of the logistic-regression reproduction (d = 32) used
#: Hutchinson, the amortised KSD rows (d ≤ 5) the exact trace.
EXACT_TRACE_MAX_DIM = 16


def trace_method(mode: str, dim: int) -> str:
    """`exact` or `hutchinson` for a critic option `trace` in {auto, exact, hutchinson} at dimension d."""
    if mode == "auto":
        return "exact" if dim <= EXACT_TRACE_MAX_DIM else "hutchinson"
    if mode not in ("exact", "hutchinson"):
        raise ValueError(f"trace must be 'auto', 'exact' or 'hutchinson', got {mode!r}")
    return mode


def jacobian_trace(fx: Tensor, x: Tensor, probe: Tensor | None = None) -> Tensor:
    """tr ∇_x f(x) per row, [n], differentiable (create_graph) so a critic can be trained through it.

    Exact when `probe` is None: d backward passes, Σ_k ∂f_k/∂x_k (rows are independent, so
    ∂(Σ_i f_ik)/∂x_i = ∂f_ik/∂x_i). Otherwise Hutchinson's εᵀ(∂f/∂x)ε with the probe ε [n, d]
    (E[εεᵀ] = I: unbiased).
    """
    if probe is not None:
        if probe.shape != fx.shape:
            raise ValueError(f"Hutchinson's probe must have the shape of f(x) {tuple(fx.shape)}, "
                             f"got {tuple(probe.shape)}")
        (vjp,) = torch.autograd.grad(fx, x, grad_outputs=probe, create_graph=True)
        return (vjp * probe).sum(-1)
    columns = []
    for c in range(x.shape[1]):
        (grad,) = torch.autograd.grad(fx[:, c].sum(), x, create_graph=True)
        columns.append(grad[:, c])
    return torch.stack(columns, dim=-1).sum(-1)


def stein_critic_loss(fx: Tensor, trace: Tensor, score: Tensor, l2_weight: float, entropy_weight: float = 1.0
                      ) -> tuple[Tensor, Tensor]:
    """The critic's loss (to MINIMISE) and its mean Stein term, from f(x_i) [n, d], tr ∇f(x_i) [n] and s(x_i):

        loss = −(1/n) Σ_i [s(x_i)·f(x_i) + ent · tr ∇f(x_i)] + l2_weight · (1/n) Σ_i ||f(x_i)||²,

    i.e. the critic maximises the Stein discrepancy E_q[A_p f] regularised by E_q||f||² (Hu et al. 2018,
    "Stein neural sampler"; Grathwohl et al. 2020; ALF's minmax critic step). Its maximiser is
    f* = (∇log p − ent·∇log q) / (2·l2_weight), the Wasserstein gradient direction, which the particles (or
    the generator's batch) then follow. Returns (loss, detached mean Stein term).
    """
    stein = (score.detach() * fx).sum(-1) + entropy_weight * trace
    stein_mean = stein.mean()
    return -stein_mean + l2_weight * fx.square().sum(-1).mean(), stein_mean.detach()


__all__ = [
    "EXACT_TRACE_MAX_DIM",
    "gfsf_direction",
    "jacobian_trace",
    "pisgld_direction",
    "pisgld_direction_rows",
    "reuses_sq_dists",
    "stein_critic_loss",
    "svgd_direction",
    "svgd_direction_rows",
    "svgd_direction_two_batch",
    "trace_method",
    "wsgld_direction",
    "wsgld_direction_rows",
]
