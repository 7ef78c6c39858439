"""Which generator structure (and which options) should GPVI give BNN hypernetworks? UCI cells of GPVI
(hypernetwork) variants (`VARIANTS`: the injective `generator.structure: "coupling"`, the default of before
`noise_holdout`) beside the default's cells, under the protocol of `reproduce_uci.py` otherwise unchanged (its GPVI
setting, one torch thread per cell, seed = split).

    python benchmarks/gpvi_structure_uci.py --datasets boston,energy,yacht --splits 0 --workers 2   # resumable
    python benchmarks/gpvi_structure_uci.py --variants coupling_layers8 --datasets yacht --splits 0
    python benchmarks/gpvi_structure_uci.py --compare                                             # print only
    python benchmarks/gpvi_structure_uci.py --step-time      # ms per step, both structures, side by side

Cells: benchmarks/results/uci_gpvi_coupling.json (the default's are those of benchmarks/results/uci.json);
`--step-time` trains the GPVI paper's Figure 1 BNN (reproduce_bnn_figures.py's GPVI setting, 100 draws, λ 0.001)
with each structure in turn, 50 steps at a time for 5 rounds (generative_speed.interleaved_times), one thread,
and stores the medians under "step_time" in the same file.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import reproduce_uci as uci  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "uci_gpvi_coupling.json"
#: variant → options added to reproduce_uci's GPVI setting (`generator` merged into its own); a cell is stored as
#: "<data set>/gpvi_<variant>/<split>"
#: The coupling cells ran before `noise_holdout` was GPVI's default (0.1 since 2026-11-29), so they say 0; the
#: cells of "no_holdout" are the default's of before (λ 0.001, all rows in the likelihood), kept for comparison.
#: The cells of "constant_lr" are the default's of before `lr_schedule` (cosine for BNN hypernetworks since
#: 2026-11-29); every other variant ran before it too, so each says "constant".
VARIANTS: dict[str, dict] = {
    "coupling": {"generator": {"structure": "coupling"}, "noise_holdout": 0.0, "lr_schedule": "constant"},
    "coupling_layers8": {"generator": {"structure": "coupling", "coupling_layers": 8}, "noise_holdout": 0.0,
                         "lr_schedule": "constant"},
    "coupling_hidden128": {"generator": {"structure": "coupling", "coupling_hidden": 128}, "noise_holdout": 0.0,
                           "lr_schedule": "constant"},
    "no_holdout": {"noise_holdout": 0.0, "lr_schedule": "constant"},
    "constant_lr": {"lr_schedule": "constant"},
}


def variant_setting(variant: str) -> uci.MethodSetting:
    """reproduce_uci's GPVI setting with the variant's options added."""
    gpvi = uci.METHODS["gpvi"]
    options = json.loads(json.dumps(gpvi.options))
    added = dict(VARIANTS[variant])
    options["generator"].update(added.pop("generator", {}))
    options.update(added)
    return uci.MethodSetting(gpvi.method, f"GPVI ({variant})", gpvi.num_particles, options, max_splits=gpvi.max_splits)


def compare() -> list[str]:
    """One line per variant cell: test RMSE / NLL (original units) and seconds, beside the default's cell."""
    variants = uci.load_results(RESULTS)["cells"]
    default = uci.load_results(uci.RESULTS)["cells"]
    lines = []
    for key in sorted(variants):
        dataset, method, split = key.split("/")
        mine, theirs = variants[key], default.get(uci.cell_key(dataset, "gpvi", int(split)))
        if "error" in mine or theirs is None or "error" in theirs:
            continue
        lines.append(f"{dataset} split {split}: {method.removeprefix('gpvi_')} RMSE {mine['test_rmse']:.3f}, NLL {-mine['test_ll']:.3f}, "
                     f"{mine['cell_s']:.0f} s; default RMSE {theirs['test_rmse']:.3f}, NLL {-theirs['test_ll']:.3f}, "
                     f"{theirs['cell_s']:.0f} s")
    return lines


def step_times(rounds: int = 5, block: int = 50) -> dict[str, float]:
    """Median ms per GPVI step on Figure 1's BNN for each structure, measured in turn (one run, one thread)."""
    import torch
    from generative_speed import interleaved_times
    from reproduce_bnn_figures import N_DRAWS, regression_setup

    from inference_core.methods.generative.base import HYPERNETWORK_LAMBDA
    from inference_core.spec import validate_job_spec
    from inference_core.training import build_method

    torch.set_num_threads(1)
    spec = regression_setup()[0]

    def gpvi(structure: str):
        generator = {"hidden": [32, 32], "noise_dim": 32, "lambda": HYPERNETWORK_LAMBDA, "structure": structure}
        return build_method(validate_job_spec({
            "method": "gpvi", "target": spec, "num_particles": N_DRAWS, "steps": 1, "seed": 0, "device": "cpu",
            "options": {"helper": "matrix", "generator": generator, "optimizer": {"name": "adam", "lr": 1e-3}}}))

    return dict(interleaved_times([(name, gpvi(name)) for name in ("residual", "coupling")], rounds, block))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default="boston,energy,yacht")
    parser.add_argument("--splits", default="0")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--variants", default="coupling", help=f"comma-separated, of {list(VARIANTS)}")
    parser.add_argument("--compare", action="store_true", help="print the comparison of the stored cells only")
    parser.add_argument("--step-time", action="store_true", help="time a step of each structure (Figure 1's BNN)")
    args = parser.parse_args()
    if args.step_time:
        times = step_times()
        results = uci.load_results(RESULTS)
        results["step_time"] = {"ms": {k: round(v, 2) for k, v in times.items()}, "load_average": os.getloadavg(),
                                "measured": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")}
        uci.save_results(RESULTS, results)
        print(results["step_time"], f"coupling / residual: {times['coupling'] / times['residual']:.2f}")
        return
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; known: {list(VARIANTS)}")
    for variant in variants:  # the grid reads a setting by its key, which names the cells
        uci.METHODS[f"gpvi_{variant}"] = variant_setting(variant)
    if not args.compare:
        uci.run_grid(argparse.Namespace(
            datasets=[d for d in args.datasets.split(",") if d], methods=[f"gpvi_{v}" for v in variants],
            splits=uci.parse_splits(args.splits), workers=args.workers, results=RESULTS, time_budget=None, scale=1.0))
    print("\n".join(compare()))


if __name__ == "__main__":
    main()
