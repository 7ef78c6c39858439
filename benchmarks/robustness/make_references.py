"""Reference posteriors for the robustness suite (issue 14): `references/<name>.json` per problem.

    python -m benchmarks.robustness.make_references [--only NAME ...] [--force]
    python -m benchmarks.robustness.make_references --numpyro-check NAME ...   # the independent check below

Closed-form problems store their exact marginal means and sds. The others run the project's own `nuts` method
(Pyro's NUTS, inference_core.methods.baselines.mcmc) through `inference_core.training.run` in float64, 4 chains,
and keep a reference only if every parameter has split R-hat < 1.01 (Gelman et al. BDA3 eq. 11.4, Pyro's
`split_gelman_rubin`) and bulk ESS > 400 (Vehtari et al. 2021 §4.3); otherwise the run is repeated once with
twice the warm-up and draws, and if it still fails nothing is stored (the failure is printed and the script
exits non-zero). MCSE of the mean = sd / sqrt(ESS) with Pyro's ESS of the raw draws (Geyer's initial monotone
sequence). The log density is checked finite (float64) at every stored draw. The problems added for issue 41
(RULES below) need bulk ESS ≥ 2,000 for every parameter, in both spaces, and run longer.

Two spaces (issue 41): the top-level mean/sd/... are in the sampler's coordinates (what the expression's x is);
the `model` block holds the same summaries of the model's own parameters (`Problem.constrain` of every draw,
named `model.names`), and R-hat < 1.01 is required there too. Closed-form problems store exact model-space
moments (`Problem.model_exact`). Every NUTS reference also stores its draws in the sampler's coordinates,
`references/<name>.draws.npz` (key "draws", float32 [chains, m, dim], chain axis kept; thinned evenly by
`draws_file.thin` only where the file would pass ~2 MB), from which the model block can be recomputed.

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
#: per-problem rules: the bulk-ESS bar (applied in both spaces where `ess_min_model` is set) and run lengths
RULES: dict[str, dict[str, Any]] = {
    # pilots (4 chains x 500 + 500): bulk ESS per draw ~0.27 (log sigma), ~0.09 (phi), ~0.65 (full mass, log psi)
    "seeds_random_effects": {"ess_min": 2000.0, "ess_min_model": 2000.0, "draws": 4000},
    "stochastic_volatility": {"ess_min": 2000.0, "ess_min_model": 2000.0, "warmup_steps": 1500, "draws": 8000},
    "negbin_salmonella": {"ess_min": 2000.0, "ess_min_model": 2000.0},
}
DRAWS_MAX_BYTES = 2_000_000  # the stored float32 draws of one reference, before compression
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


def rule(name: str) -> dict[str, Any]:
    return {**DEFAULTS, "ess_min": ESS_MIN, "ess_min_model": None, **RULES.get(name, {})}


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


def passes(summary: dict[str, list[float]], ess_min: float | None = ESS_MIN) -> tuple[bool, float, float]:
    """R-hat < RHAT_MAX for every parameter, and bulk ESS > ess_min (not checked when None)."""
    rhat, ess = max(summary["rhat"]), min(summary["ess_bulk"])
    return rhat < RHAT_MAX and (ess_min is None or ess >= ess_min), rhat, ess


def check_both(problem: Problem, draws: np.ndarray) -> tuple[bool, dict[str, Any], dict[str, Any], str]:
    """The summaries of draws [C, m, dim] in the sampler's and the model's coordinates, whether both pass the
    problem's rule, and a line saying so."""
    r = rule(problem.reference_from or problem.name)
    sampler, model = summarise(draws), summarise(problem.constrain(draws))
    ok_s, rhat_s, ess_s = passes(sampler, r["ess_min"])
    ok_m, rhat_m, ess_m = passes(model, r["ess_min_model"])
    line = (f"max R-hat {rhat_s:.4f} / {rhat_m:.4f} (model), min bulk ESS {ess_s:.0f} / {ess_m:.0f} (model); "
            f"needs R-hat < {RHAT_MAX}, ESS >= {r['ess_min']:.0f}"
            + (f" / {r['ess_min_model']:.0f}" if r["ess_min_model"] else ""))
    return ok_s and ok_m, sampler, model, line


