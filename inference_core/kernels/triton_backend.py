"""`triton` backend: fused flash-style kernels; the n×m kernel matrix is never stored.

One kernel serves every kernel-times-matrix reduction (docs/implementation-notes.md, "Pairwise kernels"):

    OUT_K[i, :] = Σ_j k(x_i, y_j) V[j, :]        OUT_G[i, :] = Σ_j g(x_i, y_j) W[j, :]

with g = -2 f'(r²) the repulsion weight. A program owns BM rows of X and one slice of the columns (split over
column blocks when n is small, so the grid fills the device; the slices' partial sums are added by torch, in
a fixed order). Per BN-column tile it forms the squared distances, the kernel values in registers, and feeds
them to tensor-core products accumulated in float32 registers (the rows' partial sums stay in registers for
the whole pass):

* distances: direct differences Σ_c (x_ic - y_jc)² for small d (`direct_distances`: no padding of d to a
  tensor-core width, and exact zeros on the diagonal), or the centred Gram form |x|² + |y|² - 2 x·y with x·y on the
  tensor cores in `tf32x3` (three TF32 products: float32-level error, docs/implementation-notes.md) — never
  single-pass TF32, whose error in x·y feeds the cancellation of the Gram form;
* the kernel: `exp2` with log₂e folded into the bandwidth (RBF), `exp2(β·log2(c² + r²/h))` (IMQ);
* the second product: `ieee` with float32 FMAs when it has at most ELEMENTWISE_MAX_P columns (the rows'
  partial sums in register tiles, reduced once), else as `tf32x3` on the tensor cores; `tf32` in one TF32
  pass; `bf16` as operands rounded to bfloat16 multiplied in TF32; always float32 accumulation.

The SVGD direction is one such pass: for RBF, g = (2/h) k, so Σ_j [k_ij s_j + g_ij (x_i - x_j)] =
K·(S - (2/h) X) + (2/h) x_i (K·1)_i, a single product against [S - (2/h) X, 1]; IMQ needs K·S and G·[X, 1].
The KSD kernel sums the Stein kernel per row tile (direct differences for small d), partial sums added by
torch, so results are deterministic.

Forward only (dispatch refuses it under autograd). Kernels are plain functions decorated with `triton.jit`
at first use, in the mode TRITON_INTERPRET selects at that moment, so the module imports on any machine
and the kernels run on CPU tensors under TRITON_INTERPRET=1 (how the tests exercise them). Launch
configurations come from `triton_tuning` (timed once per device and shape class on CUDA, fixed when
interpreted).
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

import torch
import triton
import triton.language as tl
from torch import Tensor

from inference_core.kernels import triton_tuning
from inference_core.kernels.functions import RBF, Kernel

#: Largest d whose distances are formed by direct differences, by precision (above: the Gram form on tensor
#: cores). Measured on an H200 (docs/benchmarks.md, "Pairwise kernels (GPU)", distance forms): direct is
#: faster up to d = 4 in ieee and d = 8 in tf32; at d = 16 the Gram form is 3-7× faster.
DIRECT_MAX_D = {"ieee": 4, "tf32": 8, "bf16": 8}
#: Widest ieee right-hand side summed with float32 FMAs instead of tf32x3 tensor-core products (at d = 2,
#: n = 10⁵: 5.4 ms against 25.8 ms).
ELEMENTWISE_MAX_P = 4
LOG2E = 1.4426950408889634


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def _pairs_kernel(
    X, Y, V, W, SQX, SQY, PARAMS, OUT_K, OUT_G,
    n, m, d, cols_per_split,
    sx, sy, sv, sw, sok_s, sok, sog_s, sog,
    P, Q,
    KIND: tl.constexpr, SAME: tl.constexpr, DIRECT: tl.constexpr, D: tl.constexpr,
    HAS_V: tl.constexpr, HAS_W: tl.constexpr, ROWSUM: tl.constexpr, MPREC: tl.constexpr, BF16: tl.constexpr,
    EWP: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PP: tl.constexpr, QQ: tl.constexpr,
):  # fmt: skip
    """OUT_K[s, i, :P] = Σ_{j in split s} k_ij V[j, :P]; OUT_G[s, i, :Q] = Σ_{j in split s} g_ij W[j, :Q].

    EWP > 0: the K side has EWP ≤ 4 columns, summed with float32 FMAs into (BM, BN) register tiles that are
    reduced once at the end (exact float32, no tensor-core split). ROWSUM: OUT_K[s, i, P] = Σ_{j in split s} k_ij as well (when a column of ones in V would widen the
    product past a power of two). PARAMS = [-log2(e)/h, 1/h, c², β, -2β/h]. BF16: operands rounded to bfloat16, then multiplied
    as TF32 (exact for bfloat16 values) with float32 accumulation: bfloat16 semantics without the bf16 dot,
    which gave a 0.9 relative error for IMQ at d = 1 on an H200 (Triton 3.6; 2026-11-28) and was slower."""
    pid_m = tl.program_id(0)
    pid_s = tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)
    row_ok = rows < n
    nscale = tl.load(PARAMS)
    inv_h = tl.load(PARAMS + 1)
    c2 = tl.load(PARAMS + 2)
    beta = tl.load(PARAMS + 3)
    g_coef = tl.load(PARAMS + 4)
    pv = tl.arange(0, PP)
    qw = tl.arange(0, QQ)
    acc_k = tl.zeros((BM, PP), dtype=tl.float32)
    acc_g = tl.zeros((BM, QQ), dtype=tl.float32)
    acc_r = tl.zeros((BM,), dtype=tl.float32)
    e0 = tl.zeros((BM, BN), dtype=tl.float32)
    e1 = tl.zeros((BM, BN), dtype=tl.float32)
    e2 = tl.zeros((BM, BN), dtype=tl.float32)
    e3 = tl.zeros((BM, BN), dtype=tl.float32)
    if not DIRECT:
        sq_i = tl.load(SQX + rows, mask=row_ok, other=0.0)
    j_begin = pid_s * cols_per_split
    j_end = tl.minimum(j_begin + cols_per_split, m)
    for j0 in range(j_begin, j_end, BN):
        cols = j0 + tl.arange(0, BN)
        col_ok = cols < j_end
        if DIRECT:
            dist = tl.zeros((BM, BN), dtype=tl.float32)
            for c in tl.static_range(D):
                xi = tl.load(X + rows * sx + c, mask=row_ok, other=0.0)
                yj = tl.load(Y + cols * sy + c, mask=col_ok, other=0.0)
                diff = xi[:, None] - yj[None, :]
                dist += diff * diff
        else:
            dots = tl.zeros((BM, BN), dtype=tl.float32)
            for k0 in range(0, d, BK):
                ks = k0 + tl.arange(0, BK)
                k_ok = ks < d
                xi = tl.load(X + rows[:, None] * sx + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
                yj = tl.load(Y + cols[:, None] * sy + ks[None, :], mask=col_ok[:, None] & k_ok[None, :], other=0.0)
                dots = tl.dot(xi, tl.trans(yj), dots, input_precision="tf32x3")
            sq_j = tl.load(SQY + cols, mask=col_ok, other=0.0)
            dist = tl.maximum(sq_i[:, None] + sq_j[None, :] - 2.0 * dots, 0.0)
            if SAME:
                dist = tl.where(rows[:, None] == cols[None, :], 0.0, dist)
        if KIND == 0:
            kij = tl.math.exp2(dist * nscale)
        else:
            lb = tl.math.log2(c2 + dist * inv_h)
            kij = tl.math.exp2(beta * lb)
        # Columns past the end meet zero rows of V and W, so their kernel values need no mask.
        if EWP > 0:
            e0 += kij * tl.load(V + cols * sv, mask=col_ok, other=0.0)[None, :]
            if EWP > 1:
                e1 += kij * tl.load(V + cols * sv + 1, mask=col_ok, other=0.0)[None, :]
            if EWP > 2:
                e2 += kij * tl.load(V + cols * sv + 2, mask=col_ok, other=0.0)[None, :]
            if EWP > 3:
                e3 += kij * tl.load(V + cols * sv + 3, mask=col_ok, other=0.0)[None, :]
        elif HAS_V:
            vj = tl.load(V + cols[:, None] * sv + pv[None, :], mask=col_ok[:, None] & (pv[None, :] < P), other=0.0)
            if BF16:
                acc_k = tl.dot(kij.to(tl.bfloat16).to(tl.float32), vj.to(tl.bfloat16).to(tl.float32), acc_k,
                               input_precision=MPREC)
            else:
                acc_k = tl.dot(kij, vj, acc_k, input_precision=MPREC)
            if ROWSUM:  # the same rounded values the product used, so their rounding cancels downstream
                kr = kij.to(tl.bfloat16).to(tl.float32) if BF16 else kij
                acc_r += tl.sum(tl.where(col_ok[None, :], kr, 0.0), axis=1)
        if HAS_W:
            if KIND == 0:  # noqa: SIM108 (constexpr branch: lb exists only for IMQ)
                gij = kij * (2.0 * inv_h)
            else:
                gij = g_coef * tl.math.exp2((beta - 1.0) * lb)
            wj = tl.load(W + cols[:, None] * sw + qw[None, :], mask=col_ok[:, None] & (qw[None, :] < Q), other=0.0)
            if BF16:
                acc_g = tl.dot(gij.to(tl.bfloat16).to(tl.float32), wj.to(tl.bfloat16).to(tl.float32), acc_g,
                               input_precision=MPREC)
            else:
                acc_g = tl.dot(gij, wj, acc_g, input_precision=MPREC)
    if EWP > 0:
        base = OUT_K + pid_s * sok_s + rows * sok
        tl.store(base, tl.sum(e0, axis=1), mask=row_ok)
        if EWP > 1:
            tl.store(base + 1, tl.sum(e1, axis=1), mask=row_ok)
        if EWP > 2:
            tl.store(base + 2, tl.sum(e2, axis=1), mask=row_ok)
        if EWP > 3:
            tl.store(base + 3, tl.sum(e3, axis=1), mask=row_ok)
    elif HAS_V:
        tl.store(OUT_K + pid_s * sok_s + rows[:, None] * sok + pv[None, :], acc_k,
                 mask=row_ok[:, None] & (pv[None, :] < P))
        if ROWSUM:
            tl.store(OUT_K + pid_s * sok_s + rows * sok + P, acc_r, mask=row_ok)
    if HAS_W:
        tl.store(OUT_G + pid_s * sog_s + rows[:, None] * sog + qw[None, :], acc_g,
                 mask=row_ok[:, None] & (qw[None, :] < Q))


def _ksd_kernel(
    X, S, SC, SQX, A, PARAMS, OUT,
    n, d,
    sx, ss, ssc,
    KIND: tl.constexpr, DIRECT: tl.constexpr, D: tl.constexpr, EXCLUDE_DIAG: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
):  # fmt: skip
    """OUT[pid] = Σ_{i in tile, j} u_p(x_i, x_j) (j ≠ i when EXCLUDE_DIAG).

    DIRECT: (s_i - s_j)·(x_i - x_j) and r² from differences; else the Gram form (s_i - s_j)·(x_i - x_j) =
    a_i + a_j - s̃_i·x_j - x_i·s̃_j with s̃ the centred scores (a_i = s̃_i·x_i) on tensor cores (tf32x3)."""
    pid_m = tl.program_id(0)
    rows = pid_m * BM + tl.arange(0, BM)
    row_ok = rows < n
    inv_h = tl.load(PARAMS + 1)
    c2 = tl.load(PARAMS + 2)
    beta = tl.load(PARAMS + 3)
    if not DIRECT:
        sq_i = tl.load(SQX + rows, mask=row_ok, other=0.0)
        a_i = tl.load(A + rows, mask=row_ok, other=0.0)
    total = tl.zeros((BM, BN), dtype=tl.float32)
    for j0 in range(0, n, BN):
        cols = j0 + tl.arange(0, BN)
        col_ok = cols < n
        if DIRECT:
            dist = tl.zeros((BM, BN), dtype=tl.float32)
            ssd = tl.zeros((BM, BN), dtype=tl.float32)
            cross = tl.zeros((BM, BN), dtype=tl.float32)
            for c in tl.static_range(D):
                xi = tl.load(X + rows * sx + c, mask=row_ok, other=0.0)
                xj = tl.load(X + cols * sx + c, mask=col_ok, other=0.0)
                si = tl.load(S + rows * ss + c, mask=row_ok, other=0.0)
                sj = tl.load(S + cols * ss + c, mask=col_ok, other=0.0)
                dx = xi[:, None] - xj[None, :]
                dist += dx * dx
                ssd += si[:, None] * sj[None, :]
                cross += (si[:, None] - sj[None, :]) * dx
        else:
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
                xx = tl.dot(xi, tl.trans(xj), xx, input_precision="tf32x3")
                ssd = tl.dot(si, tl.trans(sj), ssd, input_precision="tf32x3")
                sx_ = tl.dot(sci, tl.trans(xj), sx_, input_precision="tf32x3")
                xs_ = tl.dot(xi, tl.trans(scj), xs_, input_precision="tf32x3")
            sq_j = tl.load(SQX + cols, mask=col_ok, other=0.0)
            a_j = tl.load(A + cols, mask=col_ok, other=0.0)
            dist = tl.maximum(sq_i[:, None] + sq_j[None, :] - 2.0 * xx, 0.0)
            dist = tl.where(rows[:, None] == cols[None, :], 0.0, dist)
            cross = a_i[:, None] + a_j[None, :] - sx_ - xs_
        if KIND == 0:
            kij = tl.math.exp2(dist * tl.load(PARAMS))
            d1 = -kij * inv_h
            d2 = kij * (inv_h * inv_h)
        else:
            base = c2 + dist * inv_h
            lb = tl.math.log2(base)
            kij = tl.math.exp2(beta * lb)
            d1 = (beta * inv_h) * tl.math.exp2((beta - 1.0) * lb)
            d2 = ((beta - 1.0) * inv_h) * d1 / base
        u = kij * ssd - 2.0 * d1 * cross - 4.0 * d2 * dist - (2.0 * d) * d1
        keep = row_ok[:, None] & col_ok[None, :]
        if EXCLUDE_DIAG:
            keep = keep & (rows[:, None] != cols[None, :])
        total += tl.where(keep, u, 0.0)
    tl.store(OUT + pid_m, tl.sum(tl.sum(total, axis=1), axis=0))


_JITTED: dict[bool, dict[str, Any]] = {}


def _kernels() -> dict[str, Any]:
    mode = _interpreting()
    if mode not in _JITTED:
        _JITTED[mode] = {"pairs": triton.jit(_pairs_kernel), "ksd": triton.jit(_ksd_kernel)}
    return _JITTED[mode]


def _scalar(v: object, like: Tensor) -> Tensor:
    return v.detach().reshape(()).to(like.device, torch.float32) if isinstance(v, Tensor) else torch.tensor(
        float(v), dtype=torch.float32, device=like.device)


def _params(kernel: Kernel, like: Tensor) -> Tensor:
    """[-log2(e)/h, 1/h, c², β, -2β/h] as a float32 device tensor: read inside the kernel, so no host
    synchronisation (h may be a device tensor)."""
    inv_h = 1.0 / _scalar(kernel.h, like)
    if isinstance(kernel, RBF):
        zero = torch.zeros((), device=like.device)
        vals = [-LOG2E * inv_h, inv_h, zero, zero, zero]
    else:
        c, beta = _scalar(kernel.c, like), _scalar(kernel.beta, like)
        vals = [-LOG2E * inv_h, inv_h, c * c, beta, -2.0 * beta * inv_h]
    return torch.stack(vals).contiguous()


def direct_distances(d: int, precision: str) -> bool:
    return d <= DIRECT_MAX_D[precision]


def _kind(kernel: Kernel) -> int:
    return 0 if isinstance(kernel, RBF) else 1


def _width(p: int) -> int:
    """A tensor-core operand width: a power of two ≥ 16."""
    return max(16, triton.next_power_of_2(p))


def _precision_args(precision: str) -> tuple[str, bool]:
    """(tl.dot input precision, round operands to bfloat16)."""
    return {"ieee": ("tf32x3", False), "tf32": ("tf32", False), "bf16": ("tf32", True)}[precision]


@cache
def _multiprocessors(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _split(n_rows: int, m: int, bm: int, bn: int, device: torch.device) -> int:
    """Column slices per row tile, so the grid gives every multiprocessor about two programs."""
    if _interpreting() or device.type != "cuda":
        return 1
    sms = _multiprocessors(device)
    tiles = triton.cdiv(n_rows, bm)
    return max(1, min(triton.cdiv(2 * sms, tiles), triton.cdiv(m, 4 * bn)))


def pair_sums(
    x: Tensor, y: Tensor, v: Tensor | None, w: Tensor | None, kernel: Kernel, same: bool, precision: str,
    rowsum: bool = False,
) -> tuple[Tensor | None, Tensor | None]:
    """(K(x, y) v, G(x, y) w), either side skipped when its right-hand side is None (x, y centred float32);
    with `rowsum`, K(x, y)·1 is appended to the first as one more column."""
    x = x.contiguous()
    y = x if same else y.contiguous()
    v = None if v is None else v.contiguous()
    w = None if w is None else w.contiguous()
    d = x.shape[1]
    direct = direct_distances(d, precision)
    params = _params(kernel, x)
    widths = (0 if v is None else _width(v.shape[1])) + (0 if w is None else _width(w.shape[1]))
    shape_class = f"d{d}-w{widths}-k{_kind(kernel)}-{precision}"

    def probe(cfg: triton_tuning.Config) -> object:
        rows = triton_tuning.TUNE_ROWS
        return _launch_pairs(cfg, x[:rows], y[:rows], None if v is None else v[:rows],
                             None if w is None else w[:rows], params, kernel, same, precision, rowsum)

    cfg = triton_tuning.config("pairs", x.device, direct=direct, shape_class=shape_class, run=probe)
    return _launch_pairs(cfg, x, y, v, w, params, kernel, same, precision, rowsum)


def _launch_pairs(
    cfg: triton_tuning.Config, x: Tensor, y: Tensor, v: Tensor | None, w: Tensor | None, params: Tensor,
    kernel: Kernel, same: bool, precision: str, rowsum: bool,
) -> tuple[Tensor | None, Tensor | None]:  # fmt: skip
    n, d = x.shape
    m = y.shape[0]
    direct = direct_distances(d, precision)
    sqx = x if direct else (x * x).sum(1).contiguous()
    sqy = sqx if (direct or same) else (y * y).sum(1).contiguous()
    p = 0 if v is None else v.shape[1]
    q = 0 if w is None else w.shape[1]
    vv = x if v is None else v
    ww = x if w is None else w
    mprec, bf16 = _precision_args(precision)
    bk = 16 if direct else max(16, min(64, triton.next_power_of_2(d)))
    splits = _split(n, m, cfg.bm, cfg.bn, x.device)
    per_split = triton.cdiv(triton.cdiv(m, splits), cfg.bn) * cfg.bn
    splits = triton.cdiv(m, per_split)
    out_k = torch.empty(splits, n, max(p + rowsum, 1), dtype=torch.float32, device=x.device)
    out_g = torch.empty(splits, n, max(q, 1), dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(n, cfg.bm), splits)
    _kernels()["pairs"][grid](
        x, y, vv, ww, sqx, sqy, params, out_k, out_g,
        n, m, d, per_split,
        x.stride(0), y.stride(0), vv.stride(0), ww.stride(0),
        out_k.stride(0), out_k.stride(1), out_g.stride(0), out_g.stride(1),
        p, q,
        KIND=_kind(kernel), SAME=same, DIRECT=direct, D=d if direct else 1,
        HAS_V=v is not None, HAS_W=w is not None, ROWSUM=rowsum, MPREC=mprec, BF16=bf16,
        EWP=p if (precision == "ieee" and 0 < p <= ELEMENTWISE_MAX_P and not rowsum) else 0,
        BM=cfg.bm, BN=cfg.bn, BK=bk, PP=_width(max(p, 1)), QQ=_width(max(q, 1)),
        **_launch_options(cfg, x),
    )  # fmt: skip
    return (out_k.sum(0) if v is not None else None), (out_g.sum(0) if w is not None else None)


def _launch_options(cfg: triton_tuning.Config, x: Tensor) -> dict:
    return cfg.launch if x.device.type == "cuda" else {}


def kernel_matmul(x: Tensor, y: Tensor, v: Tensor, kernel: Kernel, same: bool, precision: str) -> Tensor:
    """K(x, y) v, fused (x, y centred float32)."""
    out, _ = pair_sums(x, y, v.to(torch.float32), None, kernel, same, precision)
    return out


def stein_sums(x: Tensor, score: Tensor | None, kernel: Kernel, precision: str) -> Tensor:
    """Σ_j [k_ij s_j + g_ij (x_i - x_j)] per row, fused (only the repulsion when score is None)."""
    n, d = x.shape
    ones = x.new_ones(n, 1)
    if isinstance(kernel, RBF):
        # g = (2/h) k: one product against [S - (2/h) X, 1].
        two_over_h = 2.0 / _scalar(kernel.h, x)
        rhs = -two_over_h * x if score is None else score - two_over_h * x
        if _width(d + 1) == _width(d):
            prod, _ = pair_sums(x, x, torch.cat([rhs, ones], dim=1), None, kernel, True, precision)
        else:
            prod, _ = pair_sums(x, x, rhs, None, kernel, True, precision, rowsum=True)
        return prod[:, :d] + two_over_h * x * prod[:, d:]
    attract, repel = pair_sums(x, x, score, torch.cat([x, ones], dim=1), kernel, True, precision)
    out = x * repel[:, d:] - repel[:, :d]
    return out if attract is None else out + attract


def ksd_sum(x: Tensor, score: Tensor, kernel: Kernel, exclude_diagonal: bool) -> Tensor:
    """Σ_ij u_p(x_i, x_j), fused; per-row-tile partial sums added by torch (deterministic)."""
    x = x.contiguous()
    s = score.contiguous()
    n, d = x.shape
    direct = direct_distances(d, "ieee")
    s_c = (s - s.mean(0, keepdim=True)).contiguous()
    sqx = (x * x).sum(1).contiguous()
    a = (s_c * x).sum(1).contiguous()
    bk = 16 if direct else max(16, min(64, triton.next_power_of_2(d)))
    cfg = triton_tuning.config("ksd", x.device, direct=direct, shape_class=f"d{d}-k{_kind(kernel)}")
    partial = torch.empty(triton.cdiv(n, cfg.bm), dtype=torch.float32, device=x.device)
    _kernels()["ksd"][(partial.numel(),)](
        x, s, s_c, sqx, a, _params(kernel, x), partial,
        n, d,
        x.stride(0), s.stride(0), s_c.stride(0),
        KIND=_kind(kernel), DIRECT=direct, D=d if direct else 1, EXCLUDE_DIAG=exclude_diagonal,
        BM=cfg.bm, BN=cfg.bn, BK=bk,
        **_launch_options(cfg, x),
    )  # fmt: skip
    return partial.sum()
