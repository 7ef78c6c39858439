"""GPU benchmark of the fused pairwise kernels (docs/implementation-notes.md, "Pairwise kernels", benchmark protocol).

One run on a GPU measures, side by side:
1. the peaks of this card (SGEMM, TF32, BF16 through cuBLAS; exp and exp2 throughput through Triton);
2. a configuration sweep of the fused kernel (tile sizes, warps) at n = 10⁴ and 10⁵, d ∈ {2, 16, 64}; its
   winners are the defaults of the grid that follows (and of `inference_core/kernels/triton_tuning.py`);
3. the grid: SVGD direction at n ∈ {10³, 10⁴, 10⁵}, d ∈ {2, 16, 64, 100, 1000}, ieee/tf32/bf16 — fused
   (triton) against dense eager torch, chunked cuBLAS and KeOps (when importable), roofline fraction,
   memory, error against float64 on 256 rows, first call;
4. kernel_matmul, MMD² and KSD² at n ∈ {10⁴, 10⁵}, d ∈ {2, 16} against chunked, with their roofline fraction;
5. n = 10⁶: SVGD direction and kernel_matmul at d ∈ {2, 16, 64}, triton and KeOps (first call apart);
6. the offset test and the kernel solve.

Usage:
    python benchmarks/pairwise_gpu.py --run [--out FILE]    # on a GPU: raw results to FILE (JSON)
    python benchmarks/pairwise_gpu.py --render [FILE]       # FILE → docs/benchmarks.md's GPU section
    TRITON_INTERPRET=1 python benchmarks/pairwise_gpu.py --dry-run   # the code path on CPU at toy sizes
`python benchmarks/pairwise.py --gpu` runs --run then --render. The committed raw results are
benchmarks/results/pairwise_gpu.json; the markdown is always rendered from them.
"""

# ruff: noqa: B023  (every lambda over loop variables is timed within its own iteration)
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from _timing import fmt_ratio, fmt_seconds, median_seconds, replace_section  # noqa: E402

from inference_core.kernels import (  # noqa: E402
    kernel_matmul,
    kernel_solve,
    ksd2,
    median_sq_dist,
    mmd2,
    svgd_direction,
    triton_tuning,
)

DOC = ROOT / "docs" / "benchmarks.md"
TITLE = "Pairwise kernels (GPU)"
RESULTS = ROOT / "benchmarks" / "results" / "pairwise_gpu.json"
#: The raw results the section is rendered from, in order (a later run's section replaces an earlier one's).
RESULT_FILES = [RESULTS, ROOT / "benchmarks" / "results" / "pairwise_gpu_forms.json"]
#: Cells with more n²·d than this are skipped (over a minute a call for any backend).
MAX_CELL_WORK = 2e12
PRECISIONS = ("ieee", "tf32", "bf16")
DEFAULT_SECTIONS = ["check", "sweep", "million", "grid", "primitives", "offset"]


class Bench:
    def __init__(self, dry_run: bool, budget_seconds: float = float("inf")):
        self.dry = dry_run
        self.deadline = time.perf_counter() + budget_seconds
        self.device = torch.device("cpu" if dry_run else "cuda")
        self.sync = (lambda: None) if dry_run else torch.cuda.synchronize
        self.keops = _keops_ready(dry_run)

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def time(self, fn, *, repeats: int = 10, max_seconds: float = 8.0, warmup: int = 2) -> float:
        return median_seconds(fn, sync=self.sync, repeats=repeats, max_seconds=max_seconds, warmup=warmup)

    def cloud(self, n: int, d: int, seed: int, offset: float = 0.0):
        g = torch.Generator(device="cpu").manual_seed(seed)
        return (offset + torch.randn(n, d, generator=g)).to(self.device)


def _keops_ready(dry_run: bool) -> str | None:
    """None when pykeops runs here; else why not (it is optional and not bundled)."""
    if dry_run:
        return "dry run"
    if os.environ.get("PARVIS_BENCH_KEOPS_OFF"):
        return os.environ["PARVIS_BENCH_KEOPS_OFF"]
    try:
        import pykeops.torch  # noqa: F401
        from pykeops.torch import LazyTensor

        x = torch.randn(64, 2, device="cuda")
        ((LazyTensor(x[:, None, :]) - LazyTensor(x[None, :, :])) ** 2).sum(-1).exp().sum(1)
        return None
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {str(exc)[:160]}"


# ---------------------------------------------------------------------------------------------- peaks


