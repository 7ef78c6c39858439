"""Reference posteriors for the robustness suite (issue 14): `references/<name>.json` per problem.

    python -m benchmarks.robustness.make_references [--only NAME ...] [--force]

Closed-form problems store their exact marginal means and sds. The others run the project's own `nuts` method
(Pyro's NUTS, inference_core.methods.baselines.mcmc) through `inference_core.training.run` in float64, 4 chains,
and keep a reference only if every parameter has split R-hat < 1.01 (Gelman et al. BDA3 eq. 11.4, Pyro's
`split_gelman_rubin`) and bulk ESS > 400 (Vehtari et al. 2021 §4.3); otherwise the run is repeated once with
twice the warm-up and draws, and if it still fails nothing is stored (the failure is printed and the script
exits non-zero). MCSE of the mean = sd / sqrt(ESS) with Pyro's ESS of the raw draws (Geyer's initial monotone
sequence). The log density is checked finite (float64) at every stored draw.

A problem with `reference_from` reuses another's draws: eight_schools_centered maps the non-centred draws
(μ, log τ, η) to θ_j = μ + τ η_j (the same posterior, so this avoids the centred funnel's biased NUTS run);
mixture_naive is the same density as mixture.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.robustness.problems import Problem, get, problems  # noqa: E402
from inference_core.methods.baselines.mcmc import bulk_ess  # noqa: E402
from inference_core.targets import BuildContext, build_target  # noqa: E402
from inference_core.training import RunHooks  # noqa: E402

REF_DIR = Path(__file__).resolve().parent / "references"
RHAT_MAX, ESS_MIN = 1.01, 400.0
DEFAULTS = {"chains": 4, "warmup_steps": 1000, "draws": 2000}
# Start the chains near the mode where N(0, 1) starts are far off (the reference's business only): the
# diabetes chains at the least-squares fit (intercept, 10 slopes) and log of its residual sd.
INIT_LOC = {"diabetes_regression": [-334.6, -0.04, -22.9, 5.6, 1.1, -1.1, 0.75, 0.37, 6.5, 68.5, 0.28, 3.98]}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def summarise(draws: np.ndarray) -> dict[str, list[float]]:
    """Per-parameter mean, sd, MCSE of the mean, split R-hat, bulk ESS, ESS of draws [C, m, d]."""
    from pyro.ops.stats import effective_sample_size, split_gelman_rubin

    t = torch.as_tensor(draws, dtype=torch.float64)
    flat = draws.reshape(-1, draws.shape[-1])
    ess = effective_sample_size(t, chain_dim=0, sample_dim=1).numpy()
    sd = flat.std(0, ddof=1)
    return {
        "mean": flat.mean(0).tolist(), "sd": sd.tolist(), "mcse_mean": (sd / np.sqrt(ess)).tolist(),
        "rhat": split_gelman_rubin(t, chain_dim=0, sample_dim=1).numpy().tolist(),
        "ess_bulk": bulk_ess(t).numpy().tolist(), "ess": ess.tolist(),
    }


class _Progress(RunHooks):
    """Logs every 500 transitions."""

    def __init__(self, name: str):
        self.name = name

    def on_step(self, step: int, total_steps: int, metrics: dict[str, float]) -> None:
        if step % 500 == 0:
            log(f"{self.name}: transition {step}/{total_steps}, step size {metrics['step_size']:.3g}, "
                f"{metrics['potential_evals']:.0f} gradients/transition/chain")


def run_nuts(problem: Problem, chains: int, warmup: int, draws: int, seed: int) -> tuple[np.ndarray, dict[str, Any]]:
    from inference_core.training import run

    # max_draws_per_chain > draws: the store thins by 2 when it fills up (mcmc.MCMC._store)
    options: dict[str, Any] = {"chains": chains, "warmup_steps": warmup, "max_draws_per_chain": draws + 1,
                               "diagnostics_every": 10**6, "dtype": "float64", **problem.nuts}
    if problem.name in INIT_LOC:
        options["init"] = {"method": "normal", "loc": INIT_LOC[problem.name], "scale": 1.0}
    spec = {"method": "nuts", "target": problem.target_spec(), "num_particles": chains, "steps": warmup + draws,
            "seed": seed, "options": options}
    started = time.perf_counter()
    result = run(spec, hooks=_Progress(problem.name))
    wall = time.perf_counter() - started
    method = result.method
    stored = method.stored_draws().numpy()
    divergences = sum(len(k._divergences) for k in method.kernels)
    settings = {"method": "nuts", "seed": seed, "steps": warmup + draws, "options": options}
    return stored, {"grad_evals": int(method.potential.calls), "wall_time_s": round(wall, 2),
                    "divergences": int(divergences), "settings": settings}


def check_finite(problem: Problem, draws: np.ndarray) -> bool:
    target = build_target(problem.target_spec(), BuildContext(dtype=torch.float64))
    with torch.no_grad():
        values = target.log_prob(torch.as_tensor(draws.reshape(-1, problem.dim), dtype=torch.float64))
    return bool(torch.isfinite(values).all())


def derived_draws(problem: Problem, draws: np.ndarray) -> np.ndarray:
    if problem.name == "eight_schools_centered":
        out = draws.copy()
        out[..., 2:] = draws[..., :1] + np.exp(draws[..., 1:2]) * draws[..., 2:]
        return out
    return draws


def passes(summary: dict[str, list[float]]) -> tuple[bool, float, float]:
    rhat, ess = max(summary["rhat"]), min(summary["ess_bulk"])
    return rhat < RHAT_MAX and ess > ESS_MIN, rhat, ess


def make(problem: Problem, cache: dict[str, tuple[np.ndarray, dict[str, Any]]]) -> dict[str, Any] | None:
    base = {"name": problem.name, "dim": problem.dim, "param_names": problem.param_names,
            "created": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if problem.closed_form is not None:
        return {**base, "kind": "closed_form", "mean": problem.closed_form["mean"], "sd": problem.closed_form["sd"]}
    source = get(problem.reference_from) if problem.reference_from else problem
    if source.name not in cache:
        c = DEFAULTS
        for attempt, scale in enumerate((1, 2)):
            log(f"{source.name}: NUTS {c['chains']} chains x ({c['warmup_steps'] * scale} warm-up + "
                f"{c['draws'] * scale} draws), attempt {attempt + 1}")
            draws, info = run_nuts(source, c["chains"], c["warmup_steps"] * scale, c["draws"] * scale, seed=attempt)
            ok, rhat, ess = passes(summarise(draws))
            log(f"{source.name}: max R-hat {rhat:.4f}, min bulk ESS {ess:.0f}, {info['grad_evals']} gradients, "
                f"{info['wall_time_s']:.0f} s, {info['divergences']} divergences -> {'ok' if ok else 'REJECTED'}")
            if ok:
                cache[source.name] = (draws, info)
                break
        else:
            return None
    draws, info = cache[source.name]
    draws = derived_draws(problem, draws)
    summary = summarise(draws)
    ok, rhat, ess = passes(summary)
    finite = check_finite(problem, draws)
    if not ok or not finite:
        log(f"{problem.name}: REJECTED (R-hat {rhat:.4f}, bulk ESS {ess:.0f}, finite {finite})")
        return None
    note = None
    if problem.reference_from:
        note = (f"draws of {source.name}'s NUTS run" +
                (", mapped to theta_j = mu + exp(log_tau) eta_j" if problem.name == "eight_schools_centered" else ""))
    return {**base, "kind": "nuts", "source": note, **summary, **info, "draws_per_chain": int(draws.shape[1]),
            "chains": int(draws.shape[0]), "finite_at_draws": finite,
            "max_rhat": rhat, "min_ess_bulk": ess}


def main() -> None:
    torch.set_num_threads(1)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--force", action="store_true", help="recompute references that exist")
    args = parser.parse_args()
    REF_DIR.mkdir(exist_ok=True)
    cache: dict[str, tuple[np.ndarray, dict[str, Any]]] = {}
    failed = []
    for name, problem in problems().items():
        if args.only and name not in args.only:
            continue
        path = REF_DIR / f"{name}.json"
        if path.exists() and not args.force:
            log(f"{name}: exists, skipped")
            continue
        reference = make(problem, cache)
        if reference is None:
            failed.append(name)
            continue
        path.write_text(json.dumps(reference, indent=1) + "\n")
        log(f"{name}: wrote {path.relative_to(ROOT)}")
    if failed:
        log(f"no reference stored for: {', '.join(failed)}")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
