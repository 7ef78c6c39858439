"""The service under an open-loop load (issue 15, "Done means" 2), loopback only and bounded in time.

For each deployment shape (embedded: SQLite + filesystem broker; cluster: PostgreSQL + Redis), real API and
worker processes (tests.support.stack):
  1. train a small GPVI sampler (2-D Gaussian);
  2. restart the API (cold: torch not imported, no generator loaded), submit one long training job, and at
     once drive an OPEN-LOOP load: requests are sent on a fixed schedule whatever the answers do (asyncio +
     httpx.AsyncClient, one connection per in-flight request): `--rates` job polls/s (GET /v1/jobs/{id} of
     the running job) and `/sample` calls/s (n = 1,000, `.npy`) for `--duration` seconds;
  3. step-up search: the same mix scaled by 0.1 … 3×, `--step-seconds` each, up to the first step whose p99
     is ≥ 250 ms or that has an error: the highest passing rate is reported;
  4. overload (issue 43): the same mix at 2× and 4× the main rates (`--overload`), `--overload-seconds` each.
     Goal: every answer within 1 s, p99 of the accepted ones < 250 ms, every refusal a 503 with Retry-After.
Latency is measured from each request's scheduled send time to its answer (open loop: a client that falls
behind its schedule counts against the service, no coordinated omission). The client's own CPU use (psutil)
and the machine's load average are recorded: on a shared 2-core machine the client competes with the API.

    python benchmarks/load.py [--shapes embedded,cluster] [--duration 60] [--rates 200,25] [--step-seconds 10]

Writes benchmarks/results/load.json and the section "Service under load (issue 15)" of docs/benchmarks.md
(`--quick` writes neither; a run with other --duration/--rates is labelled as such).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._timing import cpu_model, replace_section  # noqa: E402
from service.settings import Settings  # noqa: E402
from tests.support.stack import FAST_LIFECYCLE, Stack  # noqa: E402

SECTION = "Service under load (issue 15)"
RESULTS = ROOT / "benchmarks" / "results" / "load.json"
P99_GOAL_S = 0.250
SAMPLE_N = 1000
REQUEST_TIMEOUT_S = 30.0
CLIENTS = 64
CONNECTIONS_PER_CLIENT = 16
SEARCH_FACTORS = [0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0]
SAMPLER_SPEC = {"method": "gpvi", "target": {"kind": "gaussian", "mean": [0.0, 0.0], "cov": [[1.0, 0.5], [0.5, 2.0]]},
                "num_particles": 100, "steps": 300, "seed": 0}
# Runs on the worker for the whole measurement (cancelled at the end).
TRAINING_SPEC = {"method": "svgd", "target": {"kind": "gaussian", "mean": [0.0] * 10, "cov": np.eye(10).tolist()},
                 "num_particles": 200, "steps": 1_000_000, "seed": 1}


WINDOW_S = 10.0  # the main run's p99 is also reported per window of this many seconds (when is it slow?)


@dataclass
class Outcome:
    route: str
    latency_s: float
    status: int  # 0: no answer (timeout, connection error)
    sent_at_s: float = 0.0  # scheduled send time, seconds after the run's start
    retry_after: bool = False  # the answer carried a Retry-After header


def loadavg() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


@dataclass
class Part:
    """What one client process saw: its outcomes, its loop's lag samples, its CPU seconds and wall time, and how
    many of its requests had no answer by the end (cut off)."""
    outcomes: list[Outcome]
    lags: list[float]
    cpu_s: float
    wall_s: float
    unanswered: int


async def send_part(base_url: str, rates: dict[str, float], duration: float, targets: dict[str, str],
                    start_wall: float, part: int, parts: int) -> Part:
    """This process's share of the open-loop schedule: request seq of a route (rate r) is due at start + seq/r,
    and process `part` of `parts` sends the seqs ≡ part (mod parts), so the processes together send the one
    schedule. `start_wall` (time.time()) is the common start."""
    # Many small clients: one httpx pool with thousands of pending requests scans them on every change
    # (quadratic), which stalled a first run of this script for minutes on the client side.
    limits = httpx.Limits(max_connections=CONNECTIONS_PER_CLIENT, max_keepalive_connections=CONNECTIONS_PER_CLIENT)
    outcomes: list[Outcome] = []
    me = psutil.Process()
    clients = [httpx.AsyncClient(base_url=base_url, timeout=REQUEST_TIMEOUT_S, limits=limits)
               for _ in range(max(1, CLIENTS // parts))]
    loop = asyncio.get_running_loop()
    start = loop.time() + max(0.0, start_wall - time.time())

    async def one(route: str, scheduled: float, seq: int) -> None:
        client = clients[(seq // parts) % len(clients)]
        try:
            if route == "poll":
                response = await client.get(targets["poll"])
            else:
                response = await client.post(targets["sample"], json={"n": SAMPLE_N, "seed": seq},
                                             headers={"Accept": "application/x-npy"})
            status, retry_after = response.status_code, "retry-after" in response.headers
        except httpx.HTTPError:
            status, retry_after = 0, False
        outcomes.append(Outcome(route, loop.time() - scheduled, status, scheduled - start, retry_after))

    async def schedule(route: str, rate: float, tasks: list[asyncio.Task]) -> None:
        for seq in range(part, int(rate * duration), parts):
            when = start + seq / rate
            delay = when - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(route, when, seq)))

    lags: list[float] = []

    async def watch_client_lag() -> None:
        """The client's own event-loop lag: how late it sends what it scheduled (its share of the latencies)."""
        while True:
            began = loop.time()
            await asyncio.sleep(0.02)
            lags.append(loop.time() - began - 0.02)

    cpu_before, wall_before = me.cpu_times(), time.monotonic()
    tasks: list[asyncio.Task] = []
    watcher = asyncio.create_task(watch_client_lag())
    try:
        await asyncio.gather(*(schedule(route, rate, tasks) for route, rate in rates.items() if rate > 0))
        # Bounded: what has no answer by then is counted as such.
        _, pending = await asyncio.wait(tasks, timeout=REQUEST_TIMEOUT_S + 15)
        for task in pending:
            task.cancel()
    finally:
        watcher.cancel()
        for client in clients:
            await client.aclose()
    cpu_after = me.cpu_times()
    cpu = (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system)
    return Part(outcomes, lags, cpu, time.monotonic() - wall_before, len(pending))


