"""Reproduce the published particle-method results with Parvis' own run loop, side by side with the papers.

Parts (`--part`, default all):

* `blr` — GPVI paper (Ratzlaff et al. 2021) Table 2, rows SVGD, GFSF, KSD: Bayesian linear regression, d = 3,
  §4.2 and Table 7: X ~ N(0, I), β_i ~ U(0, 1) + 5, ε ~ N(0, 1); 100 particles, Adam lr 1e-3, minibatch 10,
  50,000 iterations, flat prior; mean and covariance errors, 3 seeds, mean ± std. The paper does not give N:
  we use N = 50, the data size of the authors' own ALF tests of this setting (hypernetwork/functional ParVI
  BLR tests: 50 points, batch 10).
* `breast` — Kang, "Speedup methods for SVGD", §5.2 "Maximum Mean Discrepancy" (Fig. 5): Bayesian logistic
  regression, a0 = b0 = 1, full batch, 3000 iterations, n ∈ {10, …, 250} with m ∈ {5, …, 50}, MMD between the
  particles and a long NUTS run (NumPyro, 10k warm-up + 10k draws, every 5th draw kept: 2000 draws, cached in
  benchmarks/breast_cancer_nuts_reference.npz). Data: scikit-learn's breast cancer set (569 × 30,
  standardised, plus a bias column; θ = [w, log α], d = 32), as asked — NOT the paper's 263 × 9 "breast
  cancer" of the Rätsch benchmark collection, which is not bundled.
* `walltime` — the paper's Fig. 1 setting: wall time of 1000 iterations against n, m = 5, on the same target.

Results go to docs/reproduction.md, section "## Particle methods" (only that section is replaced), and the
raw numbers to --results-dir as JSON (one file per part; the document is written from whichever parts
exist there). `--quick` is a smoke run (tiny settings, nothing written to docs/).

    nice -n 10 python benchmarks/reproduce_particle.py --part blr
    nice -n 10 python benchmarks/reproduce_particle.py --part breast --trials 3
    python benchmarks/reproduce_particle.py --quick
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _timing import machine_summary, replace_section  # noqa: E402

from inference_core import run  # noqa: E402
from inference_core.metrics.discrepancy import mmd2_rbf  # noqa: E402
from inference_core.metrics.moments import sample_cov  # noqa: E402
from inference_core.spec import parse_target_spec  # noqa: E402
from inference_core.targets import BuildContext, build_target  # noqa: E402

NUTS_FILE = ROOT / "benchmarks" / "breast_cancer_nuts_reference.npz"
DOC = ROOT / "docs" / "reproduction.md"
SECTION = "Particle methods"

# GPVI paper Table 2 (mean ± std over their runs).
PUBLISHED_BLR = {"svgd": ((0.006, 0.0024), (0.125, 0.03)), "gfsf": ((0.003, 0.0014), (0.139, 0.07)),
                 "ksd": ((0.009, 0.0006), (0.373, 0.11))}
BREAST_N = [10, 20, 30, 50, 80, 100, 150, 200, 250]
BREAST_M = [5, 10, 10, 20, 20, 20, 35, 40, 50]
PAPER_METHODS = ["svgd", "svgd_subset", "svgd_subset_cf", "svgd_induced", "svgd_induced_adversarial",
                 "svgd_induced_adversarial_batched"]
EXTRA_METHODS = ["gfsf", "wsgld", "pisgld", "ksd"]
#: not in the paper: issue 14's remedy for the variance collapse these rows show, with its own defaults
REMEDY_METHODS = ["auto"]


# ------------------------------------------------------------------------------------------ helpers


def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def fmt_ms(pair: tuple[float, float], digits: int = 3) -> str:
    return f"{pair[0]:.{digits}f} ± {pair[1]:.{digits}f}"


def save(results_dir: Path, part: str, payload: dict[str, Any]) -> None:
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / f"{part}.json").write_text(json.dumps(payload, indent=1))


def load(results_dir: Path, part: str) -> dict[str, Any] | None:
    path = results_dir / f"{part}.json"
    return json.loads(path.read_text()) if path.exists() else None


# ------------------------------------------------------------------------------------ GPVI Table 2


def blr_data(seed: int, n: int, d: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """GPVI §4.2: X ~ N(0, I_d), β_i ~ U(0, 1) + 5, y = Xβ + N(0, 1); fresh data per seed (as ALF's tests)."""
    rng = np.random.default_rng(1000 + seed)
    X = rng.normal(size=(n, d))
    beta = rng.uniform(size=d) + 5.0
    return X, X @ beta + rng.normal(size=n)


def blr_options(method: str) -> dict[str, Any]:
    """Table 7 + ALF's ParVIAlgorithm conventions (the code behind the paper's ParVI rows)."""
    options: dict[str, Any] = {"optimizer": {"name": "adam", "lr": 1e-3}, "init": {"method": "normal"}}
    alf_kernel = {"bandwidth": {"rule": "median", "divisor": "log_n", "include_diagonal": True}}
    if method in ("svgd", "gfsf"):
        options["kernel"] = alf_kernel
    if method == "gfsf":
        options["eps"] = 1e-5
    if method == "ksd":
        # Table 7: 1 hidden layer of 100, critic lr 1e-3, L2 weight 10; ALF's default 2 critic steps/step.
        options["critic"] = {"hidden": [100], "optimizer": {"name": "adam", "lr": 1e-3}, "l2_weight": 10.0, "steps": 2}
    return options


def run_blr(seeds: list[int], steps: int, n_data: int, methods: list[str]) -> dict[str, Any]:
    """`<method>_fullbatch` runs the same with full-data scores (a diagnostic, not the paper's setting)."""
    rows: dict[str, list[dict[str, float]]] = {m: [] for m in methods}
    for key in methods:
        method = key.removesuffix("_fullbatch")
        target: dict[str, Any] = {"kind": "bayesian_linear_regression"}
        if not key.endswith("_fullbatch"):
            target["batch_size"] = 10
        for seed in seeds:
            X, y = blr_data(seed, n_data)
            target["dataset"] = {"X": X.tolist(), "y": y.tolist()}
            spec = {"method": method, "num_particles": 100, "steps": steps, "seed": seed, "target": target,
                    "options": blr_options(method), "eval": {"ksd": False, "mmd": False}, "device": "cpu"}
            started = time.perf_counter()
            result = run(spec)
            x = result.particles.to(torch.float64)
            ref = result.method.target.reference()
            mu, cov = ref.mean.to(torch.float64), ref.cov.to(torch.float64)
            mean_abs = float((x.mean(0) - mu).norm())
            cov_abs = float(torch.linalg.matrix_norm(sample_cov(x) - cov))
            # Eigenvalues of Σ^(-1/2) Σ̂ Σ^(-1/2): 1 = right spread along that direction, 0 = collapsed.
            root = torch.linalg.cholesky(cov)
            whitened = torch.linalg.solve_triangular(root, sample_cov(x), upper=False)
            spread = torch.linalg.eigvalsh(torch.linalg.solve_triangular(root, whitened.T, upper=False))
            rows[key].append({
                "seed": seed, "mean_abs": mean_abs, "cov_abs": cov_abs,
                "mean_rel": mean_abs / float(mu.norm()), "cov_rel": cov_abs / float(torch.linalg.matrix_norm(cov)),
                "cov_norm": float(torch.linalg.matrix_norm(cov)), "wall_s": time.perf_counter() - started,
                "spread_eigenvalues": [float(v) for v in spread],
            })
            print(f"blr {key} seed {seed}: {rows[key][-1]}", flush=True)
    return {"steps": steps, "n_data": n_data, "seeds": seeds, "rows": rows, "machine": machine_summary(with_load=True),
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}


# ----------------------------------------------------------------------------------- Breast cancer


def breast_target_spec() -> dict[str, Any]:
    return {"kind": "bayesian_logistic_regression", "dataset": "sklearn:breast_cancer", "standardize": True,
            "bias": True, "prior": {"a0": 1.0, "b0": 1.0}}


def nuts_reference(warmup: int, draws: int, thin: int, recompute: bool, cache: bool) -> np.ndarray:
    """NumPyro NUTS on the same log posterior (checked equal to the target's up to a constant)."""
    if NUTS_FILE.exists() and not recompute and cache:
        stored = np.load(NUTS_FILE, allow_pickle=False)
        if int(stored["warmup"]) == warmup and int(stored["draws"]) == draws and int(stored["thin"]) == thin:
            return stored["samples"].astype(np.float64)
    import jax
    import jax.numpy as jnp
    from numpyro.infer import MCMC, NUTS

    jax.config.update("jax_enable_x64", True)
    target = build_target(parse_target_spec(breast_target_spec()).model_dump(), BuildContext(dtype=torch.float64))
    X, y = jnp.asarray(target.X.numpy()), jnp.asarray(target.y.numpy())
    d, a0, b0 = X.shape[1], 1.0, 1.0

    def potential(theta: Any) -> Any:
        w, log_alpha = theta[:d], theta[d]
        z = X @ w
        alpha = jnp.exp(log_alpha)
        log_prior = 0.5 * d * log_alpha - 0.5 * alpha * jnp.sum(w * w) + a0 * log_alpha - b0 * alpha
        return -(jnp.sum(y * z - jax.nn.softplus(z)) + log_prior)

    probe = np.random.default_rng(0).normal(size=(2, target.dim))
    ours = -target.log_prob(torch.as_tensor(probe)).numpy()
    theirs = np.array([float(potential(jnp.asarray(p))) for p in probe])
    if abs((ours - theirs).std()) > 1e-8:  # equal up to the additive constant (d/2) log 2π
        raise RuntimeError("the NumPyro potential does not match the target's log posterior")
    mcmc = MCMC(NUTS(potential_fn=potential), num_warmup=warmup, num_samples=draws, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), init_params=jnp.zeros(target.dim))
    samples = np.asarray(mcmc.get_samples())[::thin]
    if cache:
        np.savez_compressed(NUTS_FILE, samples=samples.astype(np.float32), warmup=warmup, draws=draws, thin=thin)
    return samples


