"""Cost against NUTS, side by side (issue 41, item 3): NumPyro's NUTS and Parvis's `auto` on the robustness suite.

    python benchmarks/nuts_vs_auto.py [--problems a,b] [--seed 0] [--threads 2] [--x64] [--force]
                                      [--results PATH] [--report [--allow-partial]] [--no-run]

For each suite problem (benchmarks/robustness/problems.py), in one process on one machine, back to back:

NUTS (NumPyro 0.22, JAX, CPU). The problem's `expression` target becomes a JAX log-density by walking its parsed IR
(benchmarks/robustness/jax_target.py, checked against the torch target in tests/unit/benchmarks/test_jax_target.py);
`potential_fn` = −log p. NumPyro's defaults otherwise: target acceptance 0.8, diagonal mass matrix adapted in its
windowed schedule, tree depth ≤ 10; the problems' own `nuts` overrides (used for their reference runs) are not
applied. 4 chains × (1,000 warm-up + 1,000 kept transitions), one chain after another (NumPyro's
`chain_method="sequential"`, its choice on a CPU with one host device). This machine has 2 cores and `auto` uses
both through torch's threads, so parallel chains could at best halve NUTS's wall time: the NUTS seconds are 4
sequential chains.
- Start: the 4 chains start where Parvis's own `nuts` would (`methods.base.initial_particles` with the default
  init, i.e. N(0, I) rows from the seed's per-particle streams), given to NumPyro as the initial positions (a
  `potential_fn` kernel has no init strategy of its own).
- dtype: float32, NumPyro's (JAX's) default; a problem runs in float64 (`jax.enable_x64`) when its float32 gradient
  is off from the float64 torch target's by more than F32_GRAD_TOLERANCE (relative, at 3 points drawn from
  N(reference mean, reference sd²); recorded as `f32_grad_rel_error`), or everywhere with `--x64`. `auto` runs in
  its own default, float64, so float32 favours NUTS's times.
- The driver: each chain is NumPyro's kernel exactly as `MCMC` drives it (`NUTS.init` with the chain's key, then
  `NUTS.sample` once per transition, adaptation inside `sample` over the first 1,000; the chain keys split from
  the seed as `MCMC` splits them), its 2,000 transitions in one `lax.scan`, jitted as one function of (start, key).
  Not `MCMC.run` itself: with `progress_bar=False` NumPyro 0.22 (on JAX 0.10.2) re-traces and recompiles its
  transition loop (`jit(_fori_collect_loop)`, whose static argument is a fresh `jax.jit` object at every call) for
  every chain of a sequential run and again on every later `run` (measured with `jax_log_compiles`: 4 compilations
  per 4-chain run, the second run too), so its compile time cannot be told apart from its run time. On ar2 with
  100 + 100 transitions and the same keys and starts, this driver and `MCMC.run` took the same tree sizes at every
  transition and their draws differ by float32 rounding only (≤ 9e-5; `MCMC` runs `init` op by op, here it is
  compiled); tests/unit/benchmarks/test_jax_target.py checks that on a short run.
- Time, compile apart: compile = tracing + lowering + XLA compilation of the chain function, ahead of time
  (`jax.jit(chain).lower(start, key).compile()`, timed); run = the 4 calls of the compiled chain, one after another,
  each `block_until_ready`. The same executable serves all 4 chains (same shapes).
- Gradient evaluations: the sum over the 4 chains and all 2,000 transitions of NumPyro's `num_steps` (leapfrog
  steps, one gradient each). It leaves out the gradient at each start and the step-size searches NumPyro runs at
  the start and at the end of each adaptation window (a few gradients each), a slight undercount in NUTS's favour.
- Scored on all 4,000 kept draws against the suite's reference (`score_draws`: benchmarks/robustness/scoring.py's
  `score` in sampler coordinates; also `scoring.score_problem`'s model-space scores when that function exists),
  with split R-hat (numpyro.diagnostics.split_gelman_rubin, the largest over parameters), the smallest ESS
  (numpyro.diagnostics.effective_sample_size) and the divergent transitions after warm-up. NUTS *solved* a problem
  when its R-hat < 1.01 and both errors are within the suite's bars.

`auto` (Parvis, torch, in process): `inference_core.training.run` on {"method": "auto", "target":
problem.target_spec(), "seed": seed, **METHOD_SPECS["auto"]} (steps 3,000 as an upper bound: it stops when its
moments settle), timed around `run()` with `--threads` torch threads (default 2, the machine's cores). Before the
first problem an untimed 5-step `auto` job on a 2-d Gaussian pays torch's one-off first-call costs (nothing of
`auto`'s is compiled, so there is no compile time to separate). Gradient evaluations: the result's final metrics
`grad_evals` (every target evaluation, Pathfinder's included); scored the same way on its particles; its verdict is
the run's own `quality` block (`training.run` computes it in process, as the worker reports it).

Results are saved per problem at once to benchmarks/results/nuts_vs_auto.json (or `--results`) and a problem with a
saved result is skipped on the next run (unless --force). `--report` writes the section "NUTS (NumPyro) vs `auto`
(issue 41)" of docs/benchmarks.md from that file: per problem both sides and the ratios NUTS / auto of gradient
evaluations and wall time, then the median wall-time ratio and whether the issue's two goals hold, all computed from
the saved results (it refuses results that miss a suite problem unless --allow-partial). Goals: `auto` within the bars with fewer gradient evaluations than NUTS on every problem NUTS
solves; median over problems of NUTS's run time / `auto`'s time ≥ 2 (NUTS's compile time excluded, in its favour).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import load_results, save_results  # noqa: E402
from benchmarks._timing import machine_summary, replace_section  # noqa: E402
from benchmarks.robustness import scoring  # noqa: E402
from benchmarks.robustness.problems import Problem, problems, selected  # noqa: E402
from benchmarks.robustness.scoring import LOG_SD_BAR, MEAN_BAR, load_reference, score  # noqa: E402
from benchmarks.robustness.specs import METHOD_SPECS  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "nuts_vs_auto.json"
DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "NUTS (NumPyro) vs `auto` (issue 41)"
CHAINS, WARMUP, DRAWS = 4, 1000, 1000
RHAT_SOLVED = 1.01
WALL_RATIO_GOAL = 2.0
F32_GRAD_TOLERANCE = 1e-3  # relative error of the float32 gradient above which NUTS runs in float64


# --- scoring -----------------------------------------------------------------------------------------------


def score_draws(problem: Problem, draws: np.ndarray) -> dict[str, Any]:
    """The suite's scores of draws [n, d] (sampler coordinates), plus `model_space`: scoring.score_problem's
    scores where that function exists. Both sides are scored through this one function. A problem with no stored
    reference yet gets `pass` None (`no_reference`)."""
    try:
        reference = load_reference(problem.name)
    except FileNotFoundError:
        out: dict[str, Any] = {"pass": None, "no_reference": True}
    else:
        out = score(draws, reference["mean"], reference["sd"], problem.param_names, problem.scored)
    score_problem = getattr(scoring, "score_problem", None)
    if callable(score_problem):
        out["model_space"] = score_problem(problem, draws)
    return out


# --- NUTS ----------------------------------------------------------------------------------------------------


def start_points(problem: Problem, seed: int) -> np.ndarray:
    """[CHAINS, d] float64: where Parvis's `nuts` starts its chains (the default init: N(0, I) per-particle rows)."""
    import torch

    from inference_core.methods.base import initial_particles
    from inference_core.schemas.methods import InitOptions
    from inference_core.targets import BuildContext, build_target

    target = build_target(problem.target_spec(), BuildContext(dtype=torch.float64))
    return initial_particles(target, InitOptions(), CHAINS, seed).numpy()


