"""One SVGD step as users run it (CPU): the `svgd` method built from a job spec, side by side with the step
composed by hand from the building blocks, a plain dense torch loop, Pyro and NumPyro (issue 45, item 4).

    python benchmarks/svgd_step.py                  # measure (≈ 5 min), save the raw results, write the docs section
    python benchmarks/svgd_step.py --quick          # fewer and shorter rounds (a smoke run; its own results file)
    python benchmarks/svgd_step.py --no-write       # measure and save benchmarks/results/svgd_step.json only
    python benchmarks/svgd_step.py --from-results   # re-render the docs section from the saved JSON

Problem: Bayesian logistic regression on breast cancer (569 rows, standardised, bias column: d = 31), prior
N(0, I), full batch, Adam (lr 0.01), RBF kernel with h = median of the n×n squared distances (diagonal
included) / log n, n = 1000 and n = 100 particles starting at 0.1·N(0, I) (the same draws for everyone), one
torch thread (and JAX/XLA single-threaded).

Contestants, timed in interleaved rounds (each round: a batch of ≥ `--batch-seconds` of steps of each in
turn, so all see the same background load; the median over rounds is reported):

* product: `SVGD.step()` of the method exactly as a job builds it (`spec.admit` → `training.build_method`),
  step metrics included (stein force norm, bandwidth, step time, the finiteness check);
* run: `inference_core.training.run` on the same spec with `steps = K`: the loop's time from `on_start` to the
  last `on_step` (its metrics cadence and checkpoint states included, no-op hooks; building the method and the
  final evaluation are not), divided by K;
* composed: pairwise.make_ours, the step composed by hand (closed-form score, `MedianRule`, kernels'
  `svgd_direction`, Adam);
* plain: pairwise.make_plain (cdist, torch.median, one matmul); Pyro: pairwise.make_pyro; NumPyro:
  pairwise.make_numpyro (jitted; compile time excluded).

Floating-point work of one step, n particles, d dimensions, N data rows (multiply and add counted apart; one
per elementwise operation, exp and sigmoid one each):

    F = 4·n·N·d       score: Z = X Wᵀ and Xᵀ (t − σ(Z)), two GEMMs of n·N·d multiply-adds
      + 3·n·N         σ(Z), and t − σ(Z) (a negation and an add)
      + 2·n²·d + 2·n² squared distances ||x_i||² + ||x_j||² − 2 x_i·x_j (Gram GEMM and the two adds)
      + 2·n²          the kernel: scaling by −1/h and exp
      + 2·n²·(2d + 1) the product K·[S, X, 1]
      + 20·n·d        centring, prior score, epilogue, Adam (lower order)
    = 4nNd + 3nN + n²(6d + 6) + 20nd          (n = 1000, d = 31, N = 569: 265 MFLOP)

The selection of the median (comparisons) is not floating-point work. The FLOP floor is F over this machine's
single-thread float32 GEMM rate on a comparable shape, the step's own largest product [n, n] · [n, 64], timed
as one more contestant of the interleaved rounds (so under the same load): floor = F / rate. A step at the
floor would do all of its arithmetic at that GEMM's speed and nothing else. A 1024³ SGEMM and the product at
its raw width 2d + 1 are timed once as well, for reference.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

TITLE = "One SVGD step as users run it (CPU)"
AFTER = "### One full SVGD step"  # the section goes after the one holding this heading when it is missing
DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "benchmarks" / "results" / "svgd_step.json"
RESULTS_QUICK = ROOT / "benchmarks" / "results" / "svgd_step_quick.json"  # --quick runs (smoke runs, not reported)
LR = 0.01
GOALS = {"plain": 2.5, "numpyro": 30.0, "floor": 1.5}  # issue 45 item 4, at n = 1000
SGEMM_WIDTH = 64
PHASES = ["score (closed form)", "distances + exact median (bandwidth)", "kernel + product from the distances",
          "Adam update (pull-back)", "step metrics"]
FLOP_TERMS = ["score GEMMs 4nNd", "sigmoid and residual 3nN", "distances 2n²d + 2n²", "kernel scale + exp 2n²",
              "product K·[S, X, 1] 2n²(2d+1)", "lower order 20nd"]


def pin_one_thread() -> None:
    """One thread everywhere, before torch or jax does any work (as `pairwise.py --threads 1`)."""
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    ).strip()


# ----------------------------------------------------------------------------------------------------------
# the contestants
# ----------------------------------------------------------------------------------------------------------


def job_spec(n: int, steps: int, optimizer: dict | None = None, dtype: str = "float32") -> dict:
    """The job a user submits for this problem (the fields the problem fixes; everything else default)."""
    return {
        "method": "svgd",
        "target": {"kind": "bayesian_logistic_regression", "dataset": "sklearn:breast_cancer", "standardize": True,
                   "prior_std": 1.0},
        "num_particles": n, "steps": steps, "seed": 0, "device": "cpu",
        "options": {
            "optimizer": optimizer or {"name": "adam", "lr": LR},
            "init": {"method": "normal", "scale": 0.1},
            "kernel": {"bandwidth": {"rule": "median", "divisor": "log_n", "include_diagonal": True}},
            "dtype": dtype,
        },
    }  # fmt: skip


def make_product(n: int, init, optimizer: dict | None = None, dtype: str = "float32"):
    """The method as a job builds it, its particles then set to `init` (so every contestant starts alike)."""
    import torch

    from inference_core.spec import admit
    from inference_core.training import build_method

    method = build_method(admit(job_spec(n, 10, optimizer, dtype)))
    with torch.no_grad():
        method.x.copy_(torch.from_numpy(init))
    return method


class LoopTimer:
    """RunHooks that time the run loop: from `on_start` to the last `on_step`, and each step."""

    def __init__(self):
        from inference_core.training import RunHooks

        outer = self

        class Hooks(RunHooks):
            def on_start(self, method, total_steps):
                outer.start = outer.last = time.perf_counter()
                outer.steps = []

            def on_step(self, step, total_steps, metrics):
                now = time.perf_counter()
                outer.steps.append(now - outer.last)
                outer.last = now

        self.hooks = Hooks()

    def loop_seconds(self) -> float:
        return self.last - self.start


def run_per_step(n: int, steps: int) -> tuple[float, float]:
    """(loop seconds / steps, median step seconds) of one `inference_core.training.run` of the job."""
    from inference_core.training import run

    timer = LoopTimer()
    result = run(job_spec(n, steps), hooks=timer.hooks)
    assert result.steps_completed == steps and result.stopped is None
    return timer.loop_seconds() / steps, statistics.median(timer.steps)


def interleaved_rounds(steps: dict, n: int, run_steps: int, *, rounds: int, batch_seconds: float) -> dict:
    """pairwise.interleaved_seconds, one round at a time (its warm-up once), with a `run` of `run_steps` steps
    between the rounds: per-round seconds per step of every contestant."""
    from pairwise import interleaved_seconds

    per_round: dict[str, list[float]] = {k: [] for k in ["product", "run", *[k for k in steps if k != "product"]]}
    run_median: list[float] = []
    run_per_step(n, max(2, run_steps // 10))  # warm-up: first-run imports and caches
    for r in range(rounds):
        times = interleaved_seconds(steps, rounds=1, batch_seconds=batch_seconds, warmup=3 if r == 0 else 0)
        loop, median = run_per_step(n, run_steps)
        for key, value in times.items():
            per_round[key].append(value)
        per_round["run"].append(loop)
        run_median.append(median)
        print(f"  n = {n}, round {r + 1}/{rounds}: "
              + ", ".join(f"{k} {1 / v[-1]:.1f}/s" for k, v in per_round.items()), flush=True)
    return {"per_round": per_round, "run_median_step": run_median}


# ----------------------------------------------------------------------------------------------------------
# floating-point work, the machine's rate, where the product step's time goes, same-answer check
# ----------------------------------------------------------------------------------------------------------


def sgemm_contestant(n: int):
    """One float32 GEMM [n, n] · [n, 64] (the floor's rate, timed in the rounds like a step)."""
    import torch

    g = torch.Generator().manual_seed(0)
    k, v = torch.rand(n, n, generator=g), torch.randn(n, SGEMM_WIDTH, generator=g)
    out = torch.empty(n, SGEMM_WIDTH)
    return lambda: torch.mm(k, v, out=out)


def step_flops(n: int, d: int, rows: int) -> dict:
    """The terms of F (module docstring)."""
    values = [4 * n * rows * d, 3 * n * rows, 2 * n * n * d + 2 * n * n, 2 * n * n, 2 * n * n * (2 * d + 1), 20 * n * d]
    terms = dict(zip(FLOP_TERMS, values, strict=True))
    return {"terms": terms, "total": sum(terms.values())}


def gemm_rates(n: int, d: int) -> dict:
    """Single-thread float32 GEMM rates: the step's largest product at its padded width, at its raw width, and
    a 1024³ SGEMM (peak)."""
    import torch
    from _timing import median_seconds

    out = {}
    for key, (m, k, p) in {"step_product_64": (n, n, 64), "step_product_raw": (n, n, 2 * d + 1),
                           "square_1024": (1024, 1024, 1024)}.items():  # fmt: skip
        g = torch.Generator().manual_seed(0)
        a, b = torch.rand(m, k, generator=g), torch.randn(k, p, generator=g)
        c = torch.empty(m, p)
        seconds = median_seconds(lambda a=a, b=b, c=c: torch.mm(a, b, out=c), repeats=30, min_seconds=0.5)
        out[key] = {"shape": [m, k, p], "seconds": seconds, "flops_per_s": 2 * m * k * p / seconds}
    return out


def phase_times(method, reps: int) -> dict:
    """Median seconds of each phase of the product step (the phases of `SVGD.direction` and
    `ParticleMethod.step`, called one after the other as the step calls them)."""
    import torch

    from inference_core.methods.base import check_direction
    from inference_core.methods.directions import svgd_direction

    names = PHASES
    rows: list[list[float]] = []
    for i in range(reps + 3):
        t = [time.perf_counter()]
        with torch.no_grad():
            x = method.x.detach()
            score = method.moved.score(x, None)
            t.append(time.perf_counter())
            h, sq = method.bandwidth_rule.with_sq_dists(x)
            t.append(time.perf_counter())
            phi = svgd_direction(x, score, method.kernel(h), sq=sq, **method.pairwise)
            t.append(time.perf_counter())
        method.pullback(method.x, phi)
        t.append(time.perf_counter())
        check_direction(phi, 1)
        float(phi.square().sum(-1).mean().sqrt()), float(h)
        t.append(time.perf_counter())
        if i >= 3:
            rows.append([b - a for a, b in zip(t, t[1:], strict=False)])
    return {name: statistics.median(r[j] for r in rows) for j, name in enumerate(names)}


def same_answer(a, y, n: int) -> dict:
    """One SGD step (lr 1e-3) from the same particles: the product's displacement / lr is its φ; against the
    composed step in float64 (the reference) and the product in float64 (the fused path in float64)."""
    import numpy as np
    from pairwise import make_ours

    lr = 1e-3
    init = (0.1 * np.random.default_rng(1).standard_normal((n, a.shape[1]))).astype(np.float32)
    step, x = make_ours(a.astype(np.float64), y.astype(np.float64), init.astype(np.float64), lr, sgd=True)
    step()
    ref = (x.detach().numpy() - init.astype(np.float64)) / lr
    out = {}
    for dtype in ("float32", "float64"):
        method = make_product(n, init.astype(dtype), {"name": "sgd", "lr": lr}, dtype)
        method.step()
        phi = (method.x.detach().double().numpy() - init.astype(np.float64)) / lr
        out[dtype] = float(np.abs(phi - ref).max() / np.abs(ref).max())
    return out


# ----------------------------------------------------------------------------------------------------------
# the measurement
# ----------------------------------------------------------------------------------------------------------


def measure(args, path: Path) -> dict:
    import numpy as np
    import torch
    from _results import save_results
    from _timing import cpu_model, load_average

    torch.set_num_threads(1)
    from pairwise import blr_data, make_numpyro, make_ours, make_plain, make_pyro, versions

    results: dict = {
        "run": {
            "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "command": "python benchmarks/svgd_step.py" + (" " + " ".join(sys.argv[1:]) if sys.argv[1:] else ""),
            "machine": cpu_model(), "logical_cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "versions": versions(), "load_start": load_average(),
            "rounds": args.rounds, "batch_seconds": args.batch_seconds,
            "results_file": str(path.relative_to(ROOT)),
        },
        "rows": {},
    }  # fmt: skip
    a, y = blr_data()
    rows, d = a.shape
    # The job's data are the benchmark's: same standardisation and bias column.
    check = make_product(10, np.zeros((10, d), np.float32))
    assert np.abs(check.target.X.numpy() - a).max() == 0 and np.abs(check.target.y.numpy() - y).max() == 0
    results["rates"] = gemm_rates(1000, d)
    print("GEMM rates: " + ", ".join(f"{k} {v['flops_per_s'] / 1e9:.1f} GFLOP/s" for k, v in results["rates"].items()),
          flush=True)
    for n, run_steps in ((1000, args.run_steps), (100, 10 * args.run_steps)):
        init = (0.1 * np.random.default_rng(0).standard_normal((n, d))).astype(np.float32)
        product = make_product(n, init)
        steps = {"product": product.step, "composed": make_ours(a, y, init, LR)[0], "plain": make_plain(a, y, init, LR)[0],
                 "pyro": make_pyro(a, y, init, LR)[0]}  # fmt: skip
        steps["numpyro"], _, compile_s = make_numpyro(a, y, init, LR)
        steps["sgemm"] = sgemm_contestant(n)
        timed = interleaved_rounds(steps, n, run_steps, rounds=args.rounds, batch_seconds=args.batch_seconds)
        results["rows"][str(n)] = {
            "n": n, "d": d, "data_rows": rows, "run_steps": run_steps, "numpyro_compile_s": compile_s,
            "flops": step_flops(n, d, rows), "phases": phase_times(make_product(n, init), 50 if n == 1000 else 200),
            "same_answer": same_answer(a, y, n), **timed,
        }  # fmt: skip
        save_results(path, results)
    results["run"]["load_end"] = load_average()
    results["run"]["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    save_results(path, results)
    return results


# ----------------------------------------------------------------------------------------------------------
# the report (from the raw results alone)
# ----------------------------------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def summary(results: dict) -> dict:
    """Per n: the median seconds per step of each contestant and the ratios the report gives."""
    out = {}
    peak = results["rates"]["square_1024"]["flops_per_s"]
    for key, row in results["rows"].items():
        t = {k: statistics.median(v) for k, v in row["per_round"].items()}
        n, flops = row["n"], row["flops"]["total"]
        rate = 2 * n * n * SGEMM_WIDTH / t.pop("sgemm")
        best = 2 * n * n * SGEMM_WIDTH / min(row["per_round"]["sgemm"])
        out[key] = {"t": t, "rate": rate, "floor": flops / rate, "floor_best": flops / best,
                    "floor_peak": flops / peak, "ratios": {k: t[k] / t["product"] for k in t if k != "product"}}
    return out


def report(results: dict) -> str:
    from _timing import fmt_ratio

    run = results["run"]
    rates = results["rates"]
    s = summary(results)
    order = ["product", "run", "composed", "plain", "pyro", "numpyro"]
    source = run.get("results_file", "benchmarks/results/svgd_step.json")
    lines = [
        f"Run {run['started']} with `{run['command']}` (raw results: {source}; "
        "`python benchmarks/svgd_step.py --from-results` re-renders this section).",
        f"Machine: {run['machine']}, {run['logical_cores']} logical cores, torch threads {run['torch_threads']} "
        f"(JAX/XLA single-threaded too); {run['versions']}.",
        f"Load average at start: {run['load_start']}; at end: {run.get('load_end', 'unfinished run')}. The machine "
        "is shared: ratios are measured side by side in interleaved rounds, absolute times are indicative only.",
        "",
        "Bayesian logistic regression, breast cancer (569 rows, standardised, bias: d = 31), prior N(0, I), full "
        "batch, Adam lr 0.01, RBF with h = median of the n×n squared distances (diagonal included) / log n, "
        "particles from 0.1·N(0, I). **product**: `SVGD.step()` of the method a job builds (`spec.admit` → "
        "`training.build_method`, spec in `benchmarks/svgd_step.py`), its step metrics included; **`run` per "
        "step**: `inference_core.training.run` of the same job, the loop's time (metrics cadence, checkpoint "
        "states, no-op hooks; not the build or the final evaluation) / K steps; **composed**: the step composed by "
        "hand from the building blocks (`make_ours` of benchmarks/pairwise.py); plain, Pyro, NumPyro: as in the "
        f"section above. {run['rounds']} interleaved rounds of ≥ {run['batch_seconds']} s batches (a `run` of K "
        "steps between rounds), one torch thread; medians over rounds.",
        "",
        "| n | product step | `run` per step | composed | plain dense torch | Pyro | NumPyro (jit) | product / composed "
        "| product / plain | product / Pyro | product / NumPyro | FLOP floor | product / floor |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in sorted(results["rows"], key=int, reverse=True):
        t, r = s[key]["t"], s[key]["ratios"]
        rate_cells = " | ".join(f"{1 / t[k]:.1f} steps/s" for k in order)
        lines.append(
            f"| {key} | {rate_cells} | {fmt_ratio(r['composed'])} | {fmt_ratio(r['plain'])} | {fmt_ratio(r['pyro'])} "
            f"| {fmt_ratio(r['numpyro'])} | {_ms(s[key]['floor'])} | {t['product'] / s[key]['floor']:.2f}× |"
        )
    big = s.get("1000")
    if big is not None:
        t, r = big["t"], big["ratios"]
        rounds = results["rows"]["1000"]["per_round"]

        def spread(peer: str) -> str:
            per = sorted(a / b for a, b in zip(rounds[peer], rounds["product"], strict=True))
            return f"per round {per[0]:.2f}-{per[-1]:.2f}×, median {statistics.median(per):.2f}×"

        verdicts = [
            f"product / plain = {r['plain']:.2f}× (goal ≥ {GOALS['plain']}×: "
            f"{'met' if r['plain'] >= GOALS['plain'] else 'NOT met'}; {spread('plain')})",
            f"product / NumPyro = {r['numpyro']:.1f}× (goal ≥ {GOALS['numpyro']:.0f}×: "
            f"{'met' if r['numpyro'] >= GOALS['numpyro'] else 'NOT met'}; {spread('numpyro')})",
            f"product / floor = {t['product'] / big['floor']:.2f}× (goal ≤ {GOALS['floor']}×: "
            f"{'met' if t['product'] / big['floor'] <= GOALS['floor'] else 'NOT met'}); against the floor at the "
            f"GEMM's best round ({_ms(big['floor_best'])}): {t['product'] / big['floor_best']:.2f}×; at the 1024³ "
            f"SGEMM's rate ({_ms(big['floor_peak'])}): {t['product'] / big['floor_peak']:.2f}×",
        ]
        lines += ["", "Goals at n = 1000 (issue 45): " + "; ".join(verdicts) + "."]
    row = results["rows"].get("1000") or next(iter(results["rows"].values()))
    terms = ", ".join(f"{k} {row['flops']['terms'][k] / 1e6:.1f}M" for k in FLOP_TERMS)
    lines += [
        "",
        f"FLOP floor: F = 4nNd + 3nN + n²(6d + 6) + 20nd per step (derivation in the script's docstring; n = "
        f"{row['n']}: {terms}; total {row['flops']['total'] / 1e6:.0f} MFLOP) over the single-thread float32 GEMM "
        f"rate of the step's largest product [n, n]·[n, 64], timed in the same interleaved rounds: "
        + ", ".join(f"{s[k]['rate'] / 1e9:.1f} GFLOP/s at n = {k}" for k in sorted(s, key=int, reverse=True))
        + f" (timed once before the rounds at n = 1000: {rates['step_product_64']['flops_per_s'] / 1e9:.1f}; at "
        f"the raw width 2d + 1 = 63: {rates['step_product_raw']['flops_per_s'] / 1e9:.1f}; a 1024³ SGEMM: "
        f"{rates['square_1024']['flops_per_s'] / 1e9:.1f}).",
        "",
        "Where the product step's time goes (median of each phase, called in the step's order, same run). The "
        "step's four GEMMs do nearly all of F and run at about the measured rate, so they take about the floor; "
        "the rest is work that is not GEMM arithmetic: the exact selection of the median among the n² distances, "
        "n² exps, n·N sigmoids, the optimizer, the step metrics and some forty small tensor operations.",
        "",
        "| n | " + " | ".join(PHASES) + " | sum | sum − floor |",
        "|---|" + "---|" * (len(PHASES) + 2),
    ]
    for key in sorted(results["rows"], key=int, reverse=True):
        phases = results["rows"][key]["phases"]
        total = sum(phases.values())
        lines.append(f"| {key} | " + " | ".join(_ms(phases[k]) for k in PHASES)
                     + f" | {_ms(total)} | {_ms(total - s[key]['floor'])} |")
    lines += [""]
    for key in sorted(results["rows"], key=int, reverse=True):
        row = results["rows"][key]
        runs = row["run_median_step"]
        lines.append(
            f"n = {key}: `run` of K = {row['run_steps']} steps, median single step inside the runs "
            f"{_ms(statistics.median(runs))} (the table's figure is the loop's total / K); NumPyro first call "
            f"(trace + XLA compile) {row['numpyro_compile_s']:.1f} s, excluded. Same update (one SGD step, lr 1e-3, "
            "max |φ − φ_ref| / max |φ_ref| against the composed step in float64): product float32 "
            f"{row['same_answer']['float32']:.1e}, product float64 {row['same_answer']['float64']:.1e}."
        )
    return "\n".join(lines)


def write_section(body: str) -> None:
    """Replace the section if it exists; else insert it after the section holding `AFTER` (before the next
    `## `), or at the end."""
    from _timing import replace_section

    text = DOC.read_text()
    if f"## {TITLE}" in text.splitlines() or AFTER not in text:
        replace_section(DOC, TITLE, body)
        return
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith(AFTER))
    end = next((i for i in range(at + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    section = [f"## {TITLE}", "", *body.rstrip("\n").splitlines(), ""]
    lines[end:end] = section
    DOC.write_text("\n".join(lines).rstrip("\n") + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help=f"3 rounds of 0.15 s batches, short runs, saved to {RESULTS_QUICK.relative_to(ROOT)}")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--batch-seconds", type=float, default=0.4)
    parser.add_argument("--run-steps", type=int, default=100, help="K of the `run` at n = 1000 (10 K at n = 100)")
    parser.add_argument("--no-write", action="store_true", help=f"do not update {DOC.relative_to(ROOT)}")
    parser.add_argument("--from-results", action="store_true", help=f"render from {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args()
    path = RESULTS_QUICK if args.quick else RESULTS
    if args.quick:
        args.rounds, args.batch_seconds, args.run_steps = 3, 0.15, 30
    if args.from_results:
        from _results import load_results

        results = load_results(path)
        if not results.get("rows"):
            raise SystemExit(f"no results in {path}")
    else:
        pin_one_thread()
        results = measure(args, path)
    body = report(results)
    print(body)
    if not args.no_write:
        write_section(body)


if __name__ == "__main__":
    main()
