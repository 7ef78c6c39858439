"""Public pairwise primitives and backend selection.

Every primitive takes particles X [n, d], a kernel in the place of the bandwidth (`h` float or 0-dim tensor
meaning RBF(h), or an `RBF`/`IMQ` object), `backend` and `precision`. Particles are always centred (the mean
of X, or of X ∪ Y) before any distance is formed.

Backends:
* `dense`: direct differences, every n×m matrix materialised; the float64 reference (always computes in
  the input dtype, whatever `precision` says).
* `chunked`: row blocks sized to `memory_budget` bytes (default 256 MiB, env PARVIS_PAIRWISE_MEMORY_BUDGET),
  centred Gram form + GEMMs. Differentiable, memory-bounded even under autograd (per-block checkpointing).
* `triton`: one fused flash-style kernel per primitive on CUDA; never materialises n×n; forward only;
  float32 only. Runs on CPU tensors under TRITON_INTERPRET=1 (tests).
* `keops`: accepted only when pykeops is importable (not bundled); otherwise ValueError.
* `auto`: $PARVIS_PAIRWISE_BACKEND if set (and able to serve the call), else `triton` on CUDA for float32
  without autograd when d ≤ 16 (every precision: the crossover measured on an H100, docs/benchmarks.md;
  the cost model had predicted 64/256, but the kernel reaches at most a quarter of its roofline bound)
  and n·d < 2^31 (the fused kernels index in int32); else
  `chunked`. On CPU always `chunked`, where n sets the block size (one cache-sized block for n ≲ 700 at the
  default budget). `dense` and `keops` are never chosen by `auto`.

`precision` = `ieee` | `tf32` | `bf16` selects the arithmetic of the kernel-times-matrix product only;
distances are always computed in full float32 (TF32 error in x·y would feed the cancellation described in
docs/implementation-notes.md, "Pairwise kernels").
It is explicit: global TF32 flags are overridden for the duration of the call and restored.
"""

from __future__ import annotations

import importlib.util
import os

import torch
from torch import Tensor

from inference_core.kernels import chunked, dense
from inference_core.kernels.common import (
    centre,
    check_points,
    check_precision,
    check_rows,
    check_same_kind,
    matmul_precision,
    needs_grad,
    resolve_memory_budget,
)
from inference_core.kernels.functions import IMQ, Kernel, KernelLike, as_kernel

BACKENDS: tuple[str, ...] = ("auto", "dense", "chunked", "triton", "keops")
BACKEND_ENV = "PARVIS_PAIRWISE_BACKEND"
#: Largest d for which `auto` prefers the fused kernel on CUDA, by precision: measured side by side on an
#: H200 (docs/benchmarks.md, "Pairwise kernels (GPU)"): at d ≤ 16 the kernel is 1.1-31× chunked cuBLAS for
#: n ∈ {10⁴, 10⁵}. Larger d waits for a run that times the Gram-form kernel beside chunked.
TRITON_MAX_D = {"ieee": 16, "tf32": 16, "bf16": 16}
#: The fused kernels compute offsets in int32: operands must hold fewer elements than this.
TRITON_MAX_ELEMENTS = 2**31


def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def keops_available() -> bool:
    return importlib.util.find_spec("pykeops") is not None


def triton_interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def _kernel_tensors(kernel: Kernel) -> tuple[object, ...]:
    return (kernel.h, kernel.c, kernel.beta) if isinstance(kernel, IMQ) else (kernel.h,)


def _triton_refusal(device: torch.device, dtype: torch.dtype, grad: bool, elements: int = 0) -> str | None:
    """Why the triton backend cannot serve a call, or None."""
    if elements >= TRITON_MAX_ELEMENTS:
        return f"the triton kernels index with int32: an operand of {elements} elements is too large"
    if not triton_available():
        return "triton is not installed"
    if device.type != "cuda" and not triton_interpreting():
        return "the triton backend needs CUDA tensors (or TRITON_INTERPRET=1 for CPU testing)"
    if dtype != torch.float32:
        return f"the triton backend computes in float32 only, got {dtype}"
    if grad:
        return "the triton backend is forward-only; use backend='chunked' or 'dense' under autograd"
    return None