def f32_grad_error(problem: Problem, seed: int, points: int = 3) -> float:
    """max over `points` draws from N(ref mean, ref sd²) of |∇ log p in float32 (JAX) − ∇ log p in float64 (torch)|
    / |∇ log p in float64| (Euclidean norms)."""
    import jax
    import jax.numpy as jnp
    import torch

    from benchmarks.robustness.jax_target import jax_log_density
    from inference_core.targets import BuildContext, build_target

    try:
        reference = load_reference(problem.name)
    except FileNotFoundError:  # no reference yet: around where the chains start
        reference = {"mean": [0.0] * problem.dim, "sd": [0.5] * problem.dim}
    target = build_target(problem.target_spec(), BuildContext(dtype=torch.float64))
    grad32 = jax.jit(jax.grad(jax_log_density(problem.target_spec(), dtype=jnp.float32)))
    rng = np.random.default_rng(seed)
    worst = 0.0
    for _ in range(points):
        x = np.asarray(reference["mean"]) + np.asarray(reference["sd"]) * rng.standard_normal(problem.dim)
        xt = torch.tensor(x[None], requires_grad=True)
        (g64,) = torch.autograd.grad(target.log_prob(xt).sum(), xt)
        g64 = g64[0].numpy()
        g32 = np.asarray(grad32(jnp.asarray(x, dtype=jnp.float32)), dtype=np.float64)
        worst = max(worst, float(np.linalg.norm(g32 - g64) / max(np.linalg.norm(g64), 1e-300)))
    return worst


