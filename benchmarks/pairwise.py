"""Pairwise kernel benchmarks (docs/implementation-notes.md, "Pairwise kernels", benchmark protocol). Prints ratios measured side by side in one run
and writes them to docs/benchmarks.md.

    python benchmarks/pairwise.py            # CPU: chunked vs dense grid, n = 1e5 memory run, SVGD step vs peers
    python benchmarks/pairwise.py --quick    # smaller grid and fewer repeats (a smoke run)
    python benchmarks/pairwise.py --gpu      # the GPU grid (needs CUDA and triton)

CPU sections (`## Pairwise kernels (CPU)`):
1. `chunked` vs `dense` for svgd_direction over n × d; every cell runs in its own process with a memory cap and
   a time limit, so "out of memory" and "too slow" are recorded as results.
2. The real n = 100,000, d = 10 chunked svgd_direction: time and peak RSS growth.
3. One full SVGD step on Bayesian logistic regression (breast cancer, standardised + bias, d = 31, prior
   N(0, I), full batch, Adam): ours, a plain dense torch loop, Pyro's SVGD and NumPyro's SVGD, all with the
   same isotropic RBF and h = median of the full n×n squared-distance matrix / log n. A one-step SGD check
   shows the four compute the same update.

GPU section (`## Pairwise kernels (GPU)`): the benchmark grid — triton vs dense eager and chunked, roofline fraction
against measured peaks, peak-memory ratio, accuracy on 256 rows, median and solve, n = 1e6 where dense OOMs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _timing import cpu_model, fmt_ratio, fmt_seconds, load_average, replace_section  # noqa: E402

from inference_core.kernels import MedianRule, svgd_direction  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
CPU_TITLE = "Pairwise kernels (CPU)"
GPU_TITLE = "Pairwise kernels (GPU)"
GIB = 2**30


# ----------------------------------------------------------------------------------------------------------
# 1. chunked vs dense grid (one subprocess per cell)
# ----------------------------------------------------------------------------------------------------------

_CELL = r"""
import json, resource, sys, time, statistics
import torch
from inference_core.kernels import median_heuristic, svgd_direction
n, d, backend, max_seconds = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
g = torch.Generator().manual_seed(0)
x = torch.randn(n, d, generator=g)
s = torch.randn(n, d, generator=g)
h = median_heuristic(x, method="subsample")
svgd_direction(x[:64], s[:64], h, backend=backend)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    times = []
    start = time.perf_counter()
    while len(times) < 5 and (len(times) < 2 or time.perf_counter() - start < max_seconds):
        t = time.perf_counter()
        svgd_direction(x, s, h, backend=backend)
        times.append(time.perf_counter() - t)
except (RuntimeError, MemoryError) as exc:
    print(json.dumps({"error": "out of memory" if "memory" in str(exc).lower() else str(exc)[:200]}))
    sys.exit(0)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": statistics.median(times), "runs": len(times), "rss_growth": (peak - base) * 1024}))
"""


def run_cell(n: int, d: int, backend: str, *, timeout: float, mem_limit: int, max_seconds: float) -> dict:
    """Run one grid cell in a child process capped at `mem_limit` bytes of address space and `timeout` s."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mem_limit, mem_limit))

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CELL, str(n), str(d), backend, str(max_seconds)],
            env=env, capture_output=True, text=True, timeout=timeout, preexec_fn=cap,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"error": f"too slow (> {timeout:.0f} s)"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = proc.stderr.strip().splitlines()[-1:] if proc.stderr.strip() else ["no output"]
        if "memory" in " ".join(tail).lower() or proc.returncode in (-9, 137):
            return {"error": "out of memory"}
        return {"error": f"failed: {tail[0][:120]}"}
    return json.loads(lines[-1])