def resolve_backend(
    backend: str,
    *,
    device: torch.device,
    d: int,
    dtype: torch.dtype,
    grad: bool,
    precision: str,
    elements: int = 0,
) -> str:
    """The concrete backend for one call (see the module docstring for the rules).

    `elements` is the size of the largest operand (n·d, m·p, ...): the fused kernels index in int32, so
    `auto` leaves operands of 2^31 elements or more to `chunked`.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        env = os.environ.get(BACKEND_ENV, "").strip()
        if env:
            if env not in BACKENDS:
                raise ValueError(f"{BACKEND_ENV} must be one of {BACKENDS}, got {env!r}")
            # The override applies where it can serve the call (e.g. not a forward-only kernel under autograd).
            if env == "triton" and _triton_refusal(device, dtype, grad, elements) is None:
                return "triton"
            if env == "keops" and keops_available():
                return "keops"
            if env in ("dense", "chunked"):
                return env
        if (
            device.type == "cuda"
            and d <= TRITON_MAX_D[precision]
            and _triton_refusal(device, dtype, grad, elements) is None
        ):
            return "triton"
        return "chunked"
    if backend == "triton":
        why = _triton_refusal(device, dtype, grad, elements)
        if why is not None:
            raise ValueError(why)
    if backend == "keops" and not keops_available():
        raise ValueError("backend='keops' needs pykeops, which is not installed")
    return backend


def _triton():
    from inference_core.kernels import triton_backend

    return triton_backend


def _keops():
    from inference_core.kernels import keops_backend

    return keops_backend


def kernel_matmul(
    X: Tensor,
    Y: Tensor | None,
    V: Tensor,
    h: KernelLike,
    *,
    backend: str = "auto",
    precision: str = "ieee",
    memory_budget: int | None = None,
) -> Tensor:
    """K(X, Y) · V: [n, d], [m, d], [m, p] → [n, p], K_ij = k(x_i, y_j). `Y=None` (or `Y is X`) means X.

    The core reduction: MMD, conjugate-gradient solves and the induced-point SVGD variants (speed-up paper
    §3, k_y(x, x') = (1/m) Σ_j k(x, y_j) k(x', y_j)) are built from it with Y ≠ X.
    """
    kernel = as_kernel(h)
    check_points("X", X)
    same = Y is None or Y is X
    if not same:
        check_points("Y", Y, d=X.shape[1])
        check_same_kind(X, Y, ("X", "Y"))
    m = X.shape[0] if same else Y.shape[0]
    check_rows("V", V, m, like=X)
    check_precision(precision)
    budget = resolve_memory_budget(memory_budget)
    grad = needs_grad(X, Y, V, *_kernel_tensors(kernel))
    elements = max(X.numel(), V.numel(), 0 if same else Y.numel())
    be = resolve_backend(
        backend, device=X.device, d=X.shape[1], dtype=X.dtype, grad=grad, precision=precision, elements=elements
    )
    xc, yc = centre(X, None if same else Y)
    yc = xc if same else yc
    with matmul_precision(X.device, "ieee" if be == "dense" else precision):
        if be == "dense":
            return dense.kernel_matmul(xc, yc, V, kernel, budget)
        if be == "chunked":
            return chunked.kernel_matmul(xc, yc, V, kernel, same, budget, grad, precision)
        if be == "triton":
            return _triton().kernel_matmul(xc, yc, V, kernel, same, precision)
        return _keops().kernel_matmul(xc, yc, V, kernel)


def _stein(
    X: Tensor, score: Tensor | None, h: KernelLike, backend: str, precision: str, budget: int | None
) -> Tensor:
    kernel = as_kernel(h)
    check_points("X", X)
    if score is not None:
        check_rows("score", score, X.shape[0], like=X)
        if score.shape[1] != X.shape[1]:
            raise ValueError(f"score must have shape {tuple(X.shape)}, got {tuple(score.shape)}")
    check_precision(precision)
    nbytes = resolve_memory_budget(budget)
    grad = needs_grad(X, score, *_kernel_tensors(kernel))
    be = resolve_backend(
        backend, device=X.device, d=X.shape[1], dtype=X.dtype, grad=grad, precision=precision, elements=X.numel()
    )
    xc, _ = centre(X)
    with matmul_precision(X.device, "ieee" if be == "dense" else precision):
        if be == "dense":
            return dense.stein_sums(xc, score, kernel, nbytes)
        if be == "chunked":
            return chunked.stein_sums(xc, score, kernel, nbytes, grad, precision)
        if be == "triton":
            return _triton().stein_sums(xc, score, kernel, precision)
        return _keops().stein_sums(xc, score, kernel)


def svgd_direction(
    X: Tensor,
    score: Tensor,
    h: KernelLike,
    *,
    backend: str = "auto",
    precision: str = "ieee",
    memory_budget: int | None = None,
) -> Tensor:
    """The SVGD direction φ(x_i) = (1/n) Σ_j [k(x_j, x_i) ∇log p(x_j) + ∇_{x_j} k(x_j, x_i)].

    The empirical form of SVGD's optimal perturbation (Liu & Wang 2016; GPVI eq. 13), an ASCENT direction:
    particles move x ← x + ε φ. For the RBF kernel ∇_{x_j} k(x_j, x_i) = (2/h) k_ij (x_i - x_j), so the sum
    is one kernel pass K·[S, X, 1] plus an O(nd) epilogue (docs/implementation-notes.md, "Pairwise kernels", one-matmul form).
    `score` is ∇log p at each particle, [n, d].
    """
    if score is None:
        raise ValueError("score must be a tensor of shape [n, d]")
    return _stein(X, score, h, backend, precision, memory_budget) / X.shape[0]


def kernel_grad_sum(
    X: Tensor,
    h: KernelLike,
    *,
    backend: str = "auto",
    precision: str = "ieee",
    memory_budget: int | None = None,
) -> Tensor:
    """Σ_j ∇_{x_j} k(x_j, x_i) for each i, [n, d] — no 1/n.

    Sign convention: the gradient is taken w.r.t. the FIRST argument, the sum runs over it, so the result
    is the repulsive term of SVGD, Σ_j g_ij (x_i - x_j) with g = -2 f'(r²) ≥ 0: it points away from the
    neighbours of x_i, and equals -∇_{x_i} Σ_j k(x_i, x_j). GFSF (Liu et al. 2019) estimates
    ∇log q(x_i) ≈ -[(K + εI)⁻¹ · kernel_grad_sum]_i (see `kernel_solve`).
    """
    return _stein(X, None, h, backend, precision, memory_budget)


def mmd2(
    X: Tensor,
    Y: Tensor,
    h: KernelLike,
    unbiased: bool,
    *,
    backend: str = "auto",
    precision: str = "ieee",
    memory_budget: int | None = None,
) -> Tensor:
    """Squared maximum mean discrepancy between the samples X [n, d] and Y [m, d] (Gretton et al. 2012).

    V-statistic (`unbiased=False`): mean K(X,X) + mean K(Y,Y) - 2 mean K(X,Y), diagonals included (≥ 0).
    U-statistic (`unbiased=True`): the within-sample means exclude i = j (may be slightly negative).
    Both samples are centred by the mean of their union. Differentiable in X, Y and h (dense/chunked).
    """
    check_points("X", X)
    check_points("Y", Y, d=X.shape[1])
    check_same_kind(X, Y, ("X", "Y"))
    kernel = as_kernel(h)
    n, m = X.shape[0], Y.shape[0]
    if unbiased and min(n, m) < 2:
        raise ValueError("the unbiased MMD needs at least 2 points in each sample")
    xc, yc = centre(X, Y)
    kw = {"backend": backend, "precision": precision, "memory_budget": memory_budget}
    # The centring inside kernel_matmul is then a no-op shift; the union centre is what matters for K(X, Y).
    kxx = kernel_matmul(xc, None, xc.new_ones(n, 1), kernel, **kw).sum()
    kyy = kernel_matmul(yc, None, yc.new_ones(m, 1), kernel, **kw).sum()
    kxy = kernel_matmul(xc, yc, yc.new_ones(m, 1), kernel, **kw).sum()
    if unbiased:
        k0 = kernel.f0()
        return (kxx - n * k0) / (n * (n - 1)) + (kyy - m * k0) / (m * (m - 1)) - 2.0 * kxy / (n * m)
    return kxx / (n * n) + kyy / (m * m) - 2.0 * kxy / (n * m)


def ksd2(
    X: Tensor,
    score: Tensor,
    h: KernelLike,
    unbiased: bool,
    *,
    backend: str = "auto",
    precision: str = "ieee",
    memory_budget: int | None = None,
) -> Tensor:
    """Squared kernelized Stein discrepancy S(q, p) = E_{x,x'~q} u_p(x, x') (speed-up paper eq. 6-7;
    Liu, Lee & Jordan 2016), with the Stein kernel

        u_p(x, x') = s(x)ᵀ k s(x') + s(x)ᵀ ∇_{x'} k + s(x')ᵀ ∇_x k + tr ∇_x ∇_{x'} k.

    V-statistic (Σ_ij u / n², ≥ 0; what KSD descent minimises) or U-statistic (i ≠ j, / n(n-1), unbiased).
    Works with RBF and IMQ; `IMQ()` (c = 1, β = -1/2) gives the convergence-determining diagnostic of
    Gorham & Mackey 2017. Differentiable in X, score and the kernel parameters (dense/chunked).
    `precision` is accepted for uniformity; the Stein kernel is always evaluated in full precision.
    """
    kernel = as_kernel(h)
    check_points("X", X)
    check_rows("score", score, X.shape[0], like=X)
    if score.shape[1] != X.shape[1]:
        raise ValueError(f"score must have shape {tuple(X.shape)}, got {tuple(score.shape)}")
    check_precision(precision)
    n = X.shape[0]
    if unbiased and n < 2:
        raise ValueError("the unbiased KSD needs at least 2 particles")
    nbytes = resolve_memory_budget(memory_budget)
    grad = needs_grad(X, score, *_kernel_tensors(kernel))
    be = resolve_backend(
        backend, device=X.device, d=X.shape[1], dtype=X.dtype, grad=grad, precision=precision, elements=X.numel()
    )
    if be == "keops":
        be = "chunked"  # no KeOps formula for the Stein kernel: the chunked pass is exact and bounded
    xc, _ = centre(X)
    with matmul_precision(X.device, "ieee"):
        if be == "dense":
            total = dense.ksd_sum(xc, score, kernel, unbiased, nbytes)
        elif be == "chunked":
            total = chunked.ksd_sum(xc, score, kernel, unbiased, nbytes, grad)
        else:
            total = _triton().ksd_sum(xc, score, kernel, unbiased)
    return total / (n * (n - 1)) if unbiased else total / (n * n)
