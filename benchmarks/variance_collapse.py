"""SVGD's variance collapse in higher dimension, and the bandwidth rule `auto` uses against it (issue 14).

Target N(0, I_d) — the whitened posterior `auto` sees when its Gaussian is right. 100 particles start at exact
draws (seed 0), then 500 SVGD steps; reported is the mean over coordinates of log(particle sd), 0 when the
spread is right, and the worst |log sd| (which includes the sampling noise of 100 draws, ≈ 0.07 per
coordinate). Rules: the usual h = med²/log n with Adam (the service's svgd default) and with SGD, and
h = c·med² (no log n divisor) for c = 1, 2, 4, with SGD lr 0.1. All float64, CPU, one thread.

    python benchmarks/variance_collapse.py [--dims 10 30 60 100] [--no-write]

Writes the section "## Variance collapse of SVGD (issue 14)" of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._timing import replace_section  # noqa: E402
from inference_core.training import run  # noqa: E402

RULES = [
    ("med²/log n, Adam 0.05 (svgd default)", {}, {"name": "adam", "lr": 0.05}),
    ("med²/log n, SGD 0.1", {}, {"name": "sgd", "lr": 0.1}),
    ("med², SGD 0.1", {"divisor": "none"}, {"name": "sgd", "lr": 0.1}),
    ("2·med², SGD 0.1", {"divisor": "none", "rule": "scaled", "factor": 2.0}, {"name": "sgd", "lr": 0.1}),
    ("4·med², SGD 0.1", {"divisor": "none", "rule": "scaled", "factor": 4.0}, {"name": "sgd", "lr": 0.1}),
]


def spread(d: int, bandwidth: dict, optimizer: dict, steps: int) -> tuple[float, float]:
    spec = {"method": "svgd", "seed": 0, "num_particles": 100, "steps": steps,
            "target": {"kind": "gaussian", "mean": [0.0] * d, "cov": np.eye(d).tolist()},
            "options": {"kernel": {"bandwidth": bandwidth}, "optimizer": optimizer, "dtype": "float64",
                        "init": {"method": "normal"}}}
    log_sd = np.log(run(spec).particles.numpy().std(0, ddof=1))
    return float(log_sd.mean()), float(np.abs(log_sd).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dims", type=int, nargs="+", default=[10, 30, 60, 100])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    header = "| rule | " + " | ".join(f"d = {d}" for d in args.dims) + " |"
    lines = [header, "|---|" + "---|" * len(args.dims)]
    for label, bandwidth, optimizer in RULES:
        cells = []
        for d in args.dims:
            mean_log, worst = spread(d, bandwidth, optimizer, args.steps)
            cells.append(f"{mean_log:+.2f} ({worst:.2f})")
            print(label, d, cells[-1], flush=True)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    body = "\n".join([
        f"`benchmarks/variance_collapse.py`: N(0, I_d), 100 particles started at exact draws, {args.steps} SVGD "
        "steps, float64, CPU. Cell: mean over coordinates of log(particle sd) (0 = right spread; −0.69 = half) "
        "and, in brackets, the worst |log sd| (100 exact draws alone give ≈ 0.15-0.25 there).", "",
        *lines, "",
        "The usual bandwidth shrinks the spread more as d grows, and Adam's per-coordinate scaling makes it worse. "
        "A kernel as wide as the median squared distance keeps most of it, and widening it further with d keeps "
        "more: `auto` runs SVGD in its whitened space with h = max(1, d/20)·med² and SGD (docs/method-choice.md).",
    ])
    if not args.no_write:
        replace_section(Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md",
                        "Variance collapse of SVGD (issue 14)", body)
    print(body)


if __name__ == "__main__":
    main()