def nuts_chain(potential: Any, warmup: int = WARMUP, draws: int = DRAWS) -> tuple[Any, Any]:
    """(the NUTS kernel, chain(z0, key) -> per transition z, num_steps, diverging, accept_prob): one chain of
    `warmup` + `draws` transitions of NumPyro's NUTS with its defaults, as MCMC runs it (`NUTS.init`, then
    `NUTS.sample` once per transition; adaptation happens inside `sample` during the first `warmup`), the
    transitions in one `lax.scan` so that the whole chain is one compiled call."""
    import jax
    from numpyro.infer import NUTS

    kernel = NUTS(potential_fn=potential)

    def chain(z0: Any, key: Any) -> tuple[Any, ...]:
        state = kernel.init(key, warmup, z0, (), {})

        def transition(state: Any, _: Any) -> tuple[Any, tuple[Any, ...]]:
            state = kernel.sample(state, (), {})
            return state, (state.z, state.num_steps, state.diverging, state.accept_prob)

        return jax.lax.scan(transition, state, None, length=warmup + draws)[1]

    return kernel, chain


def run_nuts(problem: Problem, seed: int, x64: bool) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    from numpyro.diagnostics import effective_sample_size, split_gelman_rubin

    from benchmarks.robustness.jax_target import jax_log_density

    with jax.enable_x64(x64):
        dtype = jnp.float64 if x64 else jnp.float32
        log_density = jax_log_density(problem.target_spec(), dtype=dtype)

        def potential(z: Any) -> Any:
            return -log_density(z)

        _, chain = nuts_chain(potential)
        starts = jnp.asarray(start_points(problem, seed), dtype=dtype)
        keys = jax.random.split(jax.random.PRNGKey(seed), CHAINS)  # as MCMC splits its key over the chains
        started = time.perf_counter()
        compiled = jax.jit(chain).lower(starts[0], keys[0]).compile()
        compile_s = time.perf_counter() - started
        started = time.perf_counter()
        traces = [jax.block_until_ready(compiled(starts[c], keys[c])) for c in range(CHAINS)]
        run_s = time.perf_counter() - started
    z, num_steps, diverging, accept = (np.stack([np.asarray(t[k]) for t in traces]) for k in range(4))
    draws = z[:, WARMUP:].astype(np.float64)  # [chains, draws, d]
    out: dict[str, Any] = {
        "status": "succeeded", "dtype": "float64" if x64 else "float32",
        "grad_evals": int(num_steps.sum()), "grad_evals_warmup": int(num_steps[:, :WARMUP].sum()),
        "grad_evals_sampling": int(num_steps[:, WARMUP:].sum()),
        "compile_s": round(compile_s, 3), "run_s": round(run_s, 3),
        "divergences": int(diverging[:, WARMUP:].sum()), "divergences_warmup": int(diverging[:, :WARMUP].sum()),
        "mean_accept_prob": float(accept[:, WARMUP:].mean()), "num_draws": int(draws.shape[0] * draws.shape[1]),
    }
    if np.isfinite(draws).all():
        out["max_rhat"] = float(np.max(split_gelman_rubin(draws)))
        out["min_ess"] = float(np.min(effective_sample_size(draws)))
    out.update(score_draws(problem, draws.reshape(-1, draws.shape[-1])))
    out["solved"] = None if out["pass"] is None else bool(out["pass"] and out.get("max_rhat", np.inf) < RHAT_SOLVED)
    return out


# --- auto ----------------------------------------------------------------------------------------------------


