"""`POST /v1/samplers/{id}/sample` latency over real HTTP (issue 6 goal: 10,000 draws from a trained 2-D GPVI
generator in < 50 ms median on the CPU), with the API and a worker started as for the embedded default.

    python benchmarks/sample_latency.py [--steps 2000] [--repeats 50]

Writes the section "## /sample latency (HTTP, CPU)" of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._timing import cpu_model, load_average, replace_section, timed_calls  # noqa: E402
from tests.support.stack import started_embedded  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    load_at_start = load_average()
    with tempfile.TemporaryDirectory() as tmp, started_embedded(Path(tmp)) as stack:
        spec = {"method": "gpvi", "target": {"kind": "gaussian", "mean": [0.0, 0.0],
                                              "cov": [[1.0, 0.5], [0.5, 2.0]]},
                "num_particles": 100, "steps": args.steps, "seed": 0}
        job_id = stack.submit(spec).json()["id"]
        job = stack.wait_status(job_id, {"succeeded", "failed"}, timeout=3600)
        if job["status"] != "succeeded":
            raise SystemExit(f"training failed: {job['error']}")
        url = f"/v1/samplers/{job['sampler_id']}/sample"
        config = stack.client.get(f"/v1/samplers/{job['sampler_id']}").json()["config"]["generator"]
        rows = []
        for label, headers in [("npy", {"Accept": "application/x-npy"}), ("json", {})]:
            seeds = iter(range(10**6))

            def call(headers=headers, seeds=seeds) -> None:  # noqa: ANN001
                response = stack.client.post(url, json={"n": 10_000, "seed": next(seeds)}, headers=headers)
                response.raise_for_status()

            times = timed_calls(call, args.repeats)
            rows.append((label, statistics.median(times), sorted(times)[int(0.9 * len(times))]))
    lines = [
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with `python benchmarks/sample_latency.py`.",
        f"Machine: {cpu_model()}, {torch.get_num_threads()} torch threads in the API process; torch {torch.__version__}.",
        f"Load average at start: {load_at_start}.",
        "",
        f"API and worker as for `parvis serve` (uvicorn, SQLite, filesystem broker); a GPVI generator trained for "
        f"{args.steps} steps on a 2-D Gaussian (generator: hidden {config['hidden']}, noise dim "
        f"{config['noise_dim']}); then `POST /v1/samplers/{{id}}/sample` with n = 10,000 and a new seed each call, "
        f"{args.repeats} calls after 3 warm-ups, through httpx on 127.0.0.1 (request, sampling, encoding, transfer).",
        "",
        "| response format | median | 90th percentile | goal |",
        "|---|---|---|---|",
    ]
    lines += [f"| {label} | {median * 1e3:.1f} ms | {p90 * 1e3:.1f} ms | < 50 ms median |" for label, median, p90 in rows]
    body = "\n".join(lines) + "\n"
    print(body)
    if not args.no_write:
        replace_section(Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md", "/sample latency (HTTP, CPU)",
                        body)


if __name__ == "__main__":
    main()