def _run_part(args: tuple) -> Part:
    return asyncio.run(send_part(*args))


def drive(base_url: str, rates: dict[str, float], duration: float, targets: dict[str, str],
          processes: int = 1) -> dict[str, Any]:
    """Send each route's requests at its fixed rate for `duration` s from `processes` client processes (one: this
    one); per-route latency percentiles, errors, and the CPU the clients used meanwhile. One Python process tops out
    near one core and queues what it cannot send, so several help only where the client has more than one core of its
    own (`--pin` gives it one: on the 2-core machine of 2026-11-29, three processes did no better than one)."""
    start_wall = time.time() + (0.05 if processes == 1 else 1.0)  # the processes' start-up before the schedule
    jobs = [(base_url, rates, duration, targets, start_wall, part, processes) for part in range(processes)]
    if processes == 1:
        parts = [_run_part(jobs[0])]
    else:
        with ProcessPoolExecutor(max_workers=processes, mp_context=multiprocessing.get_context("fork")) as pool:
            parts = list(pool.map(_run_part, jobs))
    outcomes = [o for p in parts for o in p.outcomes]
    lags = np.array([lag for p in parts for lag in p.lags])
    unanswered = sum(p.unanswered for p in parts)
    wall = max(p.wall_s for p in parts)
    client_cpu = sum(p.cpu_s for p in parts)
    routes = {}
    for route in rates:
        mine = [o for o in outcomes if o.route == route]
        cut = round(unanswered * rates[route] / max(1e-9, sum(rates.values())))  # split of the cut-off ones
        latencies = np.array([o.latency_s for o in mine if o.status == 200]) if mine else np.array([])
        errors: dict[str, int] = {}
        for o in mine:
            if o.status != 200:
                errors[str(o.status or "no_answer")] = errors.get(str(o.status or "no_answer"), 0) + 1
        if cut:
            errors["cut_off"] = cut
        routes[route] = {"rate_per_s": rates[route], "sent": len(mine) + cut, "ok": int(latencies.size), "errors": errors,
                         **{f"p{q}_ms": percentile_ms(latencies, q) for q in (50, 95, 99, 100)}}
        routes[route]["max_ms"] = routes[route].pop("p100_ms")
        answered = np.array([o.latency_s for o in mine if o.status != 0])
        routes[route]["answer_max_ms"] = percentile_ms(answered, 100)  # accepted or refused
        routes[route]["refused_503"] = sum(o.status == 503 for o in mine)
        routes[route]["refused_without_retry_after"] = sum(o.status == 503 and not o.retry_after for o in mine)
    return {"routes": routes, "windows": windows(outcomes, rates, duration), "wall_s": round(wall, 1),
            "client_processes": processes, "client_lag_p99_ms": percentile_ms(lags, 99),
            "client_lag_max_ms": percentile_ms(lags, 100), "client_cpu_s": round(client_cpu, 1),
            "client_cores": round(client_cpu / wall, 2)}