def measure_peaks(b: Bench) -> dict:
    if b.dry:
        return {"name": "CPU dry run (numbers meaningless)", "fp32": 1e11, "tf32": 1e11, "bf16": 1e11,
                "exp": 1e10, "exp2": 1e10}  # fmt: skip
    out = {"name": torch.cuda.get_device_name(), "sms": torch.cuda.get_device_properties(0).multi_processor_count}
    size = 8192
    a = torch.randn(size, size, device="cuda")
    prev = torch.backends.cuda.matmul.allow_tf32
    for key, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                             ("bf16", torch.bfloat16, False)):  # fmt: skip
        torch.backends.cuda.matmul.allow_tf32 = tf32
        m = a.to(dtype)
        out[key] = 2 * size**3 / b.time(lambda m=m: m @ m, repeats=10)
    torch.backends.cuda.matmul.allow_tf32 = prev
    out["exp"], out["exp2"] = _special_rates(b)
    return out


def _special_rates(b: Bench) -> tuple[float, float]:
    """Evaluations per second of tl.exp and tl.math.exp2 in a compute-bound chain (64 per element)."""
    import triton
    import triton.language as tl

    @triton.jit
    def chain(x_ptr, n, TWO: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        for _ in range(64):
            v = tl.math.exp2(v * -0.5) if TWO else tl.exp(v * -0.5)
        tl.store(x_ptr + offs, v, mask=offs < n)

    n = 2**26
    x = torch.rand(n, device="cuda")
    grid = (triton.cdiv(n, 1024),)
    rates = []
    for two in (False, True):
        t = b.time(lambda two=two: chain[grid](x, n, TWO=two, BLOCK=1024), repeats=10)
        rates.append(64 * n / t)
    return rates[0], rates[1]


# ---------------------------------------------------------------------------------------------- rooflines


def _second_peak(peaks: dict, prec: str) -> float:
    return {"ieee": peaks["fp32"], "tf32": peaks["tf32"], "bf16": peaks["bf16"]}[prec]


def bound_svgd(n: int, d: int, prec: str, peaks: dict) -> float:
    """Seconds at the roofline: distances and elementwise work (2d + 6 flops a pair) at the SGEMM rate, the
    one product against [S - (2/h) X, 1] (2(d + 1) flops a pair) at the precision's GEMM rate, or one exp2 a
    pair at the measured exp2 rate, whichever is larger."""
    pairs = float(n) * n
    compute = pairs * (2 * d + 6) / peaks["fp32"] + pairs * 2 * (d + 1) / _second_peak(peaks, prec)
    return max(compute, pairs / peaks["exp2"])


def bound_matmul(n: int, m: int, d: int, p: int, prec: str, peaks: dict) -> float:
    pairs = float(n) * m
    compute = pairs * (2 * d + 4) / peaks["fp32"] + pairs * 2 * p / _second_peak(peaks, prec)
    return max(compute, pairs / peaks["exp2"])


def bound_ksd(n: int, d: int, peaks: dict) -> float:
    """The Stein kernel a pair: r², s_i·s_j and (s_i - s_j)·(x_i - x_j) (6d flops) and ~12 elementwise."""
    pairs = float(n) * n
    return max(pairs * (6 * d + 12) / peaks["fp32"], pairs / peaks["exp2"])


# ---------------------------------------------------------------------------------------------- references


def dense_eager(x, s, h):
    """Dense eager torch: the whole n×n matrix at once (centred Gram form, exp, one matmul)."""
    xc = x - x.mean(0, keepdim=True)
    sq = (xc * xc).sum(1)
    dist = (sq[:, None] + sq[None, :] - 2 * xc @ xc.T).clamp_min_(0)
    k = torch.exp(-dist / h)
    prod = k @ torch.cat([s, xc, torch.ones_like(sq)[:, None]], dim=1)
    d = x.shape[1]
    return (prod[:, :d] + (2 / h) * (xc * prod[:, -1:] - prod[:, d:-1])) / x.shape[0]


def keops_svgd(x, s, h):
    from pykeops.torch import LazyTensor

    xc = x - x.mean(0, keepdim=True)
    xi, xj = LazyTensor(xc[:, None, :]), LazyTensor(xc[None, :, :])
    k = (-((xi - xj) ** 2).sum(-1) / h).exp()
    sj = LazyTensor(s[None, :, :])
    return ((k * sj).sum(1) + (2 / h) * (k * (xi - xj)).sum(1)) / x.shape[0]


def keops_matmul(x, v, h):
    from pykeops.torch import LazyTensor

    xc = x - x.mean(0, keepdim=True)
    k = (-((LazyTensor(xc[:, None, :]) - LazyTensor(xc[None, :, :])) ** 2).sum(-1) / h).exp()
    return k @ v


def row_error(x, s, h, prec) -> float:
    """Max relative error of the triton direction on 256 rows against a float64 reference over all j."""
    n = x.shape[0]
    block = max(256, 2**28 // (256 * x.shape[1]))
    rows = torch.arange(0, n, max(1, n // 256), device=x.device)[:256]
    phi = svgd_direction(x, s, h, backend="triton", precision=prec)[rows].double()
    x64, s64 = x.double(), s.double()
    xc = x64 - x64.mean(0, keepdim=True)
    ref = torch.zeros(len(rows), x.shape[1], dtype=torch.float64, device=x.device)
    for start in range(0, n, block):
        xj, sj = xc[start : start + block], s64[start : start + block]
        k = torch.exp(-((xc[rows, None, :] - xj[None, :, :]) ** 2).sum(-1) / h)
        ref += k @ sj + (2 / h) * (xc[rows] * k.sum(1, keepdim=True) - k @ xj)
    ref /= n
    return float((phi - ref).abs().max() / ref.abs().max())


def bandwidth(x) -> float:
    return float(median_sq_dist(x, method="subsample")) / math.log(x.shape[0])


# ---------------------------------------------------------------------------------------------- sections


def check(b: Bench, peaks: dict) -> list[dict]:
    """The compiled kernels (not the interpreter) against the float64 dense backend: RBF and IMQ, every
    primitive, sizes that exercise the column split, direct and Gram distances."""
    from inference_core.kernels import IMQ, RBF, kernel_grad_sum

    out = []
    sizes = [(96, 3), (200, 17)] if b.dry else [(300, 1), (5000, 3), (5000, 16), (3000, 17), (4000, 64), (2000, 100)]
    for n, d in sizes:
        x, s, y = b.cloud(n, d, 1), b.cloud(n, d, 2), b.cloud(n // 2 + 7, d, 3, offset=0.3)
        v = b.cloud(y.shape[0], 3, 4)
        h = float(median_sq_dist(x.double(), method="subsample"))
        for kname, kern in (("rbf", RBF(h)), ("imq", IMQ(1.0, -0.5, h))):
            def rel(a, ref):
                return float((a.double() - ref).abs().max() / ref.abs().max())

            for prec in PRECISIONS:
                row = {"n": n, "d": d, "kernel": kname, "prec": prec}
                try:
                    row["matmul"] = rel(kernel_matmul(x, y, v, kern, backend="triton", precision=prec),
                                        kernel_matmul(x.double(), y.double(), v.double(), kern, backend="dense"))
                    row["svgd"] = rel(svgd_direction(x, s, kern, backend="triton", precision=prec),
                                      svgd_direction(x.double(), s.double(), kern, backend="dense"))
                    if prec == "ieee":
                        row["gradsum"] = rel(kernel_grad_sum(x, kern, backend="triton"),
                                             kernel_grad_sum(x.double(), kern, backend="dense"))
                        for unbiased in (False, True):
                            ref = float(ksd2(x.double(), s.double(), kern, unbiased, backend="dense"))
                            got = float(ksd2(x, s, kern, unbiased, backend="triton"))
                            row[f"ksd_u{int(unbiased)}"] = abs(got - ref) / abs(ref)
                            ref = float(mmd2(x.double(), y.double(), kern, unbiased, backend="dense"))
                            row[f"mmd_u{int(unbiased)}_abs"] = abs(float(mmd2(x, y, kern, unbiased, backend="triton")) - ref)
                except Exception as exc:  # noqa: BLE001
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                out.append(row)
                print("check", row, flush=True)
    return out



def forms(b: Bench, peaks: dict) -> list[dict]:
    """The distance form (direct differences against the Gram form on tensor cores) and, for ieee, the
    float32-FMA right-hand side against tf32x3, at small d; chunked cuBLAS alongside."""
    from inference_core.kernels import triton_backend as tb

    defaults = dict(tb.DIRECT_MAX_D), tb.ELEMENTWISE_MAX_P
    out = []
    for n in [128] if b.dry else [10_000, 100_000]:
        for d in (2, 4, 8, 16):
            x, s = b.cloud(n, d, 0), b.cloud(n, d, 1)
            h = bandwidth(x)
            variants = [("direct", 16, 4), ("gram", 0, 4)]
            if d <= 3:
                variants.append(("direct, tf32x3 product", 16, 0))
            for prec in ("ieee", "tf32"):
                row = {"n": n, "d": d, "prec": prec}
                for name, direct_max, ew in variants:
                    if prec != "ieee" and ew == 0:
                        continue
                    tb.DIRECT_MAX_D, tb.ELEMENTWISE_MAX_P = dict.fromkeys(PRECISIONS, direct_max), ew
                    try:
                        row[name] = b.time(lambda: svgd_direction(x, s, h, backend="triton", precision=prec),
                                           repeats=5, max_seconds=2)  # fmt: skip
                    except Exception as exc:  # noqa: BLE001
                        row[name + " error"] = str(exc)[:120]
                tb.DIRECT_MAX_D, tb.ELEMENTWISE_MAX_P = defaults
                row["chunked"] = b.time(lambda: svgd_direction(x, s, h, backend="chunked", precision=prec),
                                        repeats=5, max_seconds=2)  # fmt: skip
                row["bound"] = bound_svgd(n, d, prec, peaks)
                out.append(row)
                print("forms", row, flush=True)
    return out


def sweep(b: Bench, peaks: dict) -> dict:
    """Time every candidate configuration; the winners (geometric mean over cells) become the defaults."""
    ns = [128] if b.dry else [10_000, 100_000]
    ds = [2, 16] if b.dry else [2, 16, 64]
    cands = triton_tuning.CANDIDATES[:2] if b.dry else triton_tuning.CANDIDATES
    rows = []
    for n in ns:
        for d in ds:
            x, s = b.cloud(n, d, 0), b.cloud(n, d, 1)
            h = bandwidth(x)
            for prec in ("ieee", "tf32"):
                for cfg in cands:
                    try:
                        with triton_tuning.forced(cfg):
                            t = b.time(lambda: svgd_direction(x, s, h, backend="triton", precision=prec),
                                       repeats=5, max_seconds=3)  # fmt: skip
                    except Exception as exc:  # noqa: BLE001 (a configuration that fails is a result)
                        rows.append({"n": n, "d": d, "prec": prec, "cfg": cfg.__dict__, "error": str(exc)[:120]})
                        continue
                    rows.append({"n": n, "d": d, "prec": prec, "cfg": cfg.__dict__, "t": t,
                                 "roofline": bound_svgd(n, d, prec, peaks) / t})  # fmt: skip
                    print("sweep", rows[-1], flush=True)
    winners = {}
    for direct in (True, False):
        scores = {}
        for cfg in cands:
            ts = [r["t"] for r in rows if r["cfg"] == cfg.__dict__ and "t" in r
                  and (r["d"] <= 16) == direct]  # fmt: skip
            cells = {(r["n"], r["d"], r["prec"]) for r in rows if (r["d"] <= 16) == direct}
            if ts and len(ts) == len(cells):
                scores[json.dumps(cfg.__dict__)] = math.exp(sum(math.log(t) for t in ts) / len(ts))
        if scores:
            winners["direct" if direct else "gram"] = json.loads(min(scores, key=scores.get))
    return {"rows": rows, "winners": winners}


def apply_winners(winners: dict) -> None:
    table = {}
    for form, cfg in winners.items():
        table[("pairs", form == "direct")] = triton_tuning.Config(**cfg)
    triton_tuning.set_defaults(table)


def grid(b: Bench, peaks: dict) -> list[dict]:
    ns = [64, 128] if b.dry else [1000, 10_000, 100_000]
    ds = [2, 16] if b.dry else [2, 16, 64, 100, 1000]
    out = []
    for n in ns:
        for d in ds:
            if float(n) * n * d > MAX_CELL_WORK:
                out.append({"n": n, "d": d, "skipped": f"n²d = {float(n) * n * d:.0e} pair-coordinates"})
                continue
            x, s = b.cloud(n, d, 0), b.cloud(n, d, 1)
            h = bandwidth(x)
            for prec in PRECISIONS:
                row = _grid_cell(b, x, s, h, prec, peaks)
                out.append(row)
                print("grid", row, flush=True)
    return out


def _grid_cell(b: Bench, x, s, h, prec, peaks) -> dict:
    n, d = x.shape
    row: dict = {"n": n, "d": d, "prec": prec}
    cuda = not b.dry
    reps = 20 if n <= 10_000 else 5
    try:
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() if cuda else 0
        t0 = time.perf_counter()
        svgd_direction(x, s, h, backend="triton", precision=prec)
        b.sync()
        row["first_call"] = time.perf_counter() - t0
        row["triton"] = b.time(lambda: svgd_direction(x, s, h, backend="triton", precision=prec), repeats=reps)
        if cuda:
            row["mem_triton"] = (torch.cuda.max_memory_allocated() - base) / (n * d * 4)
    except Exception as exc:  # noqa: BLE001
        row["triton_error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
        return row
    row["roofline"] = bound_svgd(n, d, prec, peaks) / row["triton"]
    row["error"] = row_error(x, s, h, prec)
    try:
        row["chunked"] = b.time(lambda: svgd_direction(x, s, h, backend="chunked", precision=prec), repeats=reps)
    except Exception as exc:  # noqa: BLE001
        row["chunked_error"] = str(exc)[:120]
    if float(n) * n * 4 * 3 < (8 * 2**30 if cuda else 2**28):  # dense eager needs ~3 n×n float32 matrices
        try:
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            row["dense"] = b.time(lambda: dense_eager(x, s, h), repeats=reps)
            if cuda:
                row["mem_dense"] = (torch.cuda.max_memory_allocated() - base) / (n * d * 4)
        except torch.cuda.OutOfMemoryError:
            row["dense_error"] = "out of memory"
            torch.cuda.empty_cache()
    else:
        row["dense_error"] = "skipped: 3 n×n matrices over 8 GiB"
    if prec == "ieee" and d <= 64 and b.keops is None:
        try:
            t0 = time.perf_counter()
            keops_svgd(x, s, h)
            b.sync()
            row["keops_first_call"] = time.perf_counter() - t0
            row["keops"] = b.time(lambda: keops_svgd(x, s, h), repeats=reps)
        except Exception as exc:  # noqa: BLE001
            row["keops_error"] = str(exc)[:120]
    return row


def primitives(b: Bench, peaks: dict) -> list[dict]:
    ns = [128] if b.dry else [10_000, 100_000]
    ds = [2, 16]
    out = []
    for n in ns:
        for d in ds:
            x, s = b.cloud(n, d, 3), b.cloud(n, d, 4)
            y = b.cloud(n // 2, d, 5, offset=0.5)
            h = bandwidth(x)
            ones = torch.ones(y.shape[0], 1, device=b.device)
            vd = b.cloud(n, d, 6)
            ops = {
                "kernel_matmul (1 column, Y ≠ X)": (lambda be: kernel_matmul(x, y, ones, h, backend=be),
                                                    bound_matmul(n, n // 2, d, 1, "ieee", peaks)),
                f"kernel_matmul ({d} columns)": (lambda be: kernel_matmul(x, None, vd, h, backend=be),
                                                 bound_matmul(n, n, d, d, "ieee", peaks)),
                "mmd2 (unbiased)": (lambda be: mmd2(x, y, h, True, backend=be),
                                    sum(bound_matmul(a, c, d, 1, "ieee", peaks)
                                        for a, c in ((n, n), (n // 2, n // 2), (n, n // 2)))),
                "ksd2 (unbiased)": (lambda be: ksd2(x, s, h, True, backend=be), bound_ksd(n, d, peaks)),
            }  # fmt: skip
            for name, (op, bound) in ops.items():
                row = {"n": n, "d": d, "op": name}
                try:
                    row["triton"] = b.time(lambda op=op: op("triton"), repeats=10)
                    row["chunked"] = b.time(lambda op=op: op("chunked"), repeats=10)
                    row["roofline"] = bound / row["triton"]
                except Exception as exc:  # noqa: BLE001
                    row["error"] = str(exc)[:160]
                out.append(row)
                print("primitive", row, flush=True)
    return out


def million(b: Bench, peaks: dict) -> list[dict]:
    """n = 10⁶ (toy n when dry): SVGD direction and kernel_matmul, triton in three precisions and KeOps."""
    n = 256 if b.dry else 1_000_000
    out = []
    ds = [int(v) for v in os.environ.get("PARVIS_BENCH_MILLION_D", "2,16,64").split(",")]
    for d in (2, 16) if b.dry else ds:
        if b.left() < 60:
            out.append({"n": n, "d": d, "case": "all", "error": "skipped: the run's time budget was spent"})
            continue
        x, s = b.cloud(n, d, 7), b.cloud(n, d, 8)
        h = bandwidth(x)
        v = b.cloud(n, 1, 9)
        cases = [(f"svgd_direction {p}", lambda p=p: svgd_direction(x, s, h, backend="triton", precision=p),
                  bound_svgd(n, d, p, peaks)) for p in PRECISIONS]  # fmt: skip
        cases.append(("kernel_matmul ieee", lambda: kernel_matmul(x, None, v, h, backend="triton"),
                      bound_matmul(n, n, d, 1, "ieee", peaks)))  # fmt: skip
        if b.keops is None and (d <= 16 or b.left() > 150):
            cases += [("keops svgd_direction", lambda: keops_svgd(x, s, h), None),
                      ("keops kernel_matmul", lambda: keops_matmul(x, v, h), None)]  # fmt: skip
        for name, fn, bound in cases:
            row = {"n": n, "d": d, "case": name}
            try:
                t0 = time.perf_counter()
                fn()
                b.sync()
                row["first_call"] = time.perf_counter() - t0
                row["t"] = b.time(fn, repeats=3 if d <= 16 else 1, warmup=0, max_seconds=20)
                if bound is not None:
                    row["roofline"] = bound / row["t"]
            except Exception as exc:  # noqa: BLE001
                row["error"] = str(exc)[:160]
            out.append(row)
            print("million", row, flush=True)
    return out


def offset_and_solve(b: Bench) -> dict:
    g = torch.Generator(device="cpu").manual_seed(3)
    x = (1e3 + 1e-2 * torch.randn(2000, 3, generator=g, dtype=torch.float64)).float().to(b.device)
    s = torch.randn(2000, 3, generator=g).to(b.device)
    xc = x.double() - x.double().mean(0)
    sq = ((xc[:, None] - xc[None]) ** 2).sum(-1)
    h = float(sq.median()) / math.log(2000)
    k = torch.exp(-sq / h)
    ref = (k @ s.double() + (2 / h) * (xc * k.sum(1, keepdim=True) - k @ xc)) / 2000
    ours = svgd_direction(x, s, h, backend="triton").double()
    dist = torch.cdist(x, x, compute_mode="use_mm_for_euclid_dist") ** 2
    kc = torch.exp(-dist / h)
    naive = ((kc @ s + (2 / h) * (x * kc.sum(1, keepdim=True) - kc @ x)) / 2000).double()
    out = {"offset_triton": float((ours - ref).abs().max() / ref.abs().max()),
           "offset_cdist": float((naive - ref).abs().max() / ref.abs().max())}  # fmt: skip
    n, d = (128, 4) if b.dry else (10_000, 16)
    x, rhs = b.cloud(n, d, 10), b.cloud(n, 4, 11)
    h = bandwidth(x)
    out["solve_n"] = n
    out["cholesky"] = b.time(lambda: kernel_solve(x, rhs, h, 1e-3, method="cholesky"), repeats=3)
    out["cg"] = b.time(lambda: kernel_solve(x, rhs, h, 1e-3, method="cg", backend="triton", maxiter=1000), repeats=3)
    _, info = kernel_solve(x, rhs, h, 1e-3, method="cg", backend="triton", maxiter=1000, return_info=True)
    out["cg_iterations"], out["cg_residual"] = info.iterations, float(info.residual)
    return out


def run(dry_run: bool, sections: list[str], budget: float, out: Path | None) -> dict:
    b = Bench(dry_run, budget)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    import triton

    res: dict = {"started": started, "torch": torch.__version__, "triton": triton.__version__,
                 "cuda": torch.version.cuda, "keops": b.keops or _keops_version()}  # fmt: skip
    res["peaks"] = measure_peaks(b)
    print("peaks", res["peaks"], flush=True)
    steps = {"forms": forms, "check": check, "sweep": sweep, "grid": grid, "primitives": primitives, "million": million}
    for name in sections:
        if b.left() < 20:
            res[f"{name}_failed"] = "skipped: the run's time budget was spent"
            continue
        t0 = time.perf_counter()
        try:
            if name == "offset":
                res["offset"] = offset_and_solve(b)
            else:
                res[name] = steps[name](b, res["peaks"])
            if name == "sweep" and res["sweep"]["winners"]:
                apply_winners(res["sweep"]["winners"])
        except Exception:  # noqa: BLE001 (keep what the other sections measured)
            res[f"{name}_failed"] = traceback.format_exc()[-2000:]
            print(res[f"{name}_failed"], flush=True)
        res.setdefault("section_seconds", {})[name] = time.perf_counter() - t0
        if out is not None:  # what was measured survives a run stopped at its limit
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(res, indent=1))
    return res


def _keops_version() -> str:
    import pykeops

    return f"pykeops {pykeops.__version__}"


# ---------------------------------------------------------------------------------------------- render


def _f(v, spec: str = ".2f") -> str:
    return "—" if v is None else format(v, spec)


def _ratio(row: dict, other: str) -> str:
    if row.get(other) is None or not row.get("triton"):
        return "—" if other != "dense" else ("OOM" if "memory" in str(row.get("dense_error", "")) else "—")
    return fmt_ratio(row[other] / row["triton"])


def render(runs: list[dict]) -> str:
    """The docs section from one or more raw result files (each run's header, then its sections)."""
    lines = [
        "Ratios are t(other) / t(triton) (above 1: the fused kernel is faster). Roofline = bound / t: the bound is "
        "the larger of the pair work at the measured peaks (2d + 6 flops a pair at the SGEMM rate plus 2(d + 1) for "
        "the product at the precision's GEMM rate) and one exp2 a pair; `ieee` products run as float32 FMAs or "
        "tf32x3 on the tensor cores, so a fraction can exceed 1. Error = max relative error on 256 rows against "
        "float64.",
    ]
    for number, res in enumerate(runs, 1):
        p = res["peaks"]
        lines += [
            "",
            f"### Run {number}: {res['started']}, a lent {p['name']} ({p.get('sms', '?')} multiprocessors)",
            "",
            f"`python benchmarks/pairwise_gpu.py --run --sections {','.join(res.get('section_seconds', {}))}`; "
            f"torch {res['torch']}, triton {res['triton']}, CUDA {res['cuda']}; KeOps: {res['keops']}. Measured "
            f"peaks: SGEMM {p['fp32'] / 1e12:.1f} TFLOP/s, TF32 {p['tf32'] / 1e12:.1f}, BF16 {p['bf16'] / 1e12:.1f}; "
            f"exp {p['exp'] / 1e12:.2f}·10¹²/s, exp2 {p['exp2'] / 1e12:.2f}·10¹²/s.",
        ]
        if res.get("note"):
            lines += ["", res["note"]]
        lines += _render_run(res)
    return "\n".join(lines)


def _render_run(res: dict) -> list[str]:
    lines: list[str] = []
    if res.get("check"):
        lines += [""] + _render_check(res["check"])
    if res.get("forms"):
        lines += [""] + _render_forms(res["forms"])
    if res.get("million"):
        lines += ["", "n = 10⁶ (first call reported apart; median of 3 calls after it at d ≤ 16, one at d = 64):",
                  "", "| d | case | time | first call | roofline |", "|---|---|---|---|---|"]
        for r in res["million"]:
            if "error" in r:
                lines.append(f"| {r['d']} | {r['case']} | failed: {r['error'][:60]} | | |")
            else:
                lines.append(f"| {r['d']} | {r['case']} | {fmt_seconds(r['t'])} | {fmt_seconds(r['first_call'])} "
                             f"| {_f(r.get('roofline'))} |")
    if res.get("sweep"):
        lines += [""] + _render_sweep(res["sweep"])
    if res.get("grid"):
        lines += ["", "| n | d | precision | triton | dense eager / triton | chunked / triton | KeOps / triton "
                  "| roofline | mem triton | mem dense | error | first call |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        lines += [_grid_line(r) for r in res["grid"]]
    if res.get("primitives"):
        lines += ["", "Other primitives (ieee): t(chunked) / t(triton) and the roofline fraction of each.", "",
                  "| n | d | primitive | triton | chunked / triton | roofline |", "|---|---|---|---|---|---|"]
        for r in res["primitives"]:
            if "error" in r:
                lines.append(f"| {r['n']} | {r['d']} | {r['op']} | failed: {r['error'][:60]} | | |")
            else:
                lines.append(f"| {r['n']} | {r['d']} | {r['op']} | {fmt_seconds(r['triton'])} "
                             f"| {fmt_ratio(r['chunked'] / r['triton'])} | {_f(r['roofline'])} |")
    if res.get("offset"):
        o = res["offset"]
        lines += [
            "",
            f"Offset test (2000 particles at 1e3, spread 1e-2): triton max rel error {o['offset_triton']:.1e}; "
            f"torch.cdist (mm path) {o['offset_cdist']:.1e}. kernel_solve at n = {o['solve_n']} (eps 1e-3, 4 "
            f"columns): Cholesky fp64 {fmt_seconds(o['cholesky'])}, CG with the fused matvec {fmt_seconds(o['cg'])} "
            f"({o['cg_iterations']} iterations, residual {o['cg_residual']:.1e}).",
        ]
    failed = [k[: -len("_failed")] for k in res if k.endswith("_failed")]
    if failed:
        lines += ["", "Sections that failed or were skipped in this run: " + ", ".join(failed) + "."]
    return lines


def _grid_line(r: dict) -> str:
    if "skipped" in r:
        return f"| {r['n']} | {r['d']} | all | skipped: {r['skipped']} | | | | | | | | |"
    if "triton_error" in r:
        return f"| {r['n']} | {r['d']} | {r['prec']} | failed: {r['triton_error'][:60]} | | | | | | | | |"
    mem_dense = _f(r.get("mem_dense"), ".0f") if "mem_dense" in r else (
        "OOM" if "memory" in r.get("dense_error", "") else "—")  # fmt: skip
    return (f"| {r['n']} | {r['d']} | {r['prec']} | {fmt_seconds(r['triton'])} | {_ratio(r, 'dense')} "
            f"| {_ratio(r, 'chunked')} | {_ratio(r, 'keops')} | {_f(r.get('roofline'))} "
            f"| {_f(r.get('mem_triton'), '.1f')} | {mem_dense} | {_f(r.get('error'), '.1e')} "
            f"| {fmt_seconds(r.get('first_call'))} |")


def _render_forms(rows: list[dict]) -> list[str]:
    lines = ["Distance forms (SVGD direction): direct differences against the Gram form on the tensor cores; at d = 2 "
             "in ieee also the tf32x3 product in place of float32 FMAs; chunked cuBLAS alongside. Chosen = the "
             "committed rule (direct up to d = 4 in ieee, 8 in tf32).", "",
             "| n | d | precision | direct | Gram | direct, tf32x3 product | chunked | chunked / chosen | "
             "roofline (chosen) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        chosen = r["direct"] if r["d"] <= {"ieee": 4, "tf32": 8}[r["prec"]] else r["gram"]
        lines.append(f"| {r['n']} | {r['d']} | {r['prec']} | {fmt_seconds(r['direct'])} | {fmt_seconds(r['gram'])} "
                     f"| {fmt_seconds(r.get('direct, tf32x3 product'))} | {fmt_seconds(r['chunked'])} "
                     f"| {fmt_ratio(r['chunked'] / chosen)} | {r['bound'] / chosen:.2f} |")
    return lines


def _render_check(rows: list[dict]) -> list[str]:
    failed = [r for r in rows if "error" in r]
    worst: dict[str, float] = {}
    for r in rows:
        for key, val in r.items():
            if key not in ("n", "d", "kernel", "prec", "error"):
                name = key if key.startswith(("ksd", "mmd", "gradsum")) else f"{key} {r['prec']}"
                worst[name] = max(worst.get(name, 0.0), val)
    sizes = sorted({(r["n"], r["d"]) for r in rows})
    text = (f"Compiled kernels against the float64 dense backend (RBF and IMQ; (n, d) in {sizes}, columns split "
            "across programs at the larger n): largest error of each primitive — "
            + ", ".join(f"{k} {v:.1e}" for k, v in sorted(worst.items()))
            + " (relative; MMD² absolute).")
    if failed:
        text += f" {len(failed)} cases failed: " + "; ".join(f"{r['n']}/{r['d']}/{r['kernel']}/{r['prec']}: "
                                                           f"{r['error'][:80]}" for r in failed[:3])
    return [text]


def _render_sweep(sw: dict) -> list[str]:
    lines = ["Configuration sweep (SVGD direction; BM×BN rows×columns a tile, warps; best per cell in bold):", "",
             "| n | d | precision | " + " | ".join(_cfg_name(c) for c in _sweep_cfgs(sw)) + " |",
             "|---|---|---|" + "---|" * len(_sweep_cfgs(sw))]
    cells = sorted({(r["n"], r["d"], r["prec"]) for r in sw["rows"]})
    for n, d, prec in cells:
        rs = {json.dumps(r["cfg"]): r for r in sw["rows"] if (r["n"], r["d"], r["prec"]) == (n, d, prec)}
        best = min((r["t"] for r in rs.values() if "t" in r), default=None)
        cols = []
        for c in _sweep_cfgs(sw):
            r = rs.get(json.dumps(c))
            if r is None or "t" not in r:
                cols.append("failed" if r else "—")
            else:
                text = f"{fmt_seconds(r['t'])} ({r['roofline']:.2f})"
                cols.append(f"**{text}**" if r["t"] == best else text)
        lines.append(f"| {n} | {d} | {prec} | " + " | ".join(cols) + " |")
    lines += ["", "Defaults taken from the sweep (geometric mean over its cells): "
              + ", ".join(f"{k}: {_cfg_name(v)}" for k, v in sw["winners"].items()) + "."]
    return lines


def _sweep_cfgs(sw: dict) -> list[dict]:
    seen: list[dict] = []
    for r in sw["rows"]:
        if r["cfg"] not in seen:
            seen.append(r["cfg"])
    return seen


def _cfg_name(c: dict) -> str:
    return f"{c['bm']}×{c['bn']}, {c['warps']}w"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="store_true", help="measure on the GPU and write raw results")
    parser.add_argument("--dry-run", action="store_true", help="the --run code path on CPU (TRITON_INTERPRET=1)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="raw results file (--run)")
    parser.add_argument("--sections", default=",".join(DEFAULT_SECTIONS))
    parser.add_argument("--budget-seconds", type=float, default=float("inf"),
                        help="skip what would start after this many seconds (a lent GPU's time is short)")
    parser.add_argument("--render", nargs="*", type=Path, default=None,
                        help="render raw results (default: the committed ones) into docs/benchmarks.md")
    args = parser.parse_args()
    if args.dry_run and os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("--dry-run needs TRITON_INTERPRET=1 in the environment")
    if args.run or args.dry_run:
        if args.run and not torch.cuda.is_available():
            raise SystemExit("--run needs CUDA")
        res = run(args.dry_run, args.sections.split(","), args.budget_seconds, None if args.dry_run else args.out)
        if args.dry_run:
            print(render([res]))
            return
        print(f"wrote {args.out}")
    if args.render is not None:
        files = args.render or RESULT_FILES
        replace_section(DOC, TITLE, render([json.loads(f.read_text()) for f in files]))
        print(f"rendered {', '.join(str(f) for f in files)} into {DOC}")


if __name__ == "__main__":
    main()