def breast_spec(method: str, n: int, m: int, steps: int, seed: int) -> dict[str, Any]:
    spec = {"target": breast_target_spec(), "num_particles": n, "steps": steps, "seed": seed,
            "eval": {"ksd": False, "mmd": False}, "device": "cpu"}
    if method in REMEDY_METHODS:  # its defaults; `steps` is its upper bound
        return {"method": method, **spec}
    name = "svgd_induced_adversarial" if method.startswith("svgd_induced_adversarial") else method
    # Kang's getModel: AdaGrad with momentum, master stepsize 0.1 (docs/implementation-notes.md, "SVGD speed-ups (Kang)").
    options: dict[str, Any] = {"optimizer": {"name": "adagrad_momentum", "lr": 0.1, "alpha": 0.9, "eps": 1e-6}}
    if name == "svgd":  # Liu's rule: median over the full n×n matrix, diagonal included, / log(n + 1)
        options["kernel"] = {"bandwidth": {"divisor": "log_n_plus_1", "include_diagonal": True}}
    if name.startswith("svgd_"):
        options["subset_size"] = m
    if name == "svgd_induced_adversarial":
        options.update({"ascent_steps": 10, "repulsion": 0.1, "u_statistic": True, "update": "both"})
        if method.endswith("_batched"):
            options.update({"batched": True, "batch_size": m})
    if name == "ksd":
        options["critic"] = {"steps": 2}
    return {"method": name, **spec, "options": options}