def windows(outcomes: list[Outcome], rates: dict[str, float], duration: float) -> list[dict[str, Any]]:
    """p99 per route in consecutive WINDOW_S-second windows of send time (answered requests only)."""
    out = []
    for lo in np.arange(0.0, duration, WINDOW_S):
        row: dict[str, Any] = {"from_s": float(lo)}
        for route in rates:
            mine = np.array([o.latency_s for o in outcomes
                             if o.route == route and o.status == 200 and lo <= o.sent_at_s < lo + WINDOW_S])
            row[route] = percentile_ms(mine, 99)
        out.append(row)
    return out


def percentile_ms(latencies: np.ndarray, q: float) -> float | None:
    return round(float(np.percentile(latencies, q)) * 1e3, 1) if latencies.size else None


def passes(result: dict[str, Any]) -> bool:
    return all(not r["errors"] and r["p99_ms"] is not None and r["p99_ms"] < P99_GOAL_S * 1e3
               for r in result["routes"].values())


#: Overload goals (issue 43): a refusal or an answer within this, the accepted ones' p99 under P99_GOAL_S.
ANSWER_GOAL_S = 1.0


def overload_passes(result: dict[str, Any]) -> bool:
    """Every request answered within ANSWER_GOAL_S, accepted p99 < P99_GOAL_S, refusals only 503 + Retry-After."""
    for r in result["routes"].values():
        other = {k: v for k, v in r["errors"].items() if k != "503"}
        if other or r["refused_without_retry_after"]:
            return False
        if r["answer_max_ms"] is None or r["answer_max_ms"] >= ANSWER_GOAL_S * 1e3:
            return False
        if r["p99_ms"] is not None and r["p99_ms"] >= P99_GOAL_S * 1e3:
            return False
    return True


def process_cpu(pid: int) -> float:
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
        return sum(p.cpu_times().user + p.cpu_times().system for p in procs)
    except psutil.Error:
        return float("nan")


