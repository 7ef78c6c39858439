"""Cost per step of every method on one small target, through the public HTTP API.

    python benchmarks/method_cost.py [--url URL] [--steps 300] [--particles 100,1000] [--dim 10]
                                     [--methods a,b] [--report] [--no-run]

Each method the server lists for the `banana` kind (GET /v1/methods) runs once on a banana of dimension `--dim`
(curvature 0.03, scale 10; the remaining coordinates standard normal) with each of the `--particles` counts (the
batch size of the generative methods; NUTS/HMC: a step is one transition of each of the default 4 chains, and the
warm-up is shortened to 100 transitions, so most measured steps are kept draws) and its defaults otherwise; diagnostics are off (`eval.ksd`, `eval.mmd` false) and no
checkpoint is written before the end, so the steps are the method's own work plus the worker's progress
reports. From the job's metric trace (GET /v1/jobs/{id}/metrics), between its first and last point:

* seconds per step = Δ wall_time_s / Δ step;
* target evaluations per step = Δ grad_evals / Δ step (rows of log-density or score, each particle or draw
  one row; `grad_evals` is cumulative and counts no diagnostics).

Set-up before the first step (Pathfinder for `auto` and the whitened methods) is therefore not in the per-step
numbers; `setup_grad_evals` gives its evaluations (grad_evals at the first point minus the first point's
steps × the per-step rate; not given for NUTS/HMC, whose rate changes between warm-up and sampling). `auto` stops when its moments stop moving, so it may run fewer steps.

Without `--url` an embedded service (API + one worker, SQLite) is started in a temporary folder. Writes
benchmarks/results/method_cost.json; `--report` writes the section "Cost per step (measured)" of
docs/method-choice.md from it. Wall-clock numbers depend on the machine and what else runs on it; the
results file records both.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._timing import fmt_seconds, machine_summary, replace_section  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "method_cost.json"
DOC = ROOT / "docs" / "method-choice.md"
SECTION = "Cost per step (measured)"
MCMC = {"nuts", "hmc"}


def job_spec(method: str, particles: int, args: argparse.Namespace) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "method": method, "target": {"kind": "banana", "dim": args.dim}, "num_particles": particles,
        "steps": args.steps, "seed": 0, "eval": {"ksd": False, "mmd": False}, "checkpoint_every": args.steps,
        "metrics_every": max(1, args.steps // 30), "name": f"method cost {method}",
    }
    if method in MCMC:
        spec["options"] = {"warmup_steps": 100}
    return spec


def trace(api: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = []
    since = None
    while True:
        params = {"since_step": since} if since is not None else {}
        page = api.get(f"/v1/jobs/{job_id}/metrics", params=params).raise_for_status().json()
        points += page["points"]
        since = page["next_since_step"]
        if since is None:
            return points


def measure(api: httpx.Client, method: str, particles: int, args: argparse.Namespace) -> dict[str, Any]:
    response = api.post("/v1/jobs", json=job_spec(method, particles, args))
    if response.status_code >= 300:
        return {"status": "rejected", "code": response.json().get("code"), "detail": response.json().get("detail")}
    job = response.json()
    started = time.monotonic()
    while job["status"] in ("queued", "running"):
        if time.monotonic() - started > args.timeout:
            api.post(f"/v1/jobs/{job['id']}/cancel")
            return {"status": "timeout"}
        time.sleep(0.2)
        job = api.get(f"/v1/jobs/{job['id']}").raise_for_status().json()
    if job["status"] != "succeeded":
        return {"status": job["status"], "code": (job.get("error") or {}).get("code")}
    points = [p for p in trace(api, job["id"]) if "grad_evals" in p["values"]]
    first, last = points[0], points[-1]
    steps = last["step"] - first["step"]
    per_step_evals = (last["values"]["grad_evals"] - first["values"]["grad_evals"]) / steps
    return {
        "status": "succeeded", "steps": last["step"], "trace_points": len(points),
        "seconds_per_step": (last["wall_time_s"] - first["wall_time_s"]) / steps,
        "grad_evals_per_step": per_step_evals,
        "setup_grad_evals": None if method in MCMC else first["values"]["grad_evals"] - first["step"] * per_step_evals,
        "final_grad_evals": job["metrics"].get("grad_evals"),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from contextlib import nullcontext

    from tests.support.stack import started_embedded

    with (nullcontext(None) if args.url else tempfile.TemporaryDirectory()) as tmp, \
            (nullcontext(None) if args.url else started_embedded(Path(tmp))) as stack:
        url = args.url or stack.base_url
        with httpx.Client(base_url=url, timeout=60) as api:
            catalog = api.get("/v1/methods").raise_for_status().json()["methods"]
            methods = [m["name"] for m in catalog if "banana" in m.get("target_kinds", [])]
            if args.methods:
                methods = [m for m in methods if m in args.methods]
            rows: dict[str, dict[str, Any]] = {}
            for method in methods:
                for particles in args.particles:
                    rows.setdefault(method, {})[str(particles)] = measure(api, method, particles, args)
                    print(method, particles, json.dumps(rows[method][str(particles)]), flush=True)
    return {"machine": machine_summary(with_load=True), "target": f"banana, dim {args.dim}",
            "particles": args.particles, "steps": args.steps, "methods": rows}


def _cell(row: dict[str, Any], key: str) -> str:
    if row["status"] != "succeeded":
        return f"{row['status']} {row.get('code') or ''}".strip()
    value = row[key]
    return "—" if value is None else fmt_seconds(value) if key == "seconds_per_step" else f"{value:,.0f}"


def report(results: dict[str, Any]) -> str:
    counts = [str(n) for n in results["particles"]]
    lines = [
        "Written by `python benchmarks/method_cost.py --report` (what is measured, in its docstring): each method over "
        f"HTTP on a {results['target']} target with n = {' and '.join(counts)} particles (the batch size of the "
        f"generative methods), {results['steps']} steps, its defaults, diagnostics off. Per step = between the "
        "first and the last point of the job's metric trace, so set-up (Pathfinder) is apart; a target "
        "evaluation is one row of log-density or score. NUTS and HMC: a step is one transition of each of 4 "
        "chains, most of them after a 100-transition warm-up; n does not apply to them. Machine: "
        f"{results['machine']}. It is shared by several jobs on 2 cores: take the seconds as orders of magnitude "
        "(at these sizes they are mostly fixed overhead per step) and the evaluations as exact counts.",
        "",
        "| method | " + " | ".join(f"seconds per step, n = {n}" for n in counts) + " | "
        + " | ".join(f"evaluations per step, n = {n}" for n in counts) + " | set-up evaluations |",
        "|---" * (2 + 2 * len(counts)) + "|",
    ]
    for method, by_count in results["methods"].items():
        rows = [by_count[n] for n in counts]
        setup = _cell(rows[0], "setup_grad_evals") if rows[0]["status"] == "succeeded" else ""
        lines.append(f"| `{method}` | " + " | ".join(_cell(row, "seconds_per_step") for row in rows) + " | "
                     + " | ".join(_cell(row, "grad_evals_per_step") for row in rows) + f" | {setup} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--particles", type=lambda s: [int(n) for n in s.split(",")], default=[100, 1000])
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--methods", type=lambda s: s.split(","))
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--report", action="store_true", help="write the section of docs/method-choice.md")
    parser.add_argument("--no-run", action="store_true", help="only --report from the saved results")
    args = parser.parse_args()
    if not args.no_run:
        results = run(args)
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(results, indent=1) + "\n")
    if args.report:
        replace_section(DOC, SECTION, report(json.loads(args.results.read_text())))


if __name__ == "__main__":
    main()