def warm_up_torch() -> None:
    """An untimed 5-step `auto` job on a 2-d Gaussian: torch's one-off first-call costs, paid before any timing."""
    from inference_core.training import run

    run({"method": "auto", "seed": 0, "steps": 5,
         "target": {"kind": "expression", "dim": 2, "log_prob": "sum(log_normal(x, 0, 1))"}})


def run_auto(problem: Problem, seed: int) -> dict[str, Any]:
    import torch

    from inference_core.training import run

    spec = {"method": "auto", "target": problem.target_spec(), "seed": seed, **METHOD_SPECS["auto"]}
    started = time.perf_counter()
    result = run(spec)
    wall = time.perf_counter() - started
    draws = result.particles.detach().to("cpu", torch.float64).numpy()
    out: dict[str, Any] = {
        "status": "succeeded", "wall_s": round(wall, 3), "loop_s": round(result.wall_time_s, 3),
        "grad_evals": int(result.final_metrics.get("grad_evals", result.evaluations_spent)),
        "steps": int(result.steps_completed), "num_draws": int(draws.shape[0]),
        "verdict": result.quality.get("verdict"), "stopped": result.stopped,
    }
    out.update(score_draws(problem, draws))
    return out


# --- the run -----------------------------------------------------------------------------------------------


def _failed(exc: Exception) -> dict[str, Any]:
    return {"status": "failed", "error": f"{type(exc).__name__}: {exc}"[:500]}


def run_problem(name: str, args: argparse.Namespace) -> dict[str, Any]:
    problem = problems()[name]
    cell: dict[str, Any] = {"seed": args.seed}
    try:
        f32_error = f32_grad_error(problem, args.seed)
    except Exception as exc:  # noqa: BLE001 -- the NUTS cell says what failed
        f32_error = None
        cell["nuts"] = _failed(exc)
    cell["f32_grad_rel_error"] = f32_error
    if "nuts" not in cell:
        x64 = args.x64 or f32_error is None or f32_error > F32_GRAD_TOLERANCE
        try:
            cell["nuts"] = run_nuts(problem, args.seed, x64)
        except Exception as exc:  # noqa: BLE001 -- a failed run is a result
            cell["nuts"] = _failed(exc)
    try:
        cell["auto"] = run_auto(problem, args.seed)
    except Exception as exc:  # noqa: BLE001
        cell["auto"] = _failed(exc)
    return cell


