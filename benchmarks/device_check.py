"""The robustness suite in-process on one device, for checking the inference core on a GPU against the CPU.

    python benchmarks/device_check.py --device cuda [--methods auto,svgd,gpvi] [--problems a,b] [--seed 0]
    python benchmarks/device_check.py --device cpu --problems ar2 --methods auto     # a quick run here
    python benchmarks/device_check.py --device cpu --methods auto --problems funnel --seeds 0-5 --jobs 6 \
        --options '{"flow": {"batch_start": null}}'                                   # a seed sweep of an option

Each cell builds the same job spec as `benchmarks/robustness.py` (the suite problem as an `expression` target,
the method's defaults plus METHOD_SPECS) with `device` set, runs it with `inference_core.training.run` (no
service: a GPU machine may lack the web stack), and scores the draws (the particles, or 2,000 sampler draws for a
generative method) against the stored reference with the suite's bars. Prints one JSON line per cell (score,
gradient evaluations, wall time, the quality verdict) so runs on two devices can be compared side by side;
`--out` also writes them as a JSON list.

`--every-method` first runs every other method of the catalog for 20 steps on a small inline BNN regression (the one
target kind every method accepts) on the device, and reports where its particles or sampler draws ended up and
whether they are finite: a method that silently falls back to the CPU, or breaks on CUDA, shows there.

`--find-mismatches` runs everything inside `device_mismatches.MismatchFinder`: an op that fails on mixed
devices is recorded and retried on the device, so one pass lists every site (a plain run stops at the first).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.device_mismatches import MismatchFinder  # noqa: E402
from benchmarks.robustness.problems import problems  # noqa: E402
from benchmarks.robustness.scoring import load_reference, score  # noqa: E402
from benchmarks.robustness.specs import METHOD_SPECS, server_method  # noqa: E402
from inference_core.catalog import METHODS  # noqa: E402
from inference_core.training import run  # noqa: E402

SAMPLER_DRAWS = 2000


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`base` with `extra`'s keys set, nested dicts merged key by key."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def run_cell(name: str, column: str, device: str, seed: int, options: dict[str, Any] | None = None) -> dict[str, Any]:
    problem = problems()[name]
    extra = dict(METHOD_SPECS.get(column, {}))
    extra.pop("method", None)
    spec = {"method": server_method(column), "target": problem.target_spec(), "device": device, "seed": seed,
            **extra}
    spec["options"] = merged(spec.get("options", {}), options or {})
    started = time.perf_counter()
    try:
        result = run(spec)
    except Exception as exc:  # a failed job is a result of the check, not a crash of it
        return {"problem": name, "method": column, "device": device, "seed": seed, "status": "failed",
                "error": f"{type(exc).__name__}: {exc}"[:400]}
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    wall = time.perf_counter() - started
    method = result.method
    sampler = method.sampler()
    draws = sampler.sample(SAMPLER_DRAWS, seed=0) if sampler is not None else method.particles()
    draws = draws.detach().to("cpu", torch.float64).numpy()
    reference = load_reference(name)
    cell = score(draws, reference["mean"], reference["sd"], problem.param_names, problem.scored)
    return {"problem": name, "method": column, "device": device, "seed": seed, "status": "succeeded",
            "particles_device": str(method.particles().device), "steps": result.steps_completed,
            "grad_evals": result.final_metrics.get("grad_evals"), "wall_s": round(wall, 2),
            "verdict": result.quality.get("verdict"), "probed_modes": result.quality.get("probed_modes"),
            "rhat_max": (result.quality.get("chains") or {}).get("rhat_max"),
            **{k: cell[k] for k in ("mean_error", "log_sd_error", "pass")}}


def run_cell_args(cell_args: tuple[Any, ...]) -> dict[str, Any]:
    return run_cell(*cell_args)


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        seeds.extend(range(int(first), int(last or first) + 1))
    return seeds


def smoke_target() -> dict[str, Any]:
    rng = torch.Generator().manual_seed(3)
    x = torch.randn(60, 3, generator=rng, dtype=torch.float64)
    y = torch.sin(x[:, 0]) + 0.5 * x[:, 1] + 0.1 * torch.randn(60, generator=rng, dtype=torch.float64)
    return {"kind": "bnn", "dataset": {"X": x.tolist(), "y": y.tolist()}, "standardize": True, "hidden": [16],
            "batch_size": 16}


def smoke_cell(name: str, device: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"method": name, "target": smoke_target(), "device": device, "steps": 20,
                            "num_particles": 30, "seed": 0}
    if name in ("nuts", "hmc"):  # transitions, each up to hundreds of gradients: a few are enough here
        spec.update(steps=4, num_particles=4, options={"warmup_steps": 2})
    started = time.perf_counter()
    try:
        method = run(spec).method
        sampler = method.sampler()
        inputs = torch.zeros(5, 3) if name == "fvi" else None  # FVI's sampler draws functions at inputs
        out = sampler.sample(50, seed=0, x=inputs) if sampler is not None else method.particles()
    except Exception as exc:
        return {"smoke": name, "device": device, "status": "failed", "error": f"{type(exc).__name__}: {exc}"[:400]}
    return {"smoke": name, "device": device, "status": "succeeded", "output_device": str(out.device),
            "finite": bool(torch.isfinite(out).all()), "wall_s": round(time.perf_counter() - started, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--methods", default="auto,svgd,gpvi")
    parser.add_argument("--problems", default=",".join(problems()))
    parser.add_argument("--seeds", default="0", help="seeds to run each cell with: 0, 0-5 or 0,3,4")
    parser.add_argument("--options", type=json.loads, default={},
                        help="JSON merged into every cell's options, e.g. '{\"flow\": {\"batch_start\": null}}'")
    parser.add_argument("--jobs", type=int, default=1,
                        help="cells at once, each in its own process with one torch thread (a seed sweep on many cores)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--every-method", action="store_true", help="first a 20-step job of every method")
    parser.add_argument("--find-mismatches", action="store_true",
                        help="record ops that fail on mixed devices, retry them on the device, list them at the end")
    args = parser.parse_args()
    finder = MismatchFinder(args.device) if args.find_mismatches else None
    cells: list[dict[str, Any]] = []

    def record(cell: dict[str, Any]) -> None:
        print(json.dumps(cell, default=float), flush=True)
        cells.append(cell)
        if args.out:
            args.out.write_text(json.dumps(cells, indent=1, default=float) + "\n")

    with finder if finder is not None else contextlib.nullcontext():
        if args.every_method:
            for name in (m for m in METHODS if m != "auto"):  # `auto` runs in the scored cells below
                if finder is not None:
                    finder.job = name
                record(smoke_cell(name, args.device))
        cells_to_run = [(name, column, args.device, seed, args.options) for column in args.methods.split(",")
                        for name in args.problems.split(",") for seed in parse_seeds(args.seeds)]
        if args.jobs > 1 and finder is None:
            with multiprocessing.get_context("spawn").Pool(args.jobs, initializer=torch.set_num_threads,
                                                           initargs=(1,)) as pool:
                for cell in pool.imap_unordered(run_cell_args, cells_to_run):
                    record(cell)
        else:
            for cell_args in cells_to_run:
                if finder is not None:
                    finder.job = f"{cell_args[1]}/{cell_args[0]}"
                record(run_cell(*cell_args))
    if finder is not None:
        print(finder.report(), flush=True)
    scored = [c for c in cells if "problem" in c]
    passed = sum(bool(c.get("pass")) for c in scored)
    broken = [c["smoke"] for c in cells if "smoke" in c and not (c["status"] == "succeeded" and c["finite"])]
    print(f"{passed} of {len(scored)} cells within the bars on {args.device}; methods that failed the smoke run: "
          f"{broken or 'none'}", flush=True)


if __name__ == "__main__":
    main()