def grid(quick: bool) -> list[str]:
    ns = [1000, 5000] if quick else [1000, 5000, 20000]
    ds = [2, 32, 256]
    dense_timeout = 40.0 if quick else 120.0
    mem_limit = 8 * GIB
    rows = [
        "| n | d | chunked | dense | dense / chunked | chunked peak RSS growth | dense peak RSS growth |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in ns:
        for d in ds:
            c = run_cell(n, d, "chunked", timeout=600, mem_limit=mem_limit, max_seconds=5 if quick else 15)
            dn = run_cell(n, d, "dense", timeout=dense_timeout, mem_limit=mem_limit, max_seconds=10)
            ratio = dn["seconds"] / c["seconds"] if "seconds" in dn and "seconds" in c else None
            rows.append(
                f"| {n} | {d} | {_cell_time(c)} | {_cell_time(dn)} | {fmt_ratio(ratio)} "
                f"| {_cell_mem(c)} | {_cell_mem(dn)} |"
            )
            print(rows[-1], flush=True)
    return rows


def _cell_time(r: dict) -> str:
    return fmt_seconds(r["seconds"]) if "seconds" in r else r["error"]


def _cell_mem(r: dict) -> str:
    return f"{r['rss_growth'] / 2**20:.0f} MiB" if "rss_growth" in r else "—"


# ----------------------------------------------------------------------------------------------------------
# 2. the real n = 1e5 run
# ----------------------------------------------------------------------------------------------------------


def large_run() -> str:
    r = run_cell(100_000, 10, "chunked", timeout=1800, mem_limit=16 * GIB, max_seconds=0)
    if "seconds" not in r:
        return f"n = 100,000, d = 10, chunked svgd_direction: {r['error']}"
    dense_gib = 100_000**2 * 4 / GIB
    return (
        f"n = 100,000, d = 10, chunked svgd_direction (default 256 MiB budget, float32): "
        f"{fmt_seconds(r['seconds'])} per call (median of {r['runs']}), peak RSS growth "
        f"{r['rss_growth'] / 2**20:.0f} MiB (< 1 GiB required; one dense n×n float32 matrix is {dense_gib:.0f} GiB)."
    )


# ----------------------------------------------------------------------------------------------------------
# 3. One SVGD step on Bayesian logistic regression: ours, plain dense torch, Pyro, NumPyro
# ----------------------------------------------------------------------------------------------------------


def blr_data() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    a = (data.data - data.data.mean(0)) / data.data.std(0)
    a = np.concatenate([a, np.ones((a.shape[0], 1))], axis=1).astype(np.float32)
    return a, data.target.astype(np.float32)


def make_ours(a, y, init, lr, sgd=False):
    """Our step, as the svgd method class runs it: closed-form score, median rule, svgd_direction (auto),
    then the optimizer through the surrogate loss -(φ.detach() · x).sum()."""
    xd = torch.from_numpy(a)
    xt = xd.T.contiguous()
    yt = torch.from_numpy(y)
    x = torch.from_numpy(init.copy()).requires_grad_(True)
    opt = torch.optim.SGD([x], lr=lr) if sgd else torch.optim.Adam([x], lr=lr)
    rule = MedianRule(include_diagonal=True, divisor="log_n")

    def step() -> None:
        with torch.no_grad():
            w = x.detach()
            # ∇ log posterior = Xᵀ(y - σ(Xw)) - w/σ², σ = 1, for all particles at once.
            score = torch.addmm(w, yt - torch.sigmoid(w @ xt), xd, alpha=1.0, beta=-1.0)
            h = rule(w)
            phi = svgd_direction(w, score, h, backend="auto")
        opt.zero_grad(set_to_none=True)
        (-(phi * x).sum()).backward()
        opt.step()

    return step, x


def make_plain(a, y, init, lr, sgd=False):
    """The plain dense loop: cdist, exact torch.median over the full matrix, one matmul K·[S, X, 1]."""
    xd = torch.from_numpy(a)
    xt = xd.T.contiguous()
    yt = torch.from_numpy(y)
    x = torch.from_numpy(init.copy()).requires_grad_(True)
    n = init.shape[0]
    opt = torch.optim.SGD([x], lr=lr) if sgd else torch.optim.Adam([x], lr=lr)
    ones = torch.ones(n, 1)

    def step() -> None:
        with torch.no_grad():
            w = x.detach()
            score = (yt - torch.sigmoid(w @ xt)) @ xd - w
            dist = torch.cdist(w, w) ** 2
            h = dist.median() / math.log(n)
            k = torch.exp(-dist / h)
            prod = k @ torch.cat([score, w, ones], dim=1)
            d = w.shape[1]
            phi = (prod[:, :d] + (2.0 / h) * (w * prod[:, -1:] - prod[:, d:-1])) / n
        opt.zero_grad(set_to_none=True)
        (-(phi * x).sum()).backward()
        opt.step()

    return step, x


def make_pyro(a, y, init, lr, sgd=False):
    """pyro.infer.SVGD with an isotropic RBF kernel (Pyro's SteinKernel interface, N×N×D tensors) whose
    bandwidth is the same rule as ours; `multivariate` mode sums the per-dimension log-kernels."""
    import pyro
    import pyro.distributions as dist
    from pyro.infer import SVGD
    from pyro.infer.svgd import SteinKernel

    class IsotropicMedianRBF(SteinKernel):
        def log_kernel_and_grad(self, particles):
            delta = particles.unsqueeze(0) - particles.unsqueeze(1)
            norm_sq = delta.pow(2.0)
            h = norm_sq.sum(-1).median() / math.log(particles.shape[0])
            return -(norm_sq / h), 2.0 * delta / h

    xd = torch.from_numpy(a)
    yt = torch.from_numpy(y)
    n, d = init.shape

    def model(data, obs):
        w = pyro.sample("w", dist.Normal(torch.zeros(d), 1.0).to_event(1))
        logits = w @ data.T
        if logits.dim() == 3:
            logits = logits.squeeze(-2)
        with pyro.plate("data", data.shape[0], dim=-1):
            pyro.sample("obs", dist.Bernoulli(logits=logits), obs=obs)

    pyro.clear_param_store()
    optim = pyro.optim.SGD({"lr": lr}) if sgd else pyro.optim.Adam({"lr": lr})
    svgd = SVGD(model, IsotropicMedianRBF(), optim, num_particles=n, max_plate_nesting=1, mode="multivariate")
    svgd.step(xd, yt)  # sets up the guide's particle parameter, then overwrite it with our initial particles
    param = pyro.param("svgd_particles").unconstrained()
    with torch.no_grad():
        param.copy_(torch.from_numpy(init).reshape(param.shape))
    optim.optim_objs.clear()  # fresh optimizer state, as for the others

    def step() -> None:
        svgd.step(xd, yt)

    def particles():
        return pyro.param("svgd_particles").unconstrained().detach().reshape(n, d)

    return step, particles


def make_numpyro(a, y, init, lr, sgd=False):
    """numpyro.contrib.einstein.SVGD (RBFKernel: median of the full distance matrix, × 1/log n), jitted."""
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as nd
    from numpyro.contrib.einstein import SVGD, RBFKernel
    from numpyro.contrib.einstein.steinvi import SteinVIState

    n, d = init.shape

    def model(data, obs):
        w = numpyro.sample("w", nd.Normal(jnp.zeros(d), 1.0).to_event(1))
        with numpyro.plate("data", data.shape[0]):
            numpyro.sample("obs", nd.Bernoulli(logits=data @ w), obs=obs)

    optim = numpyro.optim.SGD(lr) if sgd else numpyro.optim.Adam(lr)
    svgd = SVGD(model, optim, RBFKernel(), num_stein_particles=n)
    xj, yj = jnp.asarray(a), jnp.asarray(y)
    state = svgd.init(jax.random.PRNGKey(0), xj, yj)
    params = {k: jnp.asarray(init) for k in svgd.optim.get_params(state.optim_state)}
    state = SteinVIState(svgd.optim.init(params), state.rng_key, state.loss_temperature, state.repulsion_temperature)
    update = jax.jit(svgd.update)
    box = {"state": state}
    t = time.perf_counter()
    jax.block_until_ready(update(state, xj, yj))
    compile_s = time.perf_counter() - t

    def step() -> None:
        box["state"], loss = update(box["state"], xj, yj)
        jax.block_until_ready(box["state"])

    def particles():
        return np.asarray(next(iter(svgd.optim.get_params(box["state"].optim_state).values())))

    return step, particles, compile_s


def equivalence_check(a, y) -> str:
    """One SGD step (lr = 1e-3) from the same particles: each library's displacement / lr is its direction φ."""
    n, lr = 100, 1e-3
    init = (0.1 * np.random.default_rng(1).standard_normal((n, a.shape[1]))).astype(np.float32)
    out = {}
    step, x = make_ours(a, y, init, lr, sgd=True)
    step()
    ref = (x.detach().numpy() - init) / lr
    step, x = make_plain(a, y, init, lr, sgd=True)
    step()
    out["plain"] = (x.detach().numpy() - init) / lr
    step, particles = make_pyro(a, y, init, lr, sgd=True)
    step()
    out["Pyro"] = (particles().numpy() - init) / lr
    step, particles, _ = make_numpyro(a, y, init, lr, sgd=True)
    step()
    out["NumPyro"] = (particles() - init) / lr
    scale = np.abs(ref).max()
    parts = [f"{k} {np.abs(v - ref).max() / scale:.1e}" for k, v in out.items()]
    return (
        "Same update check (n = 100, one SGD step, max |φ_lib − φ_ours| / max |φ_ours|, float32 step "
        "rounding included; torch.median takes the lower middle value where numpy averages): " + ", ".join(parts)
    )


def interleaved_seconds(steps: dict, *, rounds: int, batch_seconds: float, warmup: int = 3) -> dict:
    """Seconds per step of each library, timed in interleaved rounds (ours, plain, Pyro, NumPyro, ours, ...)
    so that all see the same background load; each round runs a batch of ≥ `batch_seconds` (at least one
    step) per library; the median over rounds is reported."""
    for fn in steps.values():
        for _ in range(warmup):
            fn()
    per_round: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(rounds):
        for name, fn in steps.items():
            count, start = 0, time.perf_counter()
            while True:
                fn()
                count += 1
                elapsed = time.perf_counter() - start
                if elapsed >= batch_seconds:
                    break
            per_round[name].append(elapsed / count)
    return {k: float(np.median(v)) for k, v in per_round.items()}


def blr_benchmark(quick: bool) -> list[str]:
    a, y = blr_data()
    lr = 0.01
    rows = [
        "| n | ours | plain dense torch | Pyro | NumPyro (jit) | ours / Pyro | ours / NumPyro | ours / plain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    targets = {100: {"numpyro": 2.0}, 1000: {"pyro": 60.0, "numpyro": 20.0}}  # issue #3's goals
    verdicts = []
    for n in (100, 1000):
        init = (0.1 * np.random.default_rng(0).standard_normal((n, a.shape[1]))).astype(np.float32)
        steps = {"ours": make_ours(a, y, init, lr)[0], "plain": make_plain(a, y, init, lr)[0],
                 "pyro": make_pyro(a, y, init, lr)[0]}  # fmt: skip
        steps["numpyro"], _, compile_s = make_numpyro(a, y, init, lr)
        times = interleaved_seconds(steps, rounds=5 if quick else 11, batch_seconds=0.2 if quick else 0.4)
        notes.append(f"NumPyro first call (trace + XLA compile) at n = {n}: {compile_s:.1f} s, excluded.")
        per_step = " | ".join(f"{1 / times[k]:.1f} steps/s" for k in ("ours", "plain", "pyro", "numpyro"))
        rows.append(
            f"| {n} | {per_step} | {fmt_ratio(times['pyro'] / times['ours'])} "
            f"| {fmt_ratio(times['numpyro'] / times['ours'])} | {fmt_ratio(times['plain'] / times['ours'])} |"
        )
        print(rows[-1], flush=True)
        for peer, goal in targets[n].items():
            got = times[peer] / times["ours"]
            name = {"pyro": "Pyro", "numpyro": "NumPyro"}[peer]
            verdicts.append(f"n = {n}: ours / {name} = {got:.1f}× (goal ≥ {goal:.0f}×: {'met' if got >= goal else 'NOT met'})")
    return rows + ["", "Goals: " + "; ".join(verdicts) + ".", "", *notes, "", equivalence_check(a, y)]


# ----------------------------------------------------------------------------------------------------------
# Machine description and the CPU report
# ----------------------------------------------------------------------------------------------------------


def versions() -> str:
    out = [f"torch {torch.__version__}"]
    for name in ("jax", "jaxlib", "pyro", "numpyro", "triton", "numpy", "sklearn"):
        try:
            module = __import__(name)
            out.append(f"{name} {module.__version__}")
        except Exception:  # noqa: BLE001 (optional peers)
            out.append(f"{name} not installed")
    return ", ".join(out)


THREADS_NOTE: list[str] = []


def cpu_report(quick: bool) -> str:
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    argv = " ".join(sys.argv[1:])
    header = [
        f"Run {started} with `python benchmarks/pairwise.py{' ' + argv if argv else ''}`.",
        f"Machine: {cpu_model()}, {os.cpu_count()} logical cores, torch threads {torch.get_num_threads()}"
        f"{' (JAX/XLA single-threaded too)' if os.environ.get('XLA_FLAGS', '').find('eigen=false') >= 0 else ''}; "
        f"{versions()}.",
        f"Load average at start: {load_average()} — the machine is shared, other processes may have been "
        "running; ratios are measured side by side in one run, absolute times are indicative only.",
        *THREADS_NOTE,
        "",
        "### chunked vs dense, svgd_direction, float32",
        "",
        "Each cell in its own process (8 GiB address-space cap). `dense` is the float64-capable reference "
        "(direct differences, n×m materialised); `chunked` is the default CPU backend (centred Gram form, "
        "cache-sized row blocks within a 256 MiB budget). Peak RSS growth is the rise of the child's peak "
        "resident memory during the timed calls over its peak after start-up (0 = stayed below it).",
        "",
    ]
    print("\n".join(header), flush=True)
    grid_rows = grid(quick)
    large = "Skipped in --quick." if quick else large_run()
    print(large, flush=True)
    blr = blr_benchmark(quick)
    body = header + grid_rows + [
        "",
        "### n = 100,000 (memory)",
        "",
        large,
        "",
        "### One full SVGD step, Bayesian logistic regression (d = 31), steps per second",
        "",
        "Full step = scores of the log posterior for all particles + bandwidth + direction + Adam update "
        "(lr 0.01). Same prior N(0, I), same isotropic RBF, same h = median of the n×n squared-distance matrix "
        "(diagonal included) / log n in all four. Ours: closed-form score (one batched matmul each way), "
        "`MedianRule(include_diagonal=True)`, `svgd_direction(backend=\"auto\")`, torch Adam through the "
        "surrogate loss. Plain: cdist, torch.median, one matmul. The four are timed in interleaved rounds (each "
        "round a ≥ 0.4 s batch of steps per library, so all share the same background load); the table gives "
        "the median over rounds, after warm-up.",
        "",
        *blr,
    ]
    return "\n".join(body)


# ----------------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller grid, fewer repeats")
    parser.add_argument("--gpu", action="store_true", help="run the GPU benchmark (benchmarks/pairwise_gpu.py)")
    parser.add_argument("--no-write", action="store_true", help=f"print only; do not update {DOC}")
    parser.add_argument(
        "--threads", type=int, default=None,
        help="CPU threads for torch, the grid's child processes and JAX/XLA (default: all cores). On a shared "
        "machine 1 avoids OpenMP barrier stalls when another process holds a core.",
    )  # fmt: skip
    args = parser.parse_args()
    if args.threads is not None:
        if args.threads < 1:
            raise SystemExit("--threads must be >= 1")
        torch.set_num_threads(args.threads)
        THREADS_NOTE.append(
            f"Threads pinned to {args.threads} for every library: on this shared 2-core box, whenever another "
            "process holds a core, two OpenMP threads stall at every barrier (measured: one n = 100 step took "
            "55 ms with 2 threads against 0.75 ms with 1)."
        )
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
        if args.threads == 1:  # before jax is imported (lazily, by the NumPyro setup)
            os.environ["XLA_FLAGS"] = (
                os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
            ).strip()
    if args.gpu:
        import pairwise_gpu

        pairwise_gpu.run(False, pairwise_gpu.DEFAULT_SECTIONS, float("inf"), pairwise_gpu.RESULTS)
        if not args.no_write:
            replace_section(DOC, GPU_TITLE, pairwise_gpu.render([json.loads(pairwise_gpu.RESULTS.read_text())]))
        return
    report = cpu_report(args.quick)
    print(report)
    if not args.no_write:
        replace_section(DOC, CPU_TITLE, report)


if __name__ == "__main__":
    main()