def run(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    results = load_results(args.results)
    warm_up_torch()
    for name in args.problems:
        done = results["runs"].get(name)
        if done is not None and not args.force:
            print(f"{name}: done before, skipped", flush=True)
            continue
        cell = run_problem(name, args)
        cell["run_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        cell["machine"] = machine_summary(with_load=True)
        results["runs"][name] = cell
        save_results(args.results, results)
        print(f"{name}: NUTS {_side_text(cell['nuts'])}; auto {_side_text(cell['auto'])}", flush=True)


# --- the report ----------------------------------------------------------------------------------------------


def _errors(side: dict[str, Any]) -> str:
    if side.get("nonfinite"):
        return "non-finite draws"
    if side.get("no_reference"):
        return "no reference"
    text = f"{side['mean_error']:.2f} / {side['log_sd_error']:.2f}"
    model = side.get("model_space")
    if isinstance(model, dict) and "mean_error" in model:
        text += f" (model space {model['mean_error']:.2f} / {model['log_sd_error']:.2f})"
    return text


def _mark(ok: bool | None) -> str:
    return "?" if ok is None else "✓" if ok else "✗"


def _side_text(side: dict[str, Any]) -> str:
    if side.get("status") != "succeeded":
        return f"✗ {side.get('status')}: {side.get('error', '')}"
    return (f"{_mark(side['pass'])} {_errors(side)}, {side['grad_evals']:,} grads, "
            + (f"compile {side['compile_s']:.1f} s + run {side['run_s']:.1f} s, R-hat {side.get('max_rhat', float('nan')):.3f}"
               if "run_s" in side else f"{side['wall_s']:.1f} s, says {side.get('verdict')}"))


def ratios(cell: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
    """NUTS / auto: gradient evaluations, run time (compile excluded), run + compile time; None where a side failed."""
    nuts, auto = cell.get("nuts", {}), cell.get("auto", {})
    if nuts.get("status") != "succeeded" or auto.get("status") != "succeeded":
        return None, None, None
    return (nuts["grad_evals"] / auto["grad_evals"], nuts["run_s"] / auto["wall_s"],
            (nuts["run_s"] + nuts["compile_s"]) / auto["wall_s"])


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}×" if value >= 10 else f"{value:.2f}×"


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """The issue's two goals, from the saved cells."""
    runs = results["runs"]
    wall = {name: ratios(cell)[1] for name, cell in runs.items()}
    wall = {name: value for name, value in wall.items() if value is not None}
    with_compile = [ratios(cell)[2] for cell in runs.values() if ratios(cell)[2] is not None]
    solved = [name for name, cell in runs.items() if cell.get("nuts", {}).get("solved")]
    misses = []
    for name in solved:
        auto = runs[name].get("auto", {})
        if auto.get("status") != "succeeded" or not auto["pass"]:
            misses.append(f"{name} (`auto` outside the bars)" if auto.get("status") == "succeeded"
                          else f"{name} (`auto` {auto.get('status')})")
        elif auto["grad_evals"] >= runs[name]["nuts"]["grad_evals"]:
            misses.append(f"{name} (`auto` {auto['grad_evals']:,} ≥ NUTS {runs[name]['nuts']['grad_evals']:,} grads)")
    median = statistics.median(wall.values()) if wall else None
    return {"wall_ratios": wall, "median_wall_ratio": median,
            "median_wall_ratio_with_compile": statistics.median(with_compile) if with_compile else None,
            "solved": solved, "goal1_misses": misses, "goal1": bool(solved) and not misses,
            "goal2": median is not None and median >= WALL_RATIO_GOAL,
            "goal2_with_compile": bool(with_compile) and statistics.median(with_compile) >= WALL_RATIO_GOAL}


def report(results: dict[str, Any]) -> str:
    runs = results["runs"]
    suite = list(problems())
    order = [name for name in suite if name in runs] + [name for name in runs if name not in suite]
    machines = sorted({cell.get("machine", "unknown").split("; load average")[0] for cell in runs.values()})
    days = sorted({cell.get("run_at", "")[:10] for cell in runs.values() if cell.get("run_at")})
    lines = [
        "Run with `python benchmarks/nuts_vs_auto.py` (results in `benchmarks/results/nuts_vs_auto.json`; what is "
        "measured and how, in its docstring). Per problem, in one process and back to back: NumPyro's NUTS "
        f"({CHAINS} chains run one after another, {WARMUP:,} warm-up + {DRAWS:,} kept transitions each, its defaults, "
        "started where Parvis's `nuts` starts, on the problem's expression compiled to JAX; NumPyro's kernel with each "
        "chain compiled as one call, since `MCMC.run` recompiles its loop for every chain) and Parvis's `auto` "
        "(steps 3,000 as an upper bound, in process). NUTS's grads: leapfrog steps over warm-up and sampling, all "
        "chains; its compile s: tracing and XLA compilation of the chain, ahead of time; its run s: the 4 compiled "
        "chains; scored on its 4,000 draws, *solved* when R-hat < 1.01 and within the bars. `auto`'s: `grad_evals` of "
        "the job, the time around `training.run`, scored on its particles, with the verdict of its own `quality` "
        "block. Errors: worst |Δmean|/sd_ref / worst |log(sd/sd_ref)|, bars "
        f"{MEAN_BAR} and {LOG_SD_BAR} (benchmarks/robustness/scoring.py; sampler coordinates; `?`: no reference "
        "stored yet). Ratios are NUTS / `auto`; the wall-time ratio leaves NUTS's compile time out.",
        "",
        f"Machine: {'; '.join(machines)}" + (f" ({days[0]}{'…' + days[-1] if days[-1] != days[0] else ''})" if days else "")
        + ". NUTS in float32 (JAX's default) unless marked float64; `auto` in float64, its default.",
        "",
        "| problem | d | NUTS grads | compile s | run s | NUTS errors | R-hat | div. | solved? | `auto` grads | `auto` s "
        "| `auto` errors | pass? | grads NUTS/auto | wall NUTS/auto |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in order:
        cell, problem = runs[name], problems().get(name)
        nuts, auto = cell.get("nuts", {}), cell.get("auto", {})
        dim = problem.dim if problem else "?"
        if nuts.get("status") == "succeeded":
            mark = "" if nuts["dtype"] == "float32" else f" ({nuts['dtype']})"
            nuts_cols = [f"{nuts['grad_evals']:,}{mark}", f"{nuts['compile_s']:.1f}", f"{nuts['run_s']:.1f}",
                         _errors(nuts), f"{nuts['max_rhat']:.3f}" if "max_rhat" in nuts else "—",
                         str(nuts["divergences"]), _mark(nuts["solved"])]
        else:
            nuts_cols = [f"✗ {nuts.get('status')}", "—", "—", "—", "—", "—", "✗"]
        if auto.get("status") == "succeeded":
            verdict = f" *{auto['verdict']}*" if auto.get("verdict") else ""
            auto_cols = [f"{auto['grad_evals']:,}", f"{auto['wall_s']:.1f}", _errors(auto),
                         _mark(auto["pass"]) + verdict]
        else:
            auto_cols = [f"✗ {auto.get('status')}", "—", "—", "✗"]
        grads, wall, _ = ratios(cell)
        lines.append(f"| {name} | {dim} | " + " | ".join(nuts_cols + auto_cols + [_ratio(grads), _ratio(wall)]) + " |")
    facts = summary(results)
    missing = [name for name in suite if name not in runs]
    lines += [""]
    if missing:
        lines += [f"**Partial run**: {len(runs)} of {len(suite)} suite problems ({', '.join(missing)} not run); the "
                  "goals below are over the problems run.", ""]
    median = facts["median_wall_ratio"]
    lines += [
        f"Median wall-time ratio NUTS / `auto` over the {len(facts['wall_ratios'])} problems both finished: "
        + ("—" if median is None else f"{median:.2f}× (with NUTS's compile time: "
           f"{facts['median_wall_ratio_with_compile']:.2f}×)") + ".",
        "",
        f"Goal 1, `auto` within the bars with fewer gradient evaluations than NUTS on every problem NUTS solves "
        f"({len(facts['solved'])}: {', '.join(facts['solved']) or 'none'}): "
        + ("**holds**." if facts["goal1"] else "**does not hold**" + (f": {'; '.join(facts['goal1_misses'])}."
                                                                         if facts["goal1_misses"] else " (NUTS solved none)."))
        + f" Goal 2, median wall-time ratio NUTS / `auto` ≥ {WALL_RATIO_GOAL:g} on the CPU (NUTS's run time): "
        + ("**holds**" if facts["goal2"] else "**does not hold**")
        + "; counting NUTS's compile time too it "
        + ("would hold." if facts["goal2_with_compile"] else "would not hold either." if not facts["goal2"]
           else "would not hold."),
    ]
    promoted = [name for name in order if runs[name].get("nuts", {}).get("dtype") == "float64"]
    if promoted:
        lines += ["", f"NUTS in float64 on {', '.join(promoted)} (float32 gradient off by more than "
                  f"{F32_GRAD_TOLERANCE:g}, relative, or `--x64`)."]
    failed = [f"{name} {side}: {runs[name][side].get('error')}" for name in order for side in ("nuts", "auto")
              if runs[name].get(side, {}).get("status") == "failed"]
    if failed:
        lines += ["", "Failures: " + "; ".join(failed) + "."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", default=",".join(problems()))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch threads for `auto` (the machine's cores)")
    parser.add_argument("--x64", action="store_true", help="NUTS in float64 on every problem")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--force", action="store_true", help="rerun problems that have results")
    parser.add_argument("--report", action="store_true", help="write the section of docs/benchmarks.md")
    parser.add_argument("--no-run", action="store_true", help="only the report, from the saved results")
    parser.add_argument("--allow-partial", action="store_true",
                        help="let --report write the doc section from results missing some suite problems")
    args = parser.parse_args()
    args.problems = selected(args.problems)
    if not args.no_run:
        run(args)
    results = load_results(args.results)
    body = report(results)
    print(body)
    if args.report:
        missing = [name for name in problems() if name not in results["runs"]]
        if missing and not args.allow_partial:
            raise SystemExit(f"not writing {DOC.name}: no results for {missing} (a partial run; --allow-partial)")
        replace_section(DOC, SECTION, body)


if __name__ == "__main__":
    main()
