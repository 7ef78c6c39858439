"""f-POVI step time against weight-space SVGD on the same network (issue 13, "Speed", first half), and
`amortized_fsvgd` (a generator trained with f-SVGD's direction, issue 40) against `fsvgd` on it.

UCI size as the f-POVI paper's main table: boston split 0 (`uci:bostonHousing:split=0`, standardised), a
1×50 ReLU BNN with the f-POVI prior N(0, 1/n_out) and InverseGamma(1, 0.1) noise, 20 particles, batch 100.
`fsvgd`/`fwsgld`/`fpisgld` run with their defaults (100 extras, 40 prior draws, Adam 4e-3); `svgd` with Adam
4e-3 and its default kernel; `amortized_fsvgd` with its defaults (generator 2×64 ReLU, k = 64 noise inputs, a
batch of 20 draws) and Adam 4e-3. All methods are timed in interleaved rounds (each round a ≥ 0.4 s batch of
steps per method, so they share the background load); the table gives the median per-step time over
rounds, and the ratio is taken within the run.

    python benchmarks/function_space_speed.py [--rounds 15] [--no-write]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import fmt_ratio, fmt_seconds, load_average, machine_summary, replace_section  # noqa: E402

from inference_core.spec import validate_job_spec  # noqa: E402
from inference_core.training import build_method  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
SECTION = "f-POVI: step time against weight-space SVGD (CPU)"
METHODS = ["svgd", "fsvgd", "fwsgld", "fpisgld", "amortized_fsvgd"]
TARGET = {"kind": "bnn", "dataset": "uci:bostonHousing:split=0", "standardize": True, "hidden": [50],
          "activation": "relu", "prior_std_scaling": "fan_out", "noise": {"type": "inverse_gamma_std"},
          "batch_size": 100}


def build(name: str):
    spec = validate_job_spec({"method": name, "target": TARGET, "num_particles": 20, "steps": 1, "seed": 0,
                              "options": {"optimizer": {"name": "adam", "lr": 4e-3}}})
    return build_method(spec)


def timed_round(method, min_seconds: float = 0.4) -> float:
    """Per-step seconds of a batch of steps lasting at least min_seconds."""
    steps, start = 0, time.perf_counter()
    while True:
        method.step()
        steps += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds and steps >= 5:
            return elapsed / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = datetime.now(UTC)
    load_start = load_average()
    methods = {name: build(name) for name in METHODS}
    for method in methods.values():  # warm-up
        for _ in range(20):
            method.step()
    times: dict[str, list[float]] = {name: [] for name in METHODS}
    for _ in range(args.rounds):
        for name, method in methods.items():
            times[name].append(timed_round(method))
    load_end = load_average()
    medians = {name: statistics.median(values) for name, values in times.items()}
    target = methods["fsvgd"].target
    n_weights = methods["fsvgd"].network.n_weights

    rows = ["| method | time per step | spread (min–max over rounds) | / svgd |", "|---|---|---|---|"]
    for name in METHODS:
        rows.append(f"| `{name}` | {fmt_seconds(medians[name])} | {fmt_seconds(min(times[name]))}–"
                    f"{fmt_seconds(max(times[name]))} | {fmt_ratio(medians[name] / medians['svgd'])} |")
    text = "\n".join([
        f"Run {started:%Y-%m-%d %H:%M} UTC with `python benchmarks/function_space_speed.py` (torch threads 1).",
        f"Machine: {machine_summary()}. Load average at start {load_start}, at end {load_end}: the machine is "
        "shared with other jobs, so absolute times are indicative; the ratios are measured side by side in one "
        "run (interleaved rounds).",
        "",
        f"Boston split 0 ({target.n_data} training rows, 13 features, standardised), 1×50 ReLU BNN "
        f"({n_weights} weights + log σ), prior N(0, 1/n_out), InverseGamma(1, 0.1) noise, 20 particles, batch 100. "
        "One `method.step()` each: for `svgd` the weight-space score (autograd through the batch), the median "
        "bandwidth over 20×20 weight distances and the Adam update; for the f-POVI methods the mixed batch "
        "(100 rows + 100 perturbed extras), the network forward with graph, 40 fresh prior networks at 4 points "
        "and the float64 Gaussian fit (4×4 eigendecomposition), the POVI direction on the 20×200 function "
        "values, the pull-back VJP, the weight Adam step and the noise MAP step; for `amortized_fsvgd` the same "
        "function-space direction on a batch of 20 generated weight vectors, the VJP through the network, the "
        "noise coordinate's MAP gradient and the pull-back through the generator (2×64 ReLU, 64 noise inputs, "
        "752 outputs) with its Adam step. Median over "
        f"{args.rounds} rounds after 20 warm-up steps.",
        "",
        *rows,
        "",
        f"f-SVGD / SVGD step time: {fmt_ratio(medians['fsvgd'] / medians['svgd'])}. The f-POVI step does more "
        "work per step by construction (twice the forward batch, three backward passes — likelihood score on "
        "the function values, pull-back VJP, noise MAP — and 40 fresh prior networks); no goal is set for this "
        "ratio in the issue.",
        "",
        f"amortized_fsvgd / fsvgd step time: {fmt_ratio(medians['amortized_fsvgd'] / medians['fsvgd'])} (the "
        "generator's forward and backward passes on top of the same function-space direction).",
    ])
    print(text)
    if not args.no_write:
        replace_section(DOC, SECTION, text)


if __name__ == "__main__":
    main()
