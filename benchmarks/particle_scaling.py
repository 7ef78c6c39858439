"""Wall time of one particle step against the number of particles n, for every particle method, on CPU.

One "step" is `method.step()` of Parvis' run loop: minibatch draw, scores, bandwidth, direction (with the
critic updates of `ksd` and the ascent of `svgd_induced_adversarial`), and the Adam update. Target: a
d-dimensional Gaussian N(0, Σ) with a fixed random SPD Σ (closed-form score, so the particle interaction
dominates). Each method runs with its defaults except: speed-ups m = 50 subset/induced points; `ksd`
critic [100, 100], 2 critic steps (defaults); adversarial L = 10 (default) and its batched variant.

The O(nm) methods (subset, subset + CF, induced, adversarial batched) and the O(n) critic method run up to
n = 1e5; the exact-interaction methods (svgd, wsgld, pisgld: O(n²) pairs plus the exact n² median; gfsf:
O(n³) Cholesky) up to n = 1e4; the full adversarial ascent (O(nm) per ascent step, 20 autograd passes per
step) up to 3e4. Timings are medians over repeated steps after one warm-up step, single-threaded by default.
The log-log slope over n ≥ 1000 is reported per method: ~1 for linear, ~2 for quadratic.

    nice -n 10 python benchmarks/particle_scaling.py            # writes docs/benchmarks.md, its section only
    python benchmarks/particle_scaling.py --quick               # smoke run, prints only
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _timing import cpu_model, fmt_seconds, load_average, replace_section  # noqa: E402

from inference_core.spec import validate_job_spec  # noqa: E402
from inference_core.training import build_method  # noqa: E402

SECTION = "Particle methods: time per step (CPU)"
GPU_SECTION = "Particle methods: time per step (GPU)"
DOC = ROOT / "docs" / "benchmarks.md"
GRID = [100, 300, 1000, 3000, 10_000, 30_000, 100_000]
# (label, method, extra options, largest n): the exact-interaction methods' exact median over n² distances
# is refused beyond 11,585 particles (spec.validate_job_spec), on any device
CASES: list[tuple[str, str, dict[str, Any], int]] = [
    ("svgd", "svgd", {}, 10_000),
    ("gfsf", "gfsf", {}, 10_000),
    ("wsgld", "wsgld", {}, 10_000),
    ("pisgld", "pisgld", {}, 10_000),
    ("ksd", "ksd", {}, 100_000),
    ("svgd_subset", "svgd_subset", {"subset_size": 50}, 100_000),
    ("svgd_subset_cf", "svgd_subset_cf", {"subset_size": 50}, 100_000),
    ("svgd_induced", "svgd_induced", {"subset_size": 50}, 100_000),
    ("svgd_induced_adversarial (batched, L=10)", "svgd_induced_adversarial",
     {"subset_size": 50, "batched": True}, 100_000),
    ("svgd_induced_adversarial (full, L=10)", "svgd_induced_adversarial", {"subset_size": 50}, 30_000),
]


def gaussian_target(d: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    a = rng.normal(size=(d, d))
    cov = a @ a.T / d + np.eye(d)
    return {"kind": "gaussian", "mean": [0.0] * d, "cov": cov.tolist()}


def time_steps(method: Any, budget_s: float, max_repeats: int) -> tuple[float, int]:
    sync = torch.cuda.synchronize if method.device.type == "cuda" else (lambda: None)
    method.step()  # warm-up (and on CUDA the kernels' compilation)
    sync()
    times: list[float] = []
    spent = 0.0
    while len(times) < max_repeats and (len(times) < 3 or spent < budget_s):
        t0 = time.perf_counter()
        method.step()
        sync()  # a step's CUDA work is asynchronous: time it to its end
        times.append(time.perf_counter() - t0)
        spent += times[-1]
        if spent > budget_s * 3 and times:
            break
    return float(np.median(times)), len(times)


def slope(ns: list[int], ts: list[float]) -> float | None:
    pts = [(math.log(n), math.log(t)) for n, t in zip(ns, ts, strict=True) if n >= 1000 and t > 0]
    if len(pts) < 2:
        return None
    x, y = np.array(pts).T
    return float(np.polyfit(x, y, 1)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="n ≤ 1000, short budgets, print only")
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--budget", type=float, default=3.0, help="seconds of timed steps per cell (about)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="cuda: the GPU section (each step timed to the device's synchronisation)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    grid = [n for n in GRID if n <= 1000] if args.quick else GRID
    target = gaussian_target(args.dim)
    load_start = load_average()
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    results: dict[str, dict[int, tuple[float, int]]] = {}
    for label, name, options, largest in CASES:
        results[label] = {}
        for n in grid:
            if n > largest:
                continue
            spec = validate_job_spec({"method": name, "target": target, "num_particles": n, "steps": 10, "seed": 0,
                                      "options": {"optimizer": {"lr": 1e-3}, **options}, "device": args.device})
            method = build_method(spec)
            results[label][n] = time_steps(method, 0.3 if args.quick else args.budget, 5 if args.quick else 50)
            print(f"{label} n={n}: {fmt_seconds(results[label][n][0])} ({results[label][n][1]} steps)", flush=True)
    load_end = load_average()
    cuda = args.device == "cuda"
    machine = (f"Device: {torch.cuda.get_device_name()}; torch {torch.__version__}, CUDA {torch.version.cuda}; "
               "each step timed to `torch.cuda.synchronize()`." if cuda else
               f"Machine: {cpu_model()}, 2 logical cores shared with other jobs; torch {torch.__version__}. "
               f"Load average at start {load_start}, at end {load_end}: absolute times are indicative, the scaling "
               "(columns within a row) is what this table shows.")
    lines = [
        f"Run {started} with `python benchmarks/particle_scaling.py{' --device cuda' if cuda else ''}` "
        f"(torch threads {args.threads}).",
        machine,
        "",
        f"One `method.step()` (scores, bandwidth, direction, Adam update) on a {args.dim}-D Gaussian target, "
        "median over repeated steps after one warm-up step. Defaults of each method (`svgd`/`wsgld`/`pisgld`/"
        "`gfsf`: exact median heuristic over all n² distances, which is part of the step; `gfsf`: float64 "
        "Cholesky solve); speed-ups with m = 50; `ksd`: critic 100-100, 2 critic updates per step. "
        "Slope: least-squares slope of log t against log n over n ≥ 1000 (1 = linear, 2 = quadratic). "
        + ("— : not run (the CPU table's grid: the exact median is refused beyond 11,585 particles)." if cuda else
           "— : not run (exact-interaction methods stop at 1e4 on 2 cores); the GPU table is the next section."),
        "",
        "| method | " + " | ".join(f"n={n:,}" for n in grid) + " | slope (n ≥ 1000) |",
        "|---|" + "---|" * len(grid) + "---|",
    ]
    for label, cells in results.items():
        ns = sorted(cells)
        s = slope(ns, [cells[n][0] for n in ns])
        lines.append(f"| {label} | " + " | ".join(fmt_seconds(cells[n][0]) if n in cells else "—" for n in grid)
                     + f" | {'—' if s is None else f'{s:.2f}'} |")
    text = "\n".join(lines)
    print(text)
    if not args.quick:
        replace_section(DOC, GPU_SECTION if cuda else SECTION, text)
        print(f"wrote section '## {GPU_SECTION if cuda else SECTION}' of {DOC}")


if __name__ == "__main__":
    main()