def pin_apart(stack: Stack) -> dict[str, list[int]] | None:
    """The service's processes (API, workers and their children) on every core but the last, this process (and the
    client processes it forks) on the last: a load generator sharing the service's cores is starved by the training
    worker and queues requests itself (2026-11-29, 2x the target rate with a training job: the API held 0-30
    requests in flight while the client's waited 11-30 s). The cluster shape's PostgreSQL and Redis are not
    moved. None (nothing pinned) on a single core."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    service, client = cores[:-1], cores[-1:]
    for spawned in (stack.api, *stack.workers):
        if spawned is not None:
            root = psutil.Process(spawned.pid)
            for proc in (root, *root.children(recursive=True)):
                proc.cpu_affinity(service)
    psutil.Process().cpu_affinity(client)
    return {"service": service, "client": client}


def run_shape(shape: str, root: Path, rates: dict[str, float], duration: float, step_seconds: float,
              lifecycle: str = "production", overload: tuple[float, ...] = (), overload_seconds: float = 20.0,
              api_env: dict[str, str] | None = None, client_processes: int = 1, pin: bool = False) -> dict:
    # By default the service's own lifecycle timers, not the tests' accelerated ones (heartbeats, reaper passes
    # and progress writes 2.5-10x as often add database writes a deployment would not see).
    timers = {} if lifecycle == "test" else {
        name: str(getattr(Settings(), name.removeprefix("PARVIS_").lower())) for name in FAST_LIFECYCLE}
    all_cores = sorted(os.sched_getaffinity(0))
    stack = Stack(shape, root / shape, extra_env={**timers, **(api_env or {})})
    try:
        stack.migrate()
        stack.start_api()
        stack.start_worker()
        job_id = stack.submit(SAMPLER_SPEC).json()["id"]
        job = stack.wait_status(job_id, {"succeeded", "failed"}, timeout=1800)
        if job["status"] != "succeeded":
            raise SystemExit(f"sampler training failed on {shape}: {job['error']}\n{stack.log_tail()}")
        stack.stop_api()
        stack.start_api()  # cold: returns as soon as /health/live answers
        restarted = time.monotonic()
        pinned = pin_apart(stack) if pin else None
        running = stack.submit(TRAINING_SPEC).json()["id"]
        targets = {"poll": f"/v1/jobs/{running}", "sample": f"/v1/samplers/{job['sampler_id']}/sample"}
        print(f"[{shape}] cold API up, training job {running}; open-loop load {rates} for {duration:.0f} s",
              flush=True)
        load_before = loadavg()
        api_cpu_before = process_cpu(stack.api.pid) if stack.api else float("nan")
        main = drive(stack.base_url, rates, duration, targets, client_processes)
        main["api_cpu_cores"] = round((process_cpu(stack.api.pid) - api_cpu_before) / main["wall_s"], 2) \
            if stack.api else None
        main["loadavg_before"], main["loadavg_after"] = load_before, loadavg()
        main["seconds_since_restart_at_end"] = round(time.monotonic() - restarted, 1)
        main["passes"] = passes(main)
        print(f"[{shape}] main: {json.dumps(main['routes'])} client {main['client_cores']} cores", flush=True)
        print(f"[{shape}] p99 per {WINDOW_S:g} s window: {json.dumps(main['windows'])}", flush=True)
        steps = []
        for factor in SEARCH_FACTORS:
            step_rates = {route: rate * factor for route, rate in rates.items()}
            result = drive(stack.base_url, step_rates, step_seconds, targets, client_processes)
            result["factor"], result["loadavg_after"], result["passes"] = factor, loadavg(), passes(result)
            steps.append(result)
            print(f"[{shape}] step ×{factor}: passes={result['passes']} "
                  f"{ {r: (v['p99_ms'], v['errors']) for r, v in result['routes'].items()} }", flush=True)
            if not result["passes"]:
                break
        passing = [s for s in steps if s["passes"]]
        best = max(passing, key=lambda s: s["factor"]) if passing else None
        overloads = []
        for factor in overload:
            step_rates = {route: rate * factor for route, rate in rates.items()}
            load_at_start = loadavg()
            result = drive(stack.base_url, step_rates, overload_seconds, targets, client_processes)
            result["factor"], result["passes"] = factor, overload_passes(result)
            result["loadavg_before"], result["loadavg_after"] = load_at_start, loadavg()
            overloads.append(result)
            print(f"[{shape}] overload ×{factor:g}: passes={result['passes']} {json.dumps(result['routes'])} "
                  f"client loop lag p99/max {result['client_lag_p99_ms']}/{result['client_lag_max_ms']} ms, "
                  f"client {result['client_cores']} cores", flush=True)
        stack.client.post(f"/v1/jobs/{running}/cancel")
        training = stack.job(running)
        return {"shape": shape, "pinned": pinned, "main": main, "search": steps, "overload": overloads,
                "highest_passing": None if best is None else {
                    "factor": best["factor"], "rates_per_s": {r: v["rate_per_s"] for r, v in best["routes"].items()}},
                "training_job": {"status_at_end": training["status"], "step": training["progress"]["step"]}}
    except BaseException:
        print(stack.log_tail())
        raise
    finally:
        stack.stop()
        psutil.Process().cpu_affinity(all_cores)


def fmt(value: Any) -> str:
    return "—" if value is None else f"{value:.0f}" if isinstance(value, float) and value >= 100 else str(value)


def report(results: dict[str, Any]) -> str:
    rates = results["rates_per_s"]
    lines = [
        f"Run {results['run_at']} with `python benchmarks/load.py{results['args']}`; results in "
        "`benchmarks/results/load.json`.",
        f"Machine: {results['machine']}. Load average (1 / 5 / 15 min) at start {results['loadavg_start']}, "
        f"at end {results['loadavg_end']}: the client, the API, the worker (with one training job running) "
        + ("and other work on the machine share its cores." if results["loadavg_start"][0] < 1.5 else
           "and, at this run, other jobs on the machine share its cores (the load average above 1.5 at start "
           "says so): read the numbers as an upper bound."),
        *([results["note"]] if results.get("note") else []),
        *(["The service's processes (API, worker) ran on every core but the last and the load generator on the last "
           "(`--pin`): sharing the service's cores, the generator was starved by the training worker and queued its "
           "own requests (at 2x the API held 0-30 requests in flight while the client's waited 11-30 s). "
           "PostgreSQL and Redis (cluster shape) were not moved."] if results.get("pinned") else []),
        "",
        f"Open loop, started right after the API process starts (cold: torch not imported, generator not "
        f"loaded): {rates['poll']:g} polls/s (`GET /v1/jobs/{{id}}` of the running job) + {rates['sample']:g} "
        f"`/sample` calls/s (n = {SAMPLE_N}, 2-D GPVI sampler, `.npy`) for {results['duration_s']:g} s; "
        "latency from each request's scheduled send time to its answer (p50 / p95 / p99 / max, ms). "
        f"Goal: p99 < {P99_GOAL_S * 1e3:.0f} ms and no errors. Lifecycle timers: "
        + ("the service's defaults (heartbeat 2 s, reaper pass 5 s, progress write 0.5 s)."
           if results.get("lifecycle", "production") == "production" else
           "the test suite's accelerated ones (heartbeat 0.5 s, reaper pass 0.5 s, progress write 0.2 s)."),
        "",
        "| shape | route | sent | errors | p50 | p95 | p99 | max | goal met |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for shape in results["shapes"]:
        for route, r in shape["main"]["routes"].items():
            errors = ", ".join(f"{k}: {v}" for k, v in r["errors"].items()) or "0"
            ok = not r["errors"] and r["p99_ms"] is not None and r["p99_ms"] < P99_GOAL_S * 1e3
            lines.append(f"| {shape['shape']} | {route} | {r['sent']} | {errors} | {fmt(r['p50_ms'])} | "
                         f"{fmt(r['p95_ms'])} | {fmt(r['p99_ms'])} | {fmt(r['max_ms'])} | {'yes' if ok else 'no'} |")
    lines += ["", f"p99 per {WINDOW_S:g}-second window of the main run (poll / sample, ms), to show when it is slow:", ""]
    for shape in results["shapes"]:
        cells = ", ".join(f"{w['from_s']:g} s: {fmt(w['poll'])} / {fmt(w['sample'])}"
                          for w in shape["main"].get("windows", []))
        lines.append(f"- {shape['shape']}: {cells}.")
    lines += ["", "Highest rate with p99 < 250 ms and no errors (the same mix scaled ×0.1 … ×3, "
              f"{results['step_seconds']:g} s a step, after the main run):", ""]
    for shape in results["shapes"]:
        best = shape["highest_passing"]
        tried = ", ".join(f"×{s['factor']:g}{'' if s['passes'] else ' (failed)'}" for s in shape["search"])
        found = ("none of the steps" if best is None else
                 f"×{best['factor']:g} = {best['rates_per_s']['poll']:g} polls/s + "
                 f"{best['rates_per_s']['sample']:g} samples/s")
        lines.append(f"- {shape['shape']}: {found} (steps: {tried}).")
    if any(shape.get("overload") for shape in results["shapes"]):
        lines += ["", f"Overload (issue 43): the same mix at a multiple of the main rates, "
                  f"{results.get('overload_seconds', 20):g} s each, after the search. Goal: every answer (accepted or "
                  f"refused) within {ANSWER_GOAL_S:g} s, p99 of the accepted ones < {P99_GOAL_S * 1e3:.0f} ms, every "
                  "refusal a 503 with Retry-After.", "",
                  "| shape | × | route | sent | accepted | 503 (without Retry-After) | other errors | accepted p99 "
                  "| slowest answer | client loop lag max | load avg before | goal met |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for shape in results["shapes"]:
            for run in shape.get("overload", []):
                for route, r in run["routes"].items():
                    other = ", ".join(f"{k}: {v}" for k, v in r["errors"].items() if k != "503") or "0"
                    lines.append(
                        f"| {shape['shape']} | {run['factor']:g} | {route} | {r['sent']} | {r['ok']} "
                        f"| {r['refused_503']} ({r['refused_without_retry_after']}) | {other} | {fmt(r['p99_ms'])} "
                        f"| {fmt(r['answer_max_ms'])} | {fmt(run.get('client_lag_max_ms'))} "
                        f"| {run['loadavg_before'][0]:.2f} "
                        f"| {'yes' if run['passes'] else 'no'} |")
    lines += ["", "What the client itself costs (psutil, CPU seconds of the load generator ÷ wall seconds) and "
              "what the API process used meanwhile:", ""]
    for shape in results["shapes"]:
        main = shape["main"]
        lines.append(f"- {shape['shape']}: client {main['client_cores']} cores, API {main['api_cpu_cores']} cores "
                     f"(of {os.cpu_count()}) during the main run.")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="embedded,cluster")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of the main open-loop run")
    parser.add_argument("--rates", default="200,25", help="polls/s,samples/s of the main run")
    parser.add_argument("--step-seconds", type=float, default=10.0, help="seconds of each search step")
    parser.add_argument("--lifecycle", choices=["production", "test"], default="production",
                        help="the service's lifecycle timers, or the test suite's accelerated ones (FAST_LIFECYCLE)")
    parser.add_argument("--overload", default="2,4", help="multiples of --rates for the overload runs ('' for none)")
    parser.add_argument("--overload-seconds", type=float, default=20.0)
    parser.add_argument("--api-env", action="append", default=[], metavar="PARVIS_NAME=VALUE",
                        help="a setting for the service's processes (repeatable; recorded with the results)")
    parser.add_argument("--client-processes", type=int, default=1,
                        help="processes the load generator sends from (each a share of every route's schedule)")
    parser.add_argument("--pin", action="store_true",
                        help="the service on every core but the last, the load generator on the last (pin_apart)")
    parser.add_argument("--quick", action="store_true", help="write neither results nor docs")
    parser.add_argument("--render", action="store_true", help="only rewrite the docs section from the results file")
    args = parser.parse_args()
    if args.render:
        replace_section(ROOT / "docs" / "benchmarks.md", SECTION, report(json.loads(RESULTS.read_text())))
        return
    overload = tuple(float(v) for v in args.overload.split(",") if v.strip())
    poll_rate, sample_rate = (float(v) for v in args.rates.split(","))
    rates = {"poll": poll_rate, "sample": sample_rate}
    api_env = dict(item.split("=", 1) for item in args.api_env)
    argv = "".join(f" {a}" for a in sys.argv[1:])
    results: dict[str, Any] = {
        "run_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "args": argv,
        "machine": f"{cpu_model()}, {os.cpu_count()} logical cores, Python {platform.python_version()}",
        "rates_per_s": rates, "duration_s": args.duration, "lifecycle": args.lifecycle,
        "client_processes": args.client_processes, "pinned": args.pin,
        "step_seconds": args.step_seconds, "overload_seconds": args.overload_seconds,
        "p99_goal_ms": P99_GOAL_S * 1e3, "loadavg_start": loadavg(), "api_env": api_env, "shapes": []}
    with tempfile.TemporaryDirectory(prefix="parvis-load-") as tmp:
        for shape in args.shapes.split(","):
            results["shapes"].append(run_shape(shape.strip(), Path(tmp), rates, args.duration, args.step_seconds,
                                                args.lifecycle, overload, args.overload_seconds, api_env,
                                                args.client_processes, args.pin))
    results["loadavg_end"] = loadavg()
    body = report(results)
    print(body)
    if not args.quick:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=2) + "\n")
        replace_section(ROOT / "docs" / "benchmarks.md", SECTION, body)


if __name__ == "__main__":
    main()