def run_breast(trials: dict[str, int], steps: int, ns: list[int], ms: list[int], methods: list[str],
               reference: np.ndarray, results_dir: Path) -> dict[str, Any]:
    """Every (method, n) cell with `trials[method]` seeds; saved after each run, and a rerun with the same
    settings skips the runs already in `results_dir` (the adversarial ascent costs minutes per run)."""
    ref = torch.as_tensor(reference, dtype=torch.float64)
    previous = load(results_dir, "breast")
    same = previous is not None and previous["steps"] == steps and previous["ns"] == ns and previous["ms"] == ms
    res = previous if same else {"steps": steps, "ns": ns, "ms": ms, "rows": {}}
    from numpyro.diagnostics import effective_sample_size

    provenance = {"machine": machine_summary(with_load=True), "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}
    if not same or set(methods) >= set(res["rows"]):  # the table's own run; else these rows were added to it later
        res.update(provenance)
    res.update({"reference_draws": int(reference.shape[0]),
                "reference_ess_min": float(effective_sample_size(reference[None]).min())})
    for method in methods:
        for n, m in zip(ns, ms, strict=True):
            cell = res["rows"].setdefault(method, {}).setdefault(str(n), [])
            for trial in range(len(cell), trials[method]):
                res.setdefault("method_runs", {})[method] = provenance  # only where a run is made, not skipped
                started = time.perf_counter()
                result = run(breast_spec(method, n, m, steps, seed=trial))
                wall = time.perf_counter() - started
                x = result.particles.to(torch.float64)
                finite = bool(torch.isfinite(x).all())
                mmd2, h = mmd2_rbf(x, ref) if finite else (float("nan"), float("nan"))
                # Spread diagnostic: particle std / reference std, averaged over the coordinates.
                spread = float((x.std(0) / ref.std(0)).mean()) if finite else float("nan")
                cell.append({"trial": trial, "mmd2": mmd2, "mmd": math.sqrt(max(mmd2, 0.0)), "bandwidth": h,
                             "std_ratio": spread, "wall_s": wall, "steps": result.steps_completed,
                             "grad_evals": result.final_metrics.get("grad_evals")})
                save(results_dir, "breast", res)
                print(f"breast {method} n={n} m={m} trial {trial}: mmd {cell[-1]['mmd']:.4f} ({wall:.1f} s)",
                      flush=True)
    return res


def run_walltime(ns: list[int], m: int, steps: int, methods: list[str]) -> dict[str, Any]:
    rows: dict[str, dict[str, float]] = {meth: {} for meth in methods}
    for method in methods:  # warm-up: the first run in a process pays one-off start-up costs
        run(breast_spec(method, ns[0], m, 20, seed=0))
    for method in methods:
        for n in ns:
            started = time.perf_counter()
            run(breast_spec(method, n, m, steps, seed=0))
            rows[method][str(n)] = time.perf_counter() - started
            print(f"walltime {method} n={n}: {rows[method][str(n)]:.2f} s", flush=True)
    return {"ns": ns, "m": m, "steps": steps, "rows": rows, "machine": machine_summary(with_load=True),
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}


# --------------------------------------------------------------------------------------- the report


LABELS = {"svgd": "SVGD", "gfsf": "GFSF", "ksd": "KSD", "wsgld": "w-SGLD-B", "pisgld": "pi-SGLD",
          "svgd_subset": "random subset", "svgd_subset_cf": "subset + CF", "svgd_induced": "induced points",
          "svgd_induced_adversarial": "adversarial induced", "svgd_induced_adversarial_batched":
          "adversarial induced (batched)", "auto": "`auto` (defaults; not in the paper)"}


def within_published(method: str, runs: list[dict[str, float]]) -> tuple[bool, bool]:
    """(mean, cov) relative errors at or below the published mean + one std."""
    (pm, pms), (pc, pcs) = PUBLISHED_BLR[method]
    return (statistics.fmean(r["mean_rel"] for r in runs) <= pm + pms,
            statistics.fmean(r["cov_rel"] for r in runs) <= pc + pcs)


def ksd_note(res: dict[str, Any]) -> list[str]:
    """Why KSD misses in the minibatch setting, said only as far as this run's rows show it."""
    rows = res["rows"]
    if all(within_published("ksd", rows["ksd"])):
        return []
    smallest = [min(r["spread_eigenvalues"]) for r in rows["ksd"]]
    note = ("KSD is outside the published error bars in the paper's minibatch setting. Each step the critic takes "
            "2 Adam steps on ONE minibatch's scores (batch 10 of 50, likelihood × 5), so it chases the minibatch "
            "noise, a random affine function of the weights, and the particles follow that critic: their "
            "covariance shrinks, most along one direction (smallest spread eigenvalue "
            f"{min(smallest):.2f}-{max(smallest):.2f} over the seeds).")
    full = rows.get("ksd_fullbatch")
    if full is not None:
        if all(within_published("ksd", full)):
            note += (" With full-data scores and every other setting unchanged (the diagnostic row) KSD is within "
                     "the published bars, so the critic update itself is not the cause.")
        else:
            note += " With full-data scores (the diagnostic row) it is still outside them."
    note += (" One difference with the code behind the paper that we keep on purpose: ALF's critic has BatchNorm "
             "by default, which we leave out (it couples the particles and biases the trace); whether it explains "
             "the gap was not tested.")
    return ["", note]


def report_blr(res: dict[str, Any]) -> list[str]:
    out = [
        "### GPVI paper, Table 2: Bayesian linear regression (d = 3)",
        "",
        f"Run {res['date']}; {res['machine']}.",
        "",
        f"Setting (§4.2, Table 7): X ~ N(0, I₃), β_i ~ U(0, 1) + 5, ε ~ N(0, 1), flat prior (posterior "
        f"N((XᵀX)⁻¹Xᵀy, (XᵀX)⁻¹)); N = {res['n_data']} data points (not stated in the paper; the size of the "
        "authors' own ALF tests of this setting), fresh data per seed; 100 particles from N(0, I); Adam lr 1e-3; "
        f"minibatch 10 (likelihood × N/10, drawn without replacement every step); {res['steps']:,} iterations; "
        f"seeds {res['seeds']}. SVGD/GFSF: RBF, h = median of all n² squared distances (diagonal included) / "
        "log n (ALF's ParVIAlgorithm), GFSF ε = 1e-5 (ALF). KSD: critic MLP 3→100→3 (ReLU, no BatchNorm), Adam "
        "1e-3, L2 weight 10, 2 critic steps per particle step (ALF's default; the paper does not say), exact "
        "Jacobian trace.",
        "",
        "Errors: ‖mean − μ‖₂ and ‖Σ̂ − Σ‖_F (Σ̂ with divisor n − 1), absolute and relative to ‖μ‖₂, ‖Σ‖_F. "
        "The paper says \"L2 norm of the difference\"; its numbers can only be relative errors: with unit noise "
        f"and N = {res['n_data']}, ‖Σ‖_F ≈ √3/N ≈ {math.sqrt(3) / res['n_data']:.3f}, so an absolute covariance "
        "error of 0.125 would be several times the whole covariance (any N ≥ 3 gives ‖Σ‖_F ≤ ~0.6), and the "
        "authors' ALF tests of this setting divide by ‖μ‖ and ‖Σ‖_F. The relative columns are the comparable ones.",
        "",
        "| method | mean error (abs) | cov error (abs, Frobenius) | mean error (rel) | cov error (rel) | "
        "published mean error | published cov error | within published error bar or better? |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, runs in res["rows"].items():
        method = key.removesuffix("_fullbatch")
        mean_abs = mean_std([r["mean_abs"] for r in runs])
        cov_abs = mean_std([r["cov_abs"] for r in runs])
        mean_rel = mean_std([r["mean_rel"] for r in runs])
        cov_rel = mean_std([r["cov_rel"] for r in runs])
        (pm, pms), (pc, pcs) = PUBLISHED_BLR[method]
        ok_mean, ok_cov = within_published(method, runs)
        verdict = "yes" if (ok_mean and ok_cov) else (
            "mean: " + ("yes" if ok_mean else "no") + ", cov: " + ("yes" if ok_cov else "no"))
        label = LABELS[method] + (" — full batch (diagnostic)" if key.endswith("_fullbatch") else "")
        out.append(f"| {label} | {fmt_ms(mean_abs, 4)} | {fmt_ms(cov_abs, 4)} | {fmt_ms(mean_rel, 4)} | "
                   f"{fmt_ms(cov_rel, 3)} | {pm} ± {pms} | {pc} ± {pcs} | {verdict} |")
    spreads = {m: [r["spread_eigenvalues"] for r in runs] for m, runs in res["rows"].items()
               if all("spread_eigenvalues" in r for r in runs)}
    if spreads:
        out += ["", "Spread: eigenvalues of Σ^(-1/2) Σ̂ Σ^(-1/2) per seed (1 = right variance along that "
                "direction, 0 = collapsed): " + "; ".join(
                    f"{LABELS[m.removesuffix('_fullbatch')]}{' (full batch)' if m.endswith('_fullbatch') else ''}"
                    f" " + ", ".join("[" + " ".join(f"{v:.2f}" for v in ev) + "]" for ev in evs)
                    for m, evs in spreads.items()) + "."]
    if "ksd" in res["rows"]:
        out += ksd_note(res)
    walls = {m: statistics.fmean([r["wall_s"] for r in runs]) for m, runs in res["rows"].items()}
    out += ["", "Wall time per run: " + ", ".join(
        f"{LABELS[m.removesuffix('_fullbatch')]}{' (full batch)' if m.endswith('_fullbatch') else ''} {w:.0f} s"
        for m, w in walls.items()) + "."]
    return out


def iid_calibration(ns: list[int], repeats: int = 10) -> list[tuple[float, float]] | None:
    """MMD (same estimator) between n draws picked at random from the NUTS reference and the reference:
    what an exact sample of n points scores, the floor the particle methods are compared against."""
    if not NUTS_FILE.exists():
        return None
    ref = torch.as_tensor(np.load(NUTS_FILE, allow_pickle=False)["samples"].astype(np.float64))
    rng = np.random.default_rng(0)
    out = []
    for n in ns:
        vals = [math.sqrt(max(mmd2_rbf(ref[rng.choice(ref.shape[0], n, replace=False)], ref)[0], 0.0))
                for _ in range(repeats)]
        out.append(mean_std(vals))
    return out


def trials_text(res: dict[str, Any]) -> str:
    """"3 trials (seeds 0..2) per cell; 1 for adversarial induced, …" from the runs actually stored."""
    counts = {method: min(len(runs) for runs in cells.values()) for method, cells in res["rows"].items()}
    common = max(set(counts.values()), key=list(counts.values()).count)
    text = f"{common} trial(s) per cell (seeds 0..{common - 1})"
    fewer = [f"{LABELS[m]} {c}" for m, c in counts.items() if c != common]
    return text + ("; " + ", ".join(fewer) if fewer else "")


def report_breast(res: dict[str, Any]) -> list[str]:
    ns = res["ns"]
    out = [
        "### Speed-up paper, §5.2 / Fig. 5: Bayesian logistic regression, MMD to NUTS",
        "",
        f"Run {res['date']}; {res['machine']}.",
        "",
        "Setting: scikit-learn breast cancer (569 × 30, standardised, bias column; θ = [w, log α], d = 32), "
        "w ~ N(0, α⁻¹I), α ~ Gamma(a0 = 1, rate b0 = 1), full batch, "
        f"{res['steps']:,} iterations, {trials_text(res)} (the paper averages "
        "10), AdaGrad with momentum (stepsize 0.1, α 0.9, fudge 1e-6: Kang's `getModel`), the target's own "
        "initialisation (α₀ ~ Gamma(1, scale b0), w₀ ~ N(0, α₀⁻¹I)). SVGD: h = median(n×n, diagonal included) / "
        "log(n + 1); speed-ups: h = median of the n×m cross distances / log(n + 1); adversarial: L = 10 ascent "
        "steps on Y and log h per step, α = 0.1, U-statistic; batched: ascent on m particles drawn with "
        f"replacement. Reference: NumPyro NUTS, 10,000 warm-up + 10,000 draws, every 5th kept "
        f"({res['reference_draws']} draws; smallest effective sample size over the 32 coordinates "
        f"{res.get('reference_ess_min', float('nan')):.0f}). MMD = √MMD² (V-statistic, RBF, h = median squared distance of the "
        "union particles ∪ reference), mean ± std over trials.",
        *added_rows_text(res),
        "",
        "The paper reports this experiment only as a plot (Fig. 5; no numbers in the text) and on the 263 × 9 "
        "breast-cancer set of the Rätsch benchmarks, so the comparison is with its stated findings, below the table.",
        "",
        "| method | " + " | ".join(f"n={n} (m={m})" for n, m in zip(ns, res["ms"], strict=True)) + " |",
        "|---|" + "---|" * len(ns),
    ]
    for method, cells in res["rows"].items():
        values = []
        for n in ns:
            runs = cells.get(str(n), [])
            mmds = [r["mmd"] for r in runs if math.isfinite(r["mmd"])]
            values.append(fmt_ms(mean_std(mmds), 3) if mmds else "diverged")
        out.append(f"| {LABELS[method]} | " + " | ".join(values) + " |")
    calibration = iid_calibration(ns)
    if calibration is not None:
        out.append("| *n exact draws (calibration)* | " + " | ".join(fmt_ms(c, 3) for c in calibration) + " |")
        out += ["", "*n exact draws*: n points picked at random from the NUTS reference (10 picks), same estimator: "
                "the score of an exact sample of that size (the V-statistic carries a bias of order 1/n)."]
    out += ["", "Mean wall time per run (s):", "",
            "| method | " + " | ".join(f"n={n}" for n in ns) + " |", "|---|" + "---|" * len(ns)]
    for method, cells in res["rows"].items():
        out.append(f"| {LABELS[method]} | " + " | ".join(
            f"{statistics.fmean([r['wall_s'] for r in cells.get(str(n), [])]):.1f}" if cells.get(str(n)) else "—"
            for n in ns) + " |")
    if any("std_ratio" in r for cells in res["rows"].values() for runs in cells.values() for r in runs):
        out += ["", "Spread of the particles: per-coordinate particle std / NUTS std, averaged over the 32 "
                "coordinates (1 = right spread; below 1 = the variance collapse of kernel methods in high "
                "dimension with few particles):", "",
                "| method | " + " | ".join(f"n={n}" for n in ns) + " |", "|---|" + "---|" * len(ns)]
        for method, cells in res["rows"].items():
            out.append(f"| {LABELS[method]} | " + " | ".join(
                f"{statistics.fmean([r['std_ratio'] for r in cells[str(n)]]):.2f}" if cells.get(str(n)) else "—"
                for n in ns) + " |")
    out += ["", *breast_findings(res)]
    return out


def span(values: list[float], digits: int = 2) -> str:
    """"a-b" of the smallest and largest value, or one value when they agree at `digits`."""
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low}-{high}"


def added_rows_text(res: dict[str, Any]) -> list[str]:
    """A note for rows run after the table's own run (their date and machine), and for the remedy rows."""
    later = {m: run for m, run in res.get("method_runs", {}).items()
             if m in res["rows"] and (run["date"], run["machine"]) != (res["date"], res["machine"])}
    lines = [f"The row {LABELS[m]} was run {run['date']}; {run['machine']}." for m, run in later.items()]
    if any(m in res["rows"] for m in REMEDY_METHODS):
        lines.append("`auto` is not in the paper: it is issue 14's remedy for the variance collapse below, run with "
                     "its own defaults (Pathfinder; the normalising flow where Pathfinder's Gaussian misses mass, "
                     "as here; SVGD in the whitened space, stopped by its convergence rule, the iterations an upper "
                     "bound), not with the paper's optimiser and kernel.")
    return ["", " ".join(lines)] if lines else []


def breast_findings(res: dict[str, Any]) -> list[str]:
    """The paper's qualitative claims about Fig. 5, checked against our numbers."""
    ns = res["ns"]

    def curve(method: str) -> list[float]:
        cells = res["rows"].get(method, {})
        return [statistics.fmean([r["mmd"] for r in cells[str(n)] if math.isfinite(r["mmd"])] or [math.nan])
                if str(n) in cells else math.nan for n in ns]

    lines = ["Published findings (§5.2) against ours:", ""]
    svgd, adv = curve("svgd"), curve("svgd_induced_adversarial")
    if not any(math.isnan(v) for v in svgd + adv):
        wins = sum(a < s for a, s in zip(adv, svgd, strict=True))
        lines.append(f"* \"adversarial induced points perform much better than regular SVGD across all particle "
                     f"numbers\": ours lower MMD than SVGD at {wins} of {len(ns)} n.")
    ind = curve("svgd_induced")
    if not any(math.isnan(v) for v in ind):
        lines.append(f"* \"regular induced points improve as we have more particles\": ours MMD {ind[0]:.3f} at "
                     f"n = {ns[0]} → {ind[-1]:.3f} at n = {ns[-1]} "
                     f"({'reproduced' if ind[-1] < ind[0] else 'not reproduced'}).")
    sub = curve("svgd_subset")
    if not any(math.isnan(v) for v in sub):
        verdict = "reproduced" if sub[-1] > sub[0] else "not reproduced: ours improves with n"
        lines.append(f"* \"random subset goes in the reverse direction\" (m/n falls from 1/2 to 1/5): ours "
                     f"{sub[0]:.3f} at n = {ns[0]} → {sub[-1]:.3f} at n = {ns[-1]} ({verdict}).")
    last = str(ns[-1])
    exact = [m for m in ("svgd", "gfsf", "wsgld", "pisgld") if last in res["rows"].get(m, {})]
    if exact:
        spreads = [statistics.fmean(r["std_ratio"] for r in res["rows"][m][last]) for m in exact]
        lines.append(f"* Not a claim of the paper, but what drives our numbers: at n = {ns[-1]} the exact-interaction "
                     f"kernel methods ({', '.join(LABELS[m] for m in exact)}) keep only {span(spreads)} "
                     f"of the NUTS spread per coordinate (the variance collapse of SVGD-type "
                     "methods in d = 32 with a median-heuristic RBF kernel), so their MMD stays far above the "
                     "n-exact-draws floor; the noisier O(nm) updates collapse less, which is much of why they score "
                     "lower here.")
    auto = res["rows"].get("auto", {})
    if last in auto:
        spreads = [statistics.fmean(r["std_ratio"] for r in auto[str(n)]) for n in ns if str(n) in auto and n >= 100]
        steps = [r["steps"] for n in ns for r in auto.get(str(n), []) if n >= 100 and "steps" in r]
        floor = iid_calibration(ns)
        floor_text = f" (n exact draws: {floor[-1][0]:.3f})" if floor is not None else ""
        lines.append(f"* The remedy (issue 14): `auto` with its defaults keeps {span(spreads)} of the NUTS "
                     f"spread at n ≥ 100 and scores MMD {curve('auto')[-1]:.3f} at n = {ns[-1]}{floor_text}: below "
                     "the floor, as particles spread more evenly than independent draws; it stopped after "
                     f"{span(steps, 0)} iterations there.")
    if last in res["rows"].get("ksd", {}):
        ksd_spread = statistics.fmean(r["std_ratio"] for r in res["rows"]["ksd"][last])
        if ksd_spread > 1.5:
            lines.append(f"* KSD's particles err the other way: {ksd_spread:.1f}× the NUTS spread at n = {ns[-1]}.")
    bat = curve("svgd_induced_adversarial_batched")
    if not any(math.isnan(v) for v in bat + adv):
        worse = [n for n, b, a in zip(ns, bat, adv, strict=True) if b > a]
        lines.append(f"* \"taking a batch … hurts the performance but performs faster\": ours batched vs full "
                     f"MMD at n = {ns[-1]}: {bat[-1]:.3f} vs {adv[-1]:.3f}; batching has the higher MMD at "
                     f"{len(worse)} of {len(ns)} n ({', '.join(map(str, worse)) or 'none'}); wall time below.")
    return lines


def report_walltime(res: dict[str, Any]) -> list[str]:
    ns = res["ns"]
    out = [
        "### Speed-up paper, Fig. 1: wall time of 1000 iterations against n (m = 5)",
        "",
        f"Run {res['date']}; {res['machine']}. Same target and settings as above (d = 32, full batch); "
        f"{res['steps']} iterations, one run each, seconds. The paper shows this only as a log-scale plot "
        "(Fig. 1); its claims: subset, subset + CF and induced points take far less time than SVGD, adversarial "
        "induced points and SVGD are orders of magnitude slower, batching the adversarial ascent cuts its time.",
        "",
        "| method | " + " | ".join(f"n={n}" for n in ns) + " |",
        "|---|" + "---|" * len(ns),
    ]
    for method, cells in res["rows"].items():
        out.append(f"| {LABELS[method]} | " + " | ".join(f"{cells[str(n)]:.2f}" for n in ns) + " |")
    return out


def write_doc(results_dir: Path) -> None:
    body = ["Written by `benchmarks/reproduce_particle.py` (Parvis' run loop, CPU). Raw numbers: the JSON files "
            "in its `--results-dir`.", ""]
    for part, writer in (("blr", report_blr), ("breast", report_breast), ("walltime", report_walltime)):
        res = load(results_dir, part)
        if res is not None:
            body += [*writer(res), ""]
    if not DOC.exists():
        DOC.parent.mkdir(parents=True, exist_ok=True)
        DOC.write_text("# Reproduction of published results\n\nEach section is written by the script it names.\n")
    replace_section(DOC, SECTION, "\n".join(body))


# ---------------------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["blr", "breast", "walltime", "all", "doc"], default="all")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny settings, docs/ untouched")
    parser.add_argument("--seeds", type=int, default=3, help="BLR seeds")
    parser.add_argument("--trials", type=int, default=3, help="breast-cancer trials per (method, n)")
    parser.add_argument("--adversarial-trials", type=int, default=1,
                        help="breast-cancer trials per n for the two adversarial variants")
    parser.add_argument("--methods", default="", help="comma-separated subset of methods (default: all)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: stable on a shared machine)")
    parser.add_argument("--results-dir", type=Path, default=ROOT / "benchmarks" / "results" / "particle",
                        help="raw results, one JSON per part (committed: the doc is rebuilt from them)")
    parser.add_argument("--recompute-nuts", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    chosen = [m for m in args.methods.split(",") if m]
    parts = ["blr", "breast", "walltime"] if args.part == "all" else [args.part]
    results_dir = args.results_dir / "quick" if args.quick else args.results_dir

    if "blr" in parts:
        methods = chosen or [*PUBLISHED_BLR, "ksd_fullbatch"]
        res = run_blr(list(range(1 if args.quick else args.seeds)), 300 if args.quick else 50_000, 50, methods)
        previous = load(results_dir, "blr")
        if previous is not None and chosen:  # a partial rerun adds or replaces only its methods' rows
            previous["rows"].update(res["rows"])
            res = previous
        save(results_dir, "blr", res)
    if "breast" in parts or "walltime" in parts:
        methods = chosen or PAPER_METHODS + EXTRA_METHODS + REMEDY_METHODS
    if "breast" in parts:
        if args.quick:
            reference = nuts_reference(300, 300, 1, recompute=True, cache=False)
            res = run_breast(dict.fromkeys(methods, 1), 30, BREAST_N[:2], BREAST_M[:2], methods, reference,
                             results_dir)
        else:
            reference = nuts_reference(10_000, 10_000, 5, recompute=args.recompute_nuts, cache=True)
            # The adversarial ascent (L = 10 autograd passes per step) costs ~1 min per run on one core.
            trials = {m: (args.adversarial_trials if m.startswith("svgd_induced_adversarial") else args.trials)
                      for m in methods}
            res = run_breast(trials, 3000, BREAST_N, BREAST_M, methods, reference, results_dir)
        save(results_dir, "breast", res)
    if "walltime" in parts:
        ns = [10, 50] if args.quick else [10, 50, 100, 250, 500, 1000, 2500]
        res = run_walltime(ns, 5, 20 if args.quick else 1000, chosen or PAPER_METHODS)
        save(results_dir, "walltime", res)
    if args.quick:
        for part, writer in (("blr", report_blr), ("breast", report_breast), ("walltime", report_walltime)):
            res = load(results_dir, part)
            if res is not None and part in parts:
                print("\n".join(writer(res)))
        return
    write_doc(results_dir)
    print(f"wrote section '## {SECTION}' of {DOC}")


if __name__ == "__main__":
    main()
