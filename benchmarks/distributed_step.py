"""Step time of one job against its ranks (`resources.processes`, issue 44), measured side by side in one run.

Each case runs the same job spec through `inference_core.run(spec, group=...)` as k ranks of a process group
(k processes started here, a TCPStore on loopback) and times rank 0's steps after a warm-up. The CPU run (gloo)
compares k = 1 and 2 on this machine, each rank with cores // k torch threads; `--device cuda` (NCCL, one GPU a
rank) runs k = 1, 2, 4, 8 up to the GPUs present: SVGD at n = 10⁶ particles (triton pair sums) and GPVI on a BNN
over a large synthetic data set. Results go to benchmarks/results/distributed_step[_cuda].json and the section
"One job on several processes" of docs/benchmarks.md (`--render` rewrites it from the committed results).

    python benchmarks/distributed_step.py                 # CPU: k = 1, 2
    python benchmarks/distributed_step.py --device cuda   # every k ≤ GPUs among 1, 2, 4, 8
    python benchmarks/distributed_step.py --render
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

DOC = ROOT / "docs" / "benchmarks.md"
TITLE = "One job on several processes (issue 44)"
RESULTS = {"cpu": ROOT / "benchmarks" / "results" / "distributed_step.json",
           "cuda": ROOT / "benchmarks" / "results" / "distributed_step_cuda.json"}


def synthetic_regression(rows: int, features: int, seed: int = 0) -> dict:
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features))
    y = np.sin(x[:, 0]) + 0.5 * x[:, 1] + 0.1 * rng.normal(size=rows)
    return {"X": np.round(x, 5).tolist(), "y": np.round(y, 5).tolist()}


def cases(device: str) -> dict[str, dict]:
    """name → job spec (steps = warm-up + timed)."""
    if device == "cpu":
        return {
            "svgd, gaussian d = 16, n = 4,096": {
                "method": "svgd", "num_particles": 4096, "steps": 25, "seed": 0, "device": "cpu",
                "target": {"kind": "gaussian", "mean": [0.0] * 16, "cov": None},
            },
            "svgd, as above, bandwidth median_subsampled": {
                "method": "svgd", "num_particles": 4096, "steps": 25, "seed": 0, "device": "cpu",
                "target": {"kind": "gaussian", "mean": [0.0] * 16, "cov": None},
                "options": {"kernel": {"bandwidth": {"rule": "median_subsampled"}}},
            },
            "gpvi, bnn [50] over 4,000 × 8 rows, batch 256": {
                "method": "gpvi", "num_particles": 256, "steps": 25, "seed": 0, "device": "cpu",
                "target": {"kind": "bnn", "task": "regression", "hidden": [50],
                           "dataset": synthetic_regression(4000, 8)},
            },
        }
    return {
        "svgd, gaussian d = 2, n = 10⁶": {
            "method": "svgd", "num_particles": 1_000_000, "steps": 8, "seed": 0, "device": "cuda",
            "target": {"kind": "gaussian", "mean": [0.0, 0.0], "cov": None},
            "options": {"kernel": {"bandwidth": {"rule": "median_subsampled"}}},
        },
        "gpvi, bnn [50] over 200,000 × 8 rows, batch 1,024": {
            "method": "gpvi", "num_particles": 1024, "steps": 25, "seed": 0, "device": "cuda",
            "target": {"kind": "bnn", "task": "regression", "hidden": [50],
                       "dataset": synthetic_regression(200_000, 8)},
        },
    }


def clean(spec: dict) -> dict:
    """The spec with an identity covariance where `cov` is None."""
    target = {k: v for k, v in spec["target"].items() if v is not None}
    if target["kind"] == "gaussian" and "cov" not in target:
        target["cov"] = [[1.0 if i == j else 0.0 for j in range(len(target["mean"]))] for i in range(len(target["mean"]))]
    return {**spec, "target": target}


WARMUP = 5


def rank_main(rank: int, world: int, port: int, spec: dict, threads: int, queue) -> None:  # noqa: ANN001
    import torch

    from inference_core.distributed import join_group, leave_group
    from inference_core.training import RunHooks, run
    from workers.ranks import open_store

    torch.set_num_threads(threads)
    if spec["device"] == "cuda":
        torch.cuda.set_device(rank)
    store = open_store("127.0.0.1", port, world, master=rank == 0, timeout_s=600)
    group = join_group(store, rank, world, timeout_s=600)
    stamps: list[float] = []

    class Stamps(RunHooks):
        def on_step(self, step: int, total_steps: int, metrics: dict) -> None:
            if spec["device"] == "cuda":
                torch.cuda.synchronize()
            stamps.append(time.perf_counter())

    try:
        run(spec, hooks=Stamps(), group=group)
    finally:
        leave_group(group)
    if rank == 0:
        steps = [b - a for a, b in zip(stamps[WARMUP:], stamps[WARMUP + 1:], strict=False)]
        queue.put(statistics.median(steps))


def measure_case(spec: dict, world: int, cores: int) -> float:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with socket.socket() as probe:  # a free port for rank 0's store
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    threads = max(1, cores // world)
    processes = [ctx.Process(target=rank_main, args=(rank, world, port, spec, threads, queue)) for rank in range(world)]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
        if process.exitcode != 0:
            raise SystemExit(f"a rank exited with {process.exitcode}")
    return float(queue.get(timeout=10))


def measure(device: str) -> dict:
    import torch
    from _timing import machine_summary

    cores = os.cpu_count() or 1
    ks = [1, 2] if device == "cpu" else [k for k in (1, 2, 4, 8) if k <= torch.cuda.device_count()]
    rows = []
    for name, spec in cases(device).items():
        spec = clean(spec)
        times = {k: measure_case(spec, k, cores) for k in ks}
        rows.append({"case": name, "step_s": {str(k): t for k, t in times.items()},
                     "speedup": {str(k): times[1] / t for k, t in times.items()}})
        print(name, {k: f"{t * 1e3:.1f} ms" for k, t in times.items()}, flush=True)
    return {"device": device, "when": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine_summary(with_load=True), "cores": cores,
            "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None, "ranks": ks, "rows": rows}


def report(results: dict[str, dict]) -> str:
    lines = [
        "The same job run as k ranks of one process group (`resources.processes`), rank 0's median step time after "
        f"{WARMUP} warm-up steps, measured side by side in one run (`benchmarks/distributed_step.py`). On the CPU "
        "each rank has cores ÷ k torch threads, so k = 2 on 2 cores splits the same cores between two processes: "
        "the ratio shows what the collectives cost against the work they split, not more hardware. What every rank "
        "still does whole: the bandwidth (svgd's exact median forms all n² distances on every rank; the subsampled "
        "median does not) and GPVI's n′×n noise distances (see docs/architecture.md, \"Multi-process jobs\").",
        "",
    ]
    for device in ("cpu", "cuda"):
        run = results.get(device)
        if not run:
            if device == "cuda":
                lines += ["**GPUs:** not measured yet — `python benchmarks/distributed_step.py --device cuda` on a "
                          "machine with several GPUs (k = 1, 2, 4, 8: SVGD at n = 10⁶, GPVI on a BNN over 200,000 "
                          "rows) writes benchmarks/results/distributed_step_cuda.json.", ""]
            continue
        ks = run["ranks"]
        where = run["gpu"] or f"{run['cores']} CPU cores"
        lines += [f"**{device.upper()}** — {run['when']}, {where}; {run['machine']}", "",
                  "| job | " + " | ".join(f"k = {k}" for k in ks) + " | " + " | ".join(f"speed-up k = {k}" for k in ks[1:]) + " |",
                  "|---|" + "---:|" * (2 * len(ks) - 1)]
        for row in run["rows"]:
            lines.append(f"| {row['case']} | " + " | ".join(f"{row['step_s'][str(k)] * 1e3:.1f} ms" for k in ks)
                         + " | " + " | ".join(f"{row['speedup'][str(k)]:.2f}×" for k in ks[1:]) + " |")
        lines.append("")
    return "\n".join(lines)


def render() -> str:
    """The section from the committed raw results."""
    from _results import load_results

    results = {device: load_results(path, empty_key="rows") for device, path in RESULTS.items() if path.exists()}
    return report({device: run for device, run in results.items() if run.get("rows")})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--render", action="store_true", help="rewrite the section from the committed results")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    from _results import save_results
    from _timing import replace_section

    if not args.render:
        save_results(RESULTS[args.device], measure(args.device))
    body = render()
    print(body)
    if not args.no_write:
        replace_section(DOC, TITLE, body)


if __name__ == "__main__":
    main()
