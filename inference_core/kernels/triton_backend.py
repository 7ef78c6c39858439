"""`triton` backend: one fused flash-style kernel per primitive; the n×m kernel matrix is never stored.

Structure (docs/implementation-notes.md, "Pairwise kernels": the FlashAttention template): a program owns BM rows of X and BP output columns; it
walks over BN-row tiles of Y, forms the tile of squared distances from float32 dots (`input_precision=
"ieee"`, over BK-wide chunks of the features) of the centred points, applies the kernel in registers, and
accumulates kernel-tile × right-hand-side-tile. 0 < k ≤ 1 needs no running max. The precision of that
second product is explicit (`ieee`, `tf32` tensor cores, or `bf16` inputs with float32 accumulation),
never inherited from torch's TF32 flags; distances always stay in float32.

Scalars (the KSD) are reduced per row tile into a vector summed by torch, so results are deterministic.

Forward only (dispatch refuses it under autograd). Kernels are plain functions decorated with `triton.jit`
at first use, in the mode TRITON_INTERPRET selects at that moment, so the module imports on any machine
and the kernels run on CPU tensors under TRITON_INTERPRET=1 (how the tests exercise them).
Block sizes are fixed (64×64 on CUDA, 32×32 interpreted); autotuning is left to the GPU benchmark.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

from inference_core.kernels.functions import RBF, Kernel

_PREC = {"ieee": 0, "tf32": 1, "bf16": 2}
_BF16_EMULATED = 3  # the interpreter's bf16 tl.dot is wrong: round to bf16, multiply in fp32 (same result)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def _matmul_kernel(
    X, Y, V, SQX, SQY, PARAMS, OUT,
    n, m, d, p,
    sx, sy, sv, so,
    KIND: tl.constexpr, SAME: tl.constexpr, PREC: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BP: tl.constexpr,
):  # fmt: skip
    """OUT[i, c] = Σ_j k(x_i, y_j) V[j, c]."""
    pid_m = tl.program_id(0)
    pid_p = tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)
    outc = pid_p * BP + tl.arange(0, BP)
    row_ok = rows < n
    h = tl.load(PARAMS)
    c2 = tl.load(PARAMS + 1)
    beta = tl.load(PARAMS + 2)
    sq_i = tl.load(SQX + rows, mask=row_ok, other=0.0)
    acc = tl.zeros((BM, BP), dtype=tl.float32)
    for j0 in range(0, m, BN):
        cols = j0 + tl.arange(0, BN)
        col_ok = cols < m
        dots = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, d, BK):
            ks = k0 + tl.arange(0, BK)
            k_ok = ks < d
            xi = tl.load(X + rows[:, None] * sx + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            yj = tl.load(Y + cols[:, None] * sy + ks[None, :], mask=col_ok[:, None] & k_ok[None, :], other=0.0)
            dots += tl.dot(xi, tl.trans(yj), input_precision="ieee")
        sq_j = tl.load(SQY + cols, mask=col_ok, other=0.0)
        dist = tl.maximum(sq_i[:, None] + sq_j[None, :] - 2.0 * dots, 0.0)
        if SAME:
            dist = tl.where(rows[:, None] == cols[None, :], 0.0, dist)
        if KIND == 0:  # noqa: SIM108 (constexpr branch, kept as a statement for Triton)
            kij = tl.exp(-dist / h)
        else:
            kij = tl.exp(beta * tl.log(c2 + dist / h))
        kij = tl.where(col_ok[None, :], kij, 0.0)
        vj = tl.load(V + cols[:, None] * sv + outc[None, :], mask=col_ok[:, None] & (outc[None, :] < p), other=0.0)
        if PREC == 0:
            acc += tl.dot(kij, vj, input_precision="ieee")
        elif PREC == 1:
            acc += tl.dot(kij, vj, input_precision="tf32")
        elif PREC == 2:
            acc += tl.dot(kij.to(tl.bfloat16), vj.to(tl.bfloat16))
        else:
            acc += tl.dot(
                kij.to(tl.bfloat16).to(tl.float32), vj.to(tl.bfloat16).to(tl.float32), input_precision="ieee"
            )
    tl.store(OUT + rows[:, None] * so + outc[None, :], acc, mask=row_ok[:, None] & (outc[None, :] < p))


def _stein_kernel(
    X, S, SQX, PARAMS, OUT,
    n, d,
    sx, ss, so,
    KIND: tl.constexpr, HAS_S: tl.constexpr, PREC: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BP: tl.constexpr,
):  # fmt: skip
    """OUT[i, c] = Σ_j [k_ij S[j, c] + g_ij (x_ic - x_jc)], g = -2 f'(r²); the repulsion of each tile
    is accumulated as x_i Σ_j g_ij - Σ_j g_ij x_j inside the pass, never as two global sums."""
    pid_m = tl.program_id(0)
    pid_p = tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)
    outc = pid_p * BP + tl.arange(0, BP)
    row_ok = rows < n
    out_ok = outc < d
    h = tl.load(PARAMS)
    c2 = tl.load(PARAMS + 1)
    beta = tl.load(PARAMS + 2)
    sq_i = tl.load(SQX + rows, mask=row_ok, other=0.0)
    xi_out = tl.load(X + rows[:, None] * sx + outc[None, :], mask=row_ok[:, None] & out_ok[None, :], other=0.0)
    acc = tl.zeros((BM, BP), dtype=tl.float32)
    for j0 in range(0, n, BN):
        cols = j0 + tl.arange(0, BN)
        col_ok = cols < n
        dots = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, d, BK):
            ks = k0 + tl.arange(0, BK)
            k_ok = ks < d
            xi = tl.load(X + rows[:, None] * sx + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            xj = tl.load(X + cols[:, None] * sx + ks[None, :], mask=col_ok[:, None] & k_ok[None, :], other=0.0)
            dots += tl.dot(xi, tl.trans(xj), input_precision="ieee")
        sq_j = tl.load(SQX + cols, mask=col_ok, other=0.0)
        dist = tl.maximum(sq_i[:, None] + sq_j[None, :] - 2.0 * dots, 0.0)
        dist = tl.where(rows[:, None] == cols[None, :], 0.0, dist)
        if KIND == 0:
            kij = tl.exp(-dist / h)
            gij = kij * (2.0 / h)
        else:
            base = c2 + dist / h
            kij = tl.exp(beta * tl.log(base))
            gij = (-2.0 * beta / h) * kij / base
        kij = tl.where(col_ok[None, :], kij, 0.0)
        gij = tl.where(col_ok[None, :], gij, 0.0)
        xj_out = tl.load(X + cols[:, None] * sx + outc[None, :], mask=col_ok[:, None] & out_ok[None, :], other=0.0)
        if PREC == 0:
            gx = tl.dot(gij, xj_out, input_precision="ieee")
        elif PREC == 1:
            gx = tl.dot(gij, xj_out, input_precision="tf32")
        elif PREC == 2:
            gx = tl.dot(gij.to(tl.bfloat16), xj_out.to(tl.bfloat16))
        else:
            gx = tl.dot(
                gij.to(tl.bfloat16).to(tl.float32), xj_out.to(tl.bfloat16).to(tl.float32), input_precision="ieee"
            )
        if PREC >= 2:
            # Sum the same rounded weights the product used, so their rounding cancels in x_i Σg - Σ g x_j.
            gij = gij.to(tl.bfloat16).to(tl.float32)
        acc += xi_out * tl.sum(gij, axis=1)[:, None] - gx
        if HAS_S:
            sj = tl.load(S + cols[:, None] * ss + outc[None, :], mask=col_ok[:, None] & out_ok[None, :], other=0.0)
            if PREC == 0:
                acc += tl.dot(kij, sj, input_precision="ieee")
            elif PREC == 1:
                acc += tl.dot(kij, sj, input_precision="tf32")
            elif PREC == 2:
                acc += tl.dot(kij.to(tl.bfloat16), sj.to(tl.bfloat16))
            else:
                acc += tl.dot(
                    kij.to(tl.bfloat16).to(tl.float32), sj.to(tl.bfloat16).to(tl.float32), input_precision="ieee"
                )
    tl.store(OUT + rows[:, None] * so + outc[None, :], acc, mask=row_ok[:, None] & out_ok[None, :])


def _ksd_kernel(
    X, S, SC, SQX, A, PARAMS, OUT,
    n, d,
    sx, ss, ssc,
    KIND: tl.constexpr, EXCLUDE_DIAG: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
):  # fmt: skip
    """OUT[pid] = Σ_{i in tile, j} u_p(x_i, x_j), with (s_i - s_j)·(x_i - x_j) = a_i + a_j - s̃_i·x_j - x_i·s̃_j."""
    pid_m = tl.program_id(0)
    rows = pid_m * BM + tl.arange(0, BM)
    row_ok = rows < n
    h = tl.load(PARAMS)
    c2 = tl.load(PARAMS + 1)
    beta = tl.load(PARAMS + 2)
    sq_i = tl.load(SQX + rows, mask=row_ok, other=0.0)
    a_i = tl.load(A + rows, mask=row_ok, other=0.0)
    total = tl.zeros((BM,), dtype=tl.float32)
    for j0 in range(0, n, BN):
        cols = j0 + tl.arange(0, BN)
        col_ok = cols < n
        xx = tl.zeros((BM, BN), dtype=tl.float32)
        ssd = tl.zeros((BM, BN), dtype=tl.float32)
        sx_ = tl.zeros((BM, BN), dtype=tl.float32)
        xs_ = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, d, BK):
            ks = k0 + tl.arange(0, BK)
            mi = row_ok[:, None] & (ks[None, :] < d)
            mj = col_ok[:, None] & (ks[None, :] < d)
            xi = tl.load(X + rows[:, None] * sx + ks[None, :], mask=mi, other=0.0)
            xj = tl.load(X + cols[:, None] * sx + ks[None, :], mask=mj, other=0.0)
            si = tl.load(S + rows[:, None] * ss + ks[None, :], mask=mi, other=0.0)
            sj = tl.load(S + cols[:, None] * ss + ks[None, :], mask=mj, other=0.0)
            sci = tl.load(SC + rows[:, None] * ssc + ks[None, :], mask=mi, other=0.0)
            scj = tl.load(SC + cols[:, None] * ssc + ks[None, :], mask=mj, other=0.0)
            xx += tl.dot(xi, tl.trans(xj), input_precision="ieee")
            ssd += tl.dot(si, tl.trans(sj), input_precision="ieee")
            sx_ += tl.dot(sci, tl.trans(xj), input_precision="ieee")
            xs_ += tl.dot(xi, tl.trans(scj), input_precision="ieee")
        sq_j = tl.load(SQX + cols, mask=col_ok, other=0.0)
        a_j = tl.load(A + cols, mask=col_ok, other=0.0)
        dist = tl.maximum(sq_i[:, None] + sq_j[None, :] - 2.0 * xx, 0.0)
        diag = rows[:, None] == cols[None, :]
        dist = tl.where(diag, 0.0, dist)
        if KIND == 0:
            kij = tl.exp(-dist / h)
            d1 = -kij / h
            d2 = kij / (h * h)
        else:
            base = c2 + dist / h
            kij = tl.exp(beta * tl.log(base))
            d1 = (beta / h) * kij / base
            d2 = ((beta - 1.0) / h) * d1 / base
        cross = a_i[:, None] + a_j[None, :] - sx_ - xs_
        u = kij * ssd - 2.0 * d1 * cross - 4.0 * d2 * dist - (2.0 * d) * d1
        keep = row_ok[:, None] & col_ok[None, :]
        if EXCLUDE_DIAG:
            keep = keep & (rows[:, None] != cols[None, :])
        total += tl.sum(tl.where(keep, u, 0.0), axis=1)
    tl.store(OUT + pid_m, tl.sum(total, axis=0))


_JITTED: dict[bool, dict[str, Any]] = {}


def _kernels() -> dict[str, Any]:
    mode = _interpreting()
    if mode not in _JITTED:
        _JITTED[mode] = {
            "matmul": triton.jit(_matmul_kernel),
            "stein": triton.jit(_stein_kernel),
            "ksd": triton.jit(_ksd_kernel),
        }
    return _JITTED[mode]


def _blocks(d: int) -> tuple[int, int, int]:
    """(BM, BN, BK): tl.dot needs every dimension ≥ 16."""
    bm = 32 if _interpreting() else 64
    bk = max(16, min(64, triton.next_power_of_2(d)))
    return bm, bm, bk


def _out_block(p: int) -> int:
    return max(16, min(64, triton.next_power_of_2(p)))


def _params(kernel: Kernel, like: Tensor) -> Tensor:
    """[h, c², β] as a float32 device tensor: read inside the kernel, so no host synchronisation."""
    def as_t(v: object) -> Tensor:
        return v.detach().reshape(()).to(like) if isinstance(v, Tensor) else torch.tensor(float(v))

    if isinstance(kernel, RBF):
        vals = [as_t(kernel.h), torch.tensor(0.0), torch.tensor(0.0)]
    else:
        c = as_t(kernel.c)
        vals = [as_t(kernel.h), c * c, as_t(kernel.beta)]
    return torch.stack([v.to(like) for v in vals]).to(torch.float32).contiguous()


def _precision_code(precision: str) -> int:
    code = _PREC[precision]
    return _BF16_EMULATED if code == 2 and _interpreting() else code


def _kind(kernel: Kernel) -> int:
    return 0 if isinstance(kernel, RBF) else 1


def kernel_matmul(x: Tensor, y: Tensor, v: Tensor, kernel: Kernel, same: bool, precision: str) -> Tensor:
    """K(x, y) v, fused (x, y centred float32)."""
    x = x.contiguous()
    y = x if same else y.contiguous()
    v = v.contiguous()
    n, d = x.shape
    m, p = y.shape[0], v.shape[1]
    sqx = (x * x).sum(1).contiguous()
    sqy = sqx if same else (y * y).sum(1).contiguous()
    out = torch.empty(n, p, dtype=torch.float32, device=x.device)
    bm, bn, bk = _blocks(d)
    bp = _out_block(p)
    grid = (triton.cdiv(n, bm), triton.cdiv(p, bp))
    _kernels()["matmul"][grid](
        x, y, v, sqx, sqy, _params(kernel, x), out,
        n, m, d, p,
        x.stride(0), y.stride(0), v.stride(0), out.stride(0),
        KIND=_kind(kernel), SAME=same, PREC=_precision_code(precision),
        BM=bm, BN=bn, BK=bk, BP=bp,
    )  # fmt: skip
    return out


def stein_sums(x: Tensor, score: Tensor | None, kernel: Kernel, precision: str) -> Tensor:
    """Σ_j [k_ij s_j + g_ij (x_i - x_j)] per row, fused (only the repulsion when score is None)."""
    x = x.contiguous()
    s = x if score is None else score.contiguous()
    n, d = x.shape
    sqx = (x * x).sum(1).contiguous()
    out = torch.empty(n, d, dtype=torch.float32, device=x.device)
    bm, bn, bk = _blocks(d)
    bp = _out_block(d)
    grid = (triton.cdiv(n, bm), triton.cdiv(d, bp))
    _kernels()["stein"][grid](
        x, s, sqx, _params(kernel, x), out,
        n, d,
        x.stride(0), s.stride(0), out.stride(0),
        KIND=_kind(kernel), HAS_S=score is not None, PREC=_precision_code(precision),
        BM=bm, BN=bn, BK=bk, BP=bp,
    )  # fmt: skip
    return out


def ksd_sum(x: Tensor, score: Tensor, kernel: Kernel, exclude_diagonal: bool) -> Tensor:
    """Σ_ij u_p(x_i, x_j), fused; per-row-tile partial sums added by torch (deterministic)."""
    x = x.contiguous()
    s = score.contiguous()
    s_c = (s - s.mean(0, keepdim=True)).contiguous()
    n, d = x.shape
    sqx = (x * x).sum(1).contiguous()
    a = (s_c * x).sum(1).contiguous()
    bm, bn, bk = _blocks(d)
    partial = torch.empty(triton.cdiv(n, bm), dtype=torch.float32, device=x.device)
    _kernels()["ksd"][(partial.numel(),)](
        x, s, s_c, sqx, a, _params(kernel, x), partial,
        n, d,
        x.stride(0), s.stride(0), s_c.stride(0),
        KIND=_kind(kernel), EXCLUDE_DIAG=exclude_diagonal,
        BM=bm, BN=bn, BK=bk,
    )  # fmt: skip
    return partial.sum()
