"""`chunked` backend: row blocks of the n×m kernel matrix sized to a memory budget (FAISS-style tiling).

Per block of rows: one GEMM for the centred Gram form of the squared distances
D = ||x_i||² + ||y_j||² - 2 x_i·y_j (clamped at 0, exact 0 on the diagonal of K(X, X)), the kernel applied
elementwise, then one GEMM against the right-hand side. Only `temporaries` [rows, m] matrices live at a time,
so memory is O(budget + (n + m)·p) whatever n.

The Gram form is safe here because `dispatch` centres the particles first: its rounding error is
ε·(||x̃_i||² + ||ỹ_j||²), i.e. relative to the spread of the cloud, not to its distance from the origin.

Without autograd: the norms ride inside the GEMM (`lifted_operands`, pre-scaled by -1/h for RBF), every
block reuses one scratch buffer and is finished in place (clamp, diagonal, exp), and results go into one
preallocated output. With autograd: out-of-place ops, and each block runs under activation checkpointing
when there is more than one, so the backward pass recomputes the block instead of keeping every n×m
temporary alive: memory stays bounded for `ksd2`/`mmd2` descent too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from inference_core.kernels.common import block_target, plan_row_block
from inference_core.kernels.functions import RBF, Kernel

# Live [rows, m] matrices per block, by operation (used to size the blocks).
TEMPORARIES = {"matmul": 2, "stein": 3, "ksd": 8, "sq_dists": 1}


def _rows(n: int, m: int, x: Tensor, op: str, budget: int) -> int:
    """Rows per block for `op`: within the budget, cache-sized on CPU."""
    return plan_row_block(
        n, m, itemsize=x.element_size(), temporaries=TEMPORARIES[op], budget=budget, target=block_target(x.device)
    )


def _row_blocks(n: int, rows: int) -> Iterator[tuple[int, int]]:
    for start in range(0, n, rows):
        yield start, min(n, start + rows)


def block_sq_dists(xb: Tensor, y: Tensor, sqn_b: Tensor, sqn_y: Tensor, row0: int, same: bool) -> Tensor:
    """Squared distances of a row block, out of place for autograd (centred Gram form, clamped at 0,
    exact 0 at (i, row0 + i) if same)."""
    dist = (sqn_b.unsqueeze(1) + sqn_y.unsqueeze(0) - 2.0 * (xb @ y.T)).clamp_min(0.0)
    if same:
        diag = dist.diagonal(offset=row0)
        dist = dist.diagonal_scatter(torch.zeros_like(diag), offset=row0)
    return dist


def lifted_operands(x: Tensor, y: Tensor, same: bool, scale: float | Tensor = 1.0) -> tuple[Tensor, Tensor]:
    """[x, ||x||², 1] and scale·[-2y, 1, ||y||²]: their product is scale·D in ONE GEMM.

    The no-autograd path: the norms ride inside the GEMM, so forming -D/h costs one write instead of an
    expanded copy, two broadcast adds and a scaling pass (~2× faster at n = 1000, d = 31 on CPU).
    """
    sqx = (x * x).sum(1, keepdim=True)
    ones = torch.ones_like(sqx)
    left = torch.cat([x, sqx, ones], dim=1)
    if same:
        right = torch.cat([x * -2.0, ones, sqx], dim=1)
    else:
        sqy = (y * y).sum(1, keepdim=True)
        right = torch.cat([y * -2.0, torch.ones_like(sqy), sqy], dim=1)
    if isinstance(scale, Tensor) or scale != 1.0:
        right.mul_(scale)
    return left, right


def _finish_scaled(e: Tensor, kernel: Kernel, row0: int, same: bool, scratch2: Tensor | None = None):
    """Turn a lifted-GEMM block into kernel values IN PLACE (no new n×m allocation).

    RBF: e = -D/h → clamp at 0 from above, exact 0 on the diagonal, exp. Returns (K, None).
    IMQ: e = D → clamp, diagonal, base = c² + D/h, K = base^β (into `scratch2` when G is wanted),
    G = -2f' = (-2β/h) K / base overwriting base. Returns (K, G or None).
    """
    if isinstance(kernel, RBF):
        e.clamp_max_(0.0)
        if same:
            e.diagonal(offset=row0).zero_()
        return exp_(e), None
    e.clamp_min_(0.0)
    if same:
        e.diagonal(offset=row0).zero_()
    h, c, beta = (_host_scalar(v) for v in (kernel.h, kernel.c, kernel.beta))
    base = e.mul_(1.0 / h).add_(c * c)
    if scratch2 is None:
        return base.pow_(beta), None
    k = torch.pow(base, beta, out=scratch2)
    g = base.reciprocal_().mul_(k).mul_(-2.0 * beta / h)
    return k, g


def exp_(t: Tensor) -> Tensor:
    """`t.exp_()` of a scratch tensor without autograd; on CPU through numpy's SIMD exp, within 2.5 ulp (torch's:
    0.6). Measured on one thread (AMD EPYC, AVX-512): 0.45 ms against torch's 0.84 ms for 10⁶ float32 values,
    1.1 ms against 6.6 ms in float64."""
    if t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64) and not t.requires_grad:
        values = t.numpy()
        np.exp(values, out=values)
        return t
    return t.exp_()


def gemm_width(p: int, device: torch.device) -> int:
    """Columns to give a right-hand side of p columns in K·V on this device: on CPU, p rounded up to 16 (p ≤ 16)
    or to a multiple of 8, with zero columns. MKL's single-thread SGEMM K [n, n] · V [n, p] is much slower at
    odd widths (measured at n = 1000: 2.5 ms at p = 63 against 1.6 ms at 64; 2.0 ms at p = 5 against 0.4 ms at
    16; 5.8 ms at 201 against 5.3 ms at 208). Other devices: p."""
    if device.type != "cpu":
        return p
    return 16 if p <= 16 else -(-p // 8) * 8


def gemm_rhs(parts: list[Tensor]) -> Tensor:
    """torch.cat(parts, dim=1), with zero columns appended up to `gemm_width` (the product's extra columns are
    zero and unused)."""
    p = sum(part.shape[1] for part in parts)
    width = gemm_width(p, parts[0].device)
    if width == p:
        return torch.cat(parts, dim=1)
    out = parts[0].new_empty(parts[0].shape[0], width)
    col = 0
    for part in parts:
        out[:, col : col + part.shape[1]] = part
        col += part.shape[1]
    out[:, col:].zero_()
    return out


def _fast_operands(x: Tensor, y: Tensor, same: bool, kernel: Kernel) -> tuple[Tensor, Tensor]:
    """Lifted operands, pre-scaled by -1/h for RBF (so the GEMM yields -D/h directly)."""
    scale = -1.0 / _host_scalar(kernel.h) if isinstance(kernel, RBF) else 1.0
    return lifted_operands(x, y, same, scale)


def _norms(x: Tensor, y: Tensor, same: bool) -> tuple[Tensor, Tensor]:
    sqx = (x * x).sum(1)
    return sqx, sqx if same else (y * y).sum(1)


def _host_scalar(value: float | Tensor) -> float | Tensor:
    """A CPU scalar tensor without grad as a Python float (cheaper scalar ops); anything else unchanged.

    CUDA scalars stay tensors: reading them would synchronise the device.
    """
    if isinstance(value, Tensor) and value.device.type == "cpu" and not value.requires_grad:
        return float(value)
    return value


def _product(k: Tensor, rhs: Tensor, precision: str) -> Tensor:
    """k @ rhs; `bf16` rounds both factors to bfloat16 and accumulates in float32 (distances stay fp32).

    `tf32` needs nothing here: `dispatch` sets the CUDA TF32 flag from `precision` around the call.
    """
    if precision == "bf16" and k.dtype == torch.float32:
        return (k.to(torch.bfloat16) @ rhs.to(torch.bfloat16)).to(torch.float32)
    return k @ rhs


def _autograd_blocks(fn: Callable[[int, int], Tensor], n: int, rows: int) -> Tensor:
    """Concatenate fn(start, stop) over row blocks, each checkpointed when there is more than one, so the
    backward pass recomputes a block instead of keeping every n×m temporary alive."""
    blocks = list(_row_blocks(n, rows))
    if len(blocks) == 1:
        return fn(0, n)
    return torch.cat([checkpoint(fn, a, b, use_reentrant=False) for a, b in blocks], dim=0)


# The no-autograd paths below write every block into one preallocated output and reuse one scratch
# [rows, m] buffer: besides saving the allocation and page faults, this keeps the heap from fragmenting
# (thousands of short-lived multi-MB blocks interleaved with small long-lived results grew glibc's heap
# by ~1 GB at n = 2e4 single-threaded; n = 1e5 ran out of a 16 GiB address space).


def kernel_matmul(
    x: Tensor, y: Tensor, v: Tensor, kernel: Kernel, same: bool, budget: int, grad: bool, precision: str = "ieee"
) -> Tensor:
    """K(x, y) v in row blocks."""
    n, m = x.shape[0], y.shape[0]
    rows = _rows(n, m, x, "matmul", budget)
    if grad:
        sqn = _norms(x, y, same)

        def block(a: int, b: int) -> Tensor:
            return _product(kernel.f(block_sq_dists(x[a:b], y, sqn[0][a:b], sqn[1], a, same)), v, precision)

        return _autograd_blocks(block, n, rows)
    left, right = _fast_operands(x, y, same, kernel)
    out = torch.empty(n, v.shape[1], dtype=v.dtype, device=v.device)
    scratch = x.new_empty(rows, m)
    for a, b in _row_blocks(n, rows):
        e = torch.mm(left[a:b], right.T, out=scratch[: b - a])
        k, _ = _finish_scaled(e, kernel, a, same)
        out[a:b] = _product(k, v, precision)
    return out


def stein_sums(
    x: Tensor, score: Tensor | None, kernel: Kernel, budget: int, grad: bool, precision: str = "ieee"
) -> Tensor:
    """Σ_j [k_ij s_j + g_ij (x_i - x_j)] per row (only the repulsive sum when score is None).

    RBF: one GEMM K·[S, X, 1] and the epilogue (2/h)(x_i (K1)_i - (KX)_i) (docs/implementation-notes.md, "Pairwise kernels").
    The epilogue subtracts two sums, but of centred points, so their ratio to the result is bounded by
    ||x̃_i|| / bandwidth rather than by the offset of the cloud (checked by the offset test).
    Other kernels: K·S and G·[X, 1] with G = -2 f'(D).
    """
    n, d = x.shape
    rows = _rows(n, n, x, "stein", budget)
    ones = x.new_ones(n, 1)
    rbf = isinstance(kernel, RBF)
    parts = [x, ones] if (score is None or not rbf) else [score, x, ones]
    rhs = torch.cat(parts, dim=1)
    if grad:
        sqn = _norms(x, x, True)

        def block(a: int, b: int) -> Tensor:
            xb = x[a:b]
            dist = block_sq_dists(xb, x, sqn[0][a:b], sqn[1], a, True)
            if rbf:
                k = kernel.f(dist)
                prod = _product(k, rhs, precision)
                rep = (xb * prod[:, -1:] - prod[:, -d - 1 : -1]) * (2.0 / kernel.h)
                return rep if score is None else prod[:, :d] + rep
            k, g = kernel.f_and_g(dist)
            prod = _product(g, rhs, precision)
            rep = xb * prod[:, -1:] - prod[:, :d]
            return rep if score is None else _product(k, score, precision) + rep

        return _autograd_blocks(block, n, rows)
    left, right = _fast_operands(x, x, True, kernel)
    rhs = gemm_rhs(parts)  # the same columns, padded to a fast GEMM width
    xs = d * (len(parts) - 2)  # the X columns: after S (RBF with a score), else first
    out = x.new_empty(n, d)
    scratch = x.new_empty(rows, n)
    scratch2 = None if rbf else x.new_empty(rows, n)
    scale = 2.0 / _host_scalar(kernel.h)
    for a, b in _row_blocks(n, rows):
        xb = x[a:b]
        e = torch.mm(left[a:b], right.T, out=scratch[: b - a])
        k, g = _finish_scaled(e, kernel, a, True, None if rbf else scratch2[: b - a])
        prod = _product(k if rbf else g, rhs, precision)
        # Σ_j w_ij (x_j - x_i) = (W X)_i - x_i (W 1)_i, then the S-part minus (2/h for RBF) that.
        neg_rep = torch.addcmul(prod[:, xs : xs + d], xb, prod[:, xs + d : xs + d + 1], value=-1.0)
        if rbf:
            neg_rep = neg_rep * scale
        if score is None:
            out[a:b] = neg_rep.neg_()
        else:
            attract = prod[:, :d] if rbf else _product(k, score, precision)
            torch.sub(attract, neg_rep, out=out[a:b])
    return out


def stein_sums_from_sq(x: Tensor, score: Tensor, kernel: RBF, sq: Tensor, precision: str = "ieee") -> Tensor:
    """`stein_sums` for the RBF kernel with a score, without autograd, from sq [n, n] = ||x_i - x_j||² of the
    centred particles x that the caller already formed (the exact median's matrix: clamped at 0, exact 0 on
    the diagonal). sq is CONSUMED: overwritten by the kernel values, in cache-sized row blocks, each followed by
    its GEMM against [S, X, 1] (padded to a fast width) and the epilogue of `stein_sums`. Saves the distance
    GEMM of `stein_sums` (n²(d + 2) multiply-adds) and all scratch memory."""
    n, d = x.shape
    if sq.shape != (n, n) or sq.dtype != x.dtype or sq.device != x.device:
        raise ValueError(f"sq must be a {x.dtype} [{n}, {n}] matrix on {x.device}, got {sq.dtype} "
                         f"{tuple(sq.shape)} on {sq.device}")
    rows = plan_row_block(n, n, itemsize=x.element_size(), temporaries=1, budget=sq.numel() * x.element_size(),
                          target=block_target(x.device))
    rhs = gemm_rhs([score, x, x.new_ones(n, 1)])
    h = _host_scalar(kernel.h)
    scale = 2.0 / h
    out = x.new_empty(n, d)
    for a, b in _row_blocks(n, rows):
        k = exp_(sq[a:b].mul_(-1.0 / h))
        prod = _product(k, rhs, precision)
        neg_rep = torch.addcmul(prod[:, d : 2 * d], x[a:b], prod[:, 2 * d : 2 * d + 1], value=-1.0).mul_(scale)
        torch.sub(prod[:, :d], neg_rep, out=out[a:b])
    return out


def ksd_sum(x: Tensor, score: Tensor, kernel: Kernel, exclude_diagonal: bool, budget: int, grad: bool) -> Tensor:
    """Σ_ij u_p(x_i, x_j) in row blocks (Stein kernel, speed-up paper eq. 6), all terms as GEMMs.

    (s_i - s_j)·(x_i - x_j) = a_i + a_j - s̃_i·x_j - s̃_j·x_i with a = s̃·x and s̃ = s - mean(s): the
    difference is invariant to shifting s, and centring s keeps the four terms small when the scores share
    a large common part (particles far from the mode).
    """
    n, d = x.shape
    sqn = (x * x).sum(1)
    s_c = score - score.detach().mean(0, keepdim=True)
    a = (s_c * x).sum(1)
    rows = _rows(n, n, x, "ksd", budget)

    def block(lo: int, hi: int) -> Tensor:
        xb = x[lo:hi]
        dist = block_sq_dists(xb, x, sqn[lo:hi], sqn, lo, True)
        k, d1, d2 = kernel.derivatives(dist)
        cross = a[lo:hi].unsqueeze(1) + a.unsqueeze(0) - s_c[lo:hi] @ x.T - xb @ s_c.T
        u = k * (score[lo:hi] @ score.T) - 2.0 * d1 * cross - 4.0 * d2 * dist - (2.0 * d) * d1
        if exclude_diagonal:
            diag = u.diagonal(offset=lo)
            u = u.diagonal_scatter(torch.zeros_like(diag), offset=lo)
        return u.sum(1)  # per-row partial sums, added once at the end (deterministic)

    if grad:
        return _autograd_blocks(block, n, rows).sum()
    out = x.new_empty(n)
    for lo, hi in _row_blocks(n, rows):
        out[lo:hi] = block(lo, hi)
    return out.sum()


def sq_dists(x: Tensor, y: Tensor, same: bool, budget: int) -> Tensor:
    """The full n×m matrix of squared distances (centred Gram form), built block by block.

    Used by the exact median, which needs all n(n-1)/2 values anyway; the blocks only bound the GEMM
    temporaries on top of the output.
    """
    n, m = x.shape[0], y.shape[0]
    left, right = lifted_operands(x, y, same)
    rows = _rows(n, m, x, "sq_dists", budget)
    out = x.new_empty(n, m)
    for a, b in _row_blocks(n, rows):
        torch.mm(left[a:b], right.T, out=out[a:b])
    out.clamp_min_(0.0)
    if same:
        out.fill_diagonal_(0.0)
    return out