def store_draws(problem: Problem, draws: np.ndarray) -> dict[str, Any]:
    """Write the draws [C, m, dim] as float32 to references/<name>.draws.npz, thinned evenly (every `thin`-th
    draw of each chain) only where they would pass DRAWS_MAX_BYTES; returns the JSON's `draws_file` entry."""
    chains, m, dim = draws.shape
    thin = max(1, -(-chains * m * dim * 4 // DRAWS_MAX_BYTES))
    kept = np.ascontiguousarray(draws[:, ::thin], dtype=np.float32)
    path = REF_DIR / f"{problem.name}.draws.npz"
    np.savez_compressed(path, draws=kept)
    return {"path": path.name, "key": "draws", "dtype": "float32", "shape": list(kept.shape), "thin": int(thin),
            "space": "sampler", "names": problem.param_names}


def model_block(problem: Problem, summary: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """The JSON's `model` block: names and exact moments (closed form) or the constrained draws' summaries."""
    block: dict[str, Any] = {"names": problem.model_names}
    if summary is None:
        exact = problem.model_exact
        if exact is None:
            raise ValueError(f"{problem.name}: closed form in the sampler's coordinates only; give model_closed_form")
        return {**block, "kind": "closed_form", "mean": exact["mean"], "sd": exact["sd"]}
    return {**block, "kind": "nuts", **summary, "max_rhat": max(summary["rhat"]),
            "min_ess_bulk": min(summary["ess_bulk"])}


def make(problem: Problem, cache: dict[str, tuple[np.ndarray, dict[str, Any]]]) -> dict[str, Any] | None:
    base = {"name": problem.name, "dim": problem.dim, "param_names": problem.param_names,
            "created": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if problem.closed_form is not None:
        return {**base, "kind": "closed_form", "mean": problem.closed_form["mean"], "sd": problem.closed_form["sd"],
                "model": model_block(problem)}
    source = get(problem.reference_from) if problem.reference_from else problem
    if source.name not in cache:
        c = rule(source.name)
        for attempt, scale in enumerate((1, 2)):
            log(f"{source.name}: NUTS {c['chains']} chains x ({c['warmup_steps'] * scale} warm-up + "
                f"{c['draws'] * scale} draws), attempt {attempt + 1}")
            draws, info = run_nuts(source, c["chains"], c["warmup_steps"] * scale, c["draws"] * scale, seed=attempt)
            ok, _, _, line = check_both(source, draws)
            log(f"{source.name}: {line}; {info['grad_evals']} gradients, {info['wall_time_s']:.0f} s, "
                f"{info['divergences']} divergences -> {'ok' if ok else 'REJECTED'}")
            if ok:
                cache[source.name] = (draws, info)
                break
        else:
            return None
    draws, info = cache[source.name]
    draws = derived_draws(problem, draws)
    ok, summary, model, line = check_both(problem, draws)
    finite = check_finite(problem, draws)
    if not ok or not finite:
        log(f"{problem.name}: REJECTED ({line}, finite {finite})")
        return None
    note = None
    if problem.reference_from:
        note = (f"draws of {source.name}'s NUTS run" +
                (", mapped to theta_j = mu + exp(log_tau) eta_j" if problem.name == "eight_schools_centered" else ""))
    r = rule(source.name)
    return {**base, "kind": "nuts", "source": note, **summary, **info, "draws_per_chain": int(draws.shape[1]),
            "chains": int(draws.shape[0]), "finite_at_draws": finite,
            "max_rhat": max(summary["rhat"]), "min_ess_bulk": min(summary["ess_bulk"]),
            "rule": {"rhat_max": RHAT_MAX, "ess_bulk_min": r["ess_min"], "ess_bulk_min_model": r["ess_min_model"]},
            "draws_file": store_draws(problem, draws), "model": model_block(problem, model)}


# ---- an independent check of the issue-41 references: NumPyro's NUTS on the models written in NumPyro ---------
#
# Each model is written again in NumPyro's own distributions, in the model's own parameters, and in another
# parameterisation where there is a choice (the SV latent path fully non-centred through a scan over i.i.d.
# innovations, as in the Stan User's Guide, rather than Kastner & Frühwirth-Schnatter's AR(1) h~), so neither the
# expression compiler, the Jacobians written in problems.py nor Pyro's sampler is shared with the reference. The
# summaries of its draws in the model's parameters go to references/<name>.numpyro.json; the suite's tests compare
# them with the reference's `model` block.

NUMPYRO_CHECK = {"chains": 4, "warmup": 2000, "draws": 10000, "seed": 41}


def _numpyro_model(name: str) -> tuple[Any, Any]:
    """(model, draws → model-space array [..., k]) for a problem added for issue 41."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from jax import lax
    from numpyro.infer.reparam import LocScaleReparam

    from benchmarks.robustness import problems as suite

    if name == "seeds_random_effects":
        r, n = jnp.asarray(suite.SEEDS_R), jnp.asarray(suite.SEEDS_N)
        x1, x2 = jnp.asarray(suite.SEEDS_X1, dtype=float), jnp.asarray(suite.SEEDS_X2, dtype=float)

        def model() -> None:
            alpha = numpyro.sample("alpha", dist.Normal(0.0, 1.0).expand([4]))
            sigma = numpyro.sample("sigma", dist.HalfCauchy(1.0))
            with numpyro.handlers.reparam(config={"b": LocScaleReparam(0)}):
                b = numpyro.sample("b", dist.Normal(0.0, sigma).expand([21]))
            eta = alpha[0] + alpha[1] * x1 + alpha[2] * x2 + alpha[3] * x1 * x2 + b
            numpyro.sample("r", dist.Binomial(n, logits=eta), obs=r)

        return model, lambda d: np.column_stack([d["alpha"], d["sigma"], d["b"]])
    if name == "stochastic_volatility":
        y, pr = jnp.asarray(suite.sv_returns()), suite.SV_PRIOR

        def model() -> None:
            mu = numpyro.sample("mu", dist.Normal(0.0, pr["mu_sd"]))
            phi = 2 * numpyro.sample("u", dist.Beta(pr["a_phi"], pr["b_phi"])) - 1
            numpyro.deterministic("phi", phi)
            sigma = numpyro.sample("sigma", dist.HalfNormal(pr["sigma_scale"]))
            z = numpyro.sample("z", dist.Normal(0.0, 1.0).expand([suite.SV_T]))
            first = z[0] / jnp.sqrt(1 - phi**2)
            _, rest = lax.scan(lambda prev, zt: (phi * prev + zt, phi * prev + zt), first, z[1:])
            h = numpyro.deterministic("h", mu + sigma * jnp.concatenate([first[None], rest]))
            numpyro.sample("y", dist.Normal(0.0, jnp.exp(h / 2)), obs=y)

        return model, lambda d: np.column_stack([d["mu"], d["phi"], d["sigma"], d["h"]])
    if name == "negbin_salmonella":
        dose = np.repeat(suite.SALM_DOSE, 3)
        y = jnp.asarray(np.asarray(suite.SALM_Y).reshape(-1))
        ld, dk = jnp.asarray(np.log(dose + 10)), jnp.asarray(dose / 1000)

        def model() -> None:
            coef = numpyro.sample("coef", dist.Normal(0.0, 10.0).expand([3]))
            psi = numpyro.deterministic("psi", numpyro.sample("kappa", dist.HalfNormal(1.0)) ** 2)
            mean = jnp.exp(coef[0] + coef[1] * ld + coef[2] * dk)
            numpyro.sample("y", dist.NegativeBinomial2(mean, 1 / psi), obs=y)

        return model, lambda d: np.column_stack([d["coef"], d["psi"]])
    raise ValueError(f"no NumPyro model for {name}")


def numpyro_check(name: str) -> dict[str, Any]:
    """NumPyro NUTS (float64, chains run one after another) on the problem's model written in NumPyro; the
    summaries of its draws in the model's parameters."""
    import jax
    from numpyro.infer import MCMC, NUTS

    jax.config.update("jax_enable_x64", True)
    c = NUMPYRO_CHECK
    model, to_model = _numpyro_model(name)
    mcmc = MCMC(NUTS(model, target_accept_prob=0.9), num_warmup=c["warmup"], num_samples=c["draws"],
                num_chains=c["chains"], chain_method="sequential", progress_bar=False)
    started = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(c["seed"]))
    wall = time.perf_counter() - started
    grouped = {k: np.asarray(v, dtype=np.float64) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    flat = {k: v.reshape(-1, *v.shape[2:]) for k, v in grouped.items()}
    values = to_model(flat).reshape(c["chains"], c["draws"], -1)
    divergences = int(np.asarray(mcmc.get_extra_fields()["diverging"]).sum())
    summary = summarise(values)
    problem = get(name)
    log(f"{name}: NumPyro NUTS max R-hat {max(summary['rhat']):.4f}, min bulk ESS {min(summary['ess_bulk']):.0f}, "
        f"{divergences} divergences, {wall:.0f} s")
    return {"name": name, "names": problem.model_names, "space": "model", "created": time.strftime(
        "%Y-%m-%d %H:%M UTC", time.gmtime()), "method": "numpyro NUTS (target_accept_prob 0.9), float64",
        "settings": c, "wall_time_s": round(wall, 2), "divergences": divergences, **summary,
        "max_rhat": max(summary["rhat"]), "min_ess_bulk": min(summary["ess_bulk"])}


def main() -> None:
    torch.set_num_threads(1)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--force", action="store_true", help="recompute references that exist")
    parser.add_argument("--numpyro-check", nargs="+", metavar="NAME", default=None,
                        help="only write references/NAME.numpyro.json, the independent NumPyro check")
    args = parser.parse_args()
    REF_DIR.mkdir(exist_ok=True)
    if args.numpyro_check:
        for name in args.numpyro_check:
            (REF_DIR / f"{name}.numpyro.json").write_text(json.dumps(numpyro_check(name), indent=1) + "\n")
            log(f"{name}: wrote references/{name}.numpyro.json")
        return
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
