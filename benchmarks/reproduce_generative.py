"""Reproduce the generative rows of the GPVI paper (Ratzlaff et al. 2021) with Parvis' run loop on the CPU and
write them, side by side with the published numbers, to the `## Generative methods` section of
docs/reproduction.md (only that section is replaced).

    nice -n 10 python benchmarks/reproduce_generative.py            # full: 20,000 / 50,000 steps, 3 seeds
    python benchmarks/reproduce_generative.py --quick               # smoke run: 1 seed, short runs; prints only
Finished runs are kept in benchmarks/results/generative_runs.json (`--cache`); a rerun skips them.

Tables: 1 (Σ error, 2-D and 5-D Gaussians, Σ* = SSᵀ with S_ij ~ N(0, 1)), 2 (Bayesian linear regression,
d = 3, Table 7 settings) and 5 (GPVI vs GPVI Exact Jac). Every generator is linear (the paper's samplers), so
its output law N(b, MMᵀ) is analytic and the errors carry no sampling noise: M = W for k = d (no λ term).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _timing import machine_summary, replace_section  # noqa: E402

from inference_core import errors, run  # noqa: E402

SECTION = "Generative methods"
DOC = ROOT / "docs" / "reproduction.md"

# method key → (registered method, options beyond the common ones)
# Table 7's width and depth; Adam lr 1e-3, not Table 7's 1e-4: the residual of eq. 10 weighs the helper's error
# along a singular direction of A + λI by σ², so at 1e-4 the small-σ directions (where (A + λI)^{-T} is large)
# are learned too slowly and the generator collapses along them (5-D seed 0, BLR seed 2).
PAIRWISE_HELPER = {"hidden_width": 10, "hidden_layers": 3, "optimizer": {"name": "adam", "lr": 1e-3}}
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "gpvi": ("gpvi", {"helper": "pairwise", "helper_network": PAIRWISE_HELPER}),
    "gpvi_matrix": ("gpvi", {"helper": "matrix"}),
    "gpvi_exact": ("gpvi_exact", {}),
    "amortized_svgd": ("amortized_svgd", {"expectation": "independent"}),
    "amortized_gfsf": ("amortized_gfsf", {"gfsf_eps": 1e-5}),
    "amortized_ksd": ("amortized_ksd", {"critic": {"hidden": [100], "l2_weight": 10.0, "steps": 2,
                                                   "optimizer": {"name": "adam", "lr": 1e-3}}}),
}
# Diagnostic (BLR only, not the paper's setting): the same KSD with full-data scores instead of minibatches.
VARIANTS["amortized_ksd_fullbatch"] = VARIANTS["amortized_ksd"]
LABELS = {"gpvi": "GPVI (pairwise helper, paper)", "gpvi_matrix": "GPVI (`helper: \"matrix\"`)",
          "gpvi_exact": "GPVI Exact Jac (`gpvi_exact`)", "amortized_svgd": "Amortized SVGD",
          "amortized_gfsf": "Amortized GFSF", "amortized_ksd": "Amortized KSD",
          "amortized_ksd_fullbatch": "Amortized KSD — full batch (diagnostic)"}
AMORTISED = ("amortized_svgd", "amortized_gfsf", "amortized_ksd")

# Published mean ± std: Table 1 / Table 5 (Σ error 2-D, 5-D) and Table 2 (μ error, Σ error).
PUBLISHED_T1 = {"amortized_svgd": ((0.10, 0.09), (0.37, 0.32)), "amortized_gfsf": ((0.18, 0.04), (0.21, 0.13)),
                "amortized_ksd": ((0.28, 0.32), (1.68, 0.52)), "gpvi": ((0.14, 0.08), (0.14, 0.04))}
PUBLISHED_T5 = {"amortized_svgd": ((0.10, 0.09), (0.37, 0.32)), "gpvi": ((0.14, 0.08), (0.14, 0.04)),
                "gpvi_exact": ((0.15, 0.09), (0.49, 0.17))}
PUBLISHED_T2 = {"amortized_svgd": ((0.002, 0.0009), (0.158, 0.04)), "amortized_gfsf": ((0.002, 0.0003), (0.209, 0.05)),
                "amortized_ksd": ((0.004, 0.0007), (0.430, 0.10)), "gpvi": ((0.002, 0.0007), (0.128, 0.04)),
                "gpvi_exact": ((0.002, 0.0004), (0.106, 0.07))}


# --------------------------------------------------------------------------------------------- problems


def gaussian_cov(d: int, seed: int) -> np.ndarray:
    """Σ* = SSᵀ, S_ij ~ N(0, 1) (Appendix E), a fresh S per seed."""
    S = np.random.default_rng(3000 + 10 * d + seed).normal(size=(d, d))
    return S @ S.T


def blr_data(seed: int, n: int = 50, d: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """§4.2: X ~ N(0, I_d), β_i ~ U(0, 1) + 5, y = Xβ + N(0, 1); N = 50, fresh data per seed — the same draws as
    benchmarks/reproduce_particle.py, so the particle and generative rows share their data sets."""
    rng = np.random.default_rng(1000 + seed)
    X = rng.normal(size=(n, d))
    beta = rng.uniform(size=d) + 5.0
    return X, X @ beta + rng.normal(size=n)


def output_law(method) -> tuple[torch.Tensor, torch.Tensor]:
    """(b, MMᵀ): the exact mean and covariance of a linear generator's output (float64)."""
    net = method.network
    W, b = net.output.weight.detach().double().cpu(), net.output.bias.detach().double().cpu()
    lam, k, d = net.lam_float(), net.input_dim, net.output_dim
    M = W if lam == 0 else torch.cat([W, torch.zeros(d, d - k, dtype=W.dtype)], 1) + lam * torch.eye(d, dtype=W.dtype)
    return b, M @ M.T


def options_for(key: str, lr: float) -> tuple[str, dict[str, Any]]:
    method, extra = VARIANTS[key]
    # precondition "none": the papers' algorithms in the raw coordinates, as the recorded tables were run
    options = {"generator": {"hidden": []}, "optimizer": {"name": "adam", "lr": lr}, "precondition": "none",
               **json.loads(json.dumps(extra))}
    return method, options


def run_one(table: str, key: str, seed: int, steps: int, dim: int, lr: float) -> dict[str, Any]:
    method, options = options_for(key, lr)
    if table == "gauss":
        cov = gaussian_cov(dim, seed)
        target = {"kind": "gaussian", "mean": [0.0] * dim, "cov": cov.tolist()}
    else:
        X, y = blr_data(seed)
        target = {"kind": "bayesian_linear_regression", "dataset": {"X": X.tolist(), "y": y.tolist()},
                  "noise_std": 1.0}
        if not key.endswith("_fullbatch"):
            target["batch_size"] = 10
    spec = {"method": method, "target": target, "num_particles": 100, "steps": steps, "seed": seed,
            "options": options, "device": "cpu"}
    started = time.perf_counter()
    try:
        result = run(spec)
    except errors.InferenceError as exc:  # a diverged run is a result too
        nan = float("nan")
        return {"table": table, "key": key, "seed": seed, "steps": steps, "dim": dim, "lr": lr,
                "wall_s": time.perf_counter() - started,
                "step_ms": nan, "cov_abs": nan, "cov_rel": nan, "mean_abs": nan, "mean_rel": nan, "lambda": nan,
                "error": f"{exc.code}: {exc.detail}"}
    wall = time.perf_counter() - started
    mean, learned = output_law(result.method)
    ref = result.method.target.reference()
    mu, sigma = ref.mean.double().cpu(), ref.cov.double().cpu()
    cov_abs = float(torch.linalg.matrix_norm(learned - sigma))
    mean_abs = float((mean - mu).norm())
    # Eigenvalues of Σ^(-1/2) Σ̂ Σ^(-1/2): 1 = the right spread along that direction, 0 = collapsed.
    root_inv = torch.linalg.inv(torch.linalg.cholesky(sigma))
    spread = torch.linalg.eigvalsh(root_inv @ learned @ root_inv.T).tolist()
    return {"table": table, "key": key, "seed": seed, "steps": steps, "dim": dim, "lr": lr, "wall_s": wall,
            "spread": spread,
            "step_ms": 1e3 * wall / steps, "cov_abs": cov_abs, "cov_rel": cov_abs / float(torch.linalg.matrix_norm(sigma)),
            "mean_abs": mean_abs, "mean_rel": mean_abs / float(mu.norm()) if float(mu.norm()) > 0 else None,  # μ = 0: none
            "lambda": result.method.network.lam_float()}


# --------------------------------------------------------------------------------------------- report


def stats(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), (statistics.pstdev(values) if len(values) > 1 else 0.0)


def fmt(values: list[float], digits: int = 3) -> str:
    if not values:
        return "—"
    mean, std = stats(values)
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def pub(value: tuple[float, float] | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value[0]:.{digits}f} ± {value[1]:.{digits}f}"


def pick(results: list[dict], table: str, key: str, dim: int, field: str) -> list[float]:
    """`field` of the matching runs in seed order (the cache keeps the order the runs finished in)."""
    rows = sorted((r for r in results if r["table"] == table and r["key"] == key and r["dim"] == dim),
                  key=lambda r: r["seed"])
    return [r[field] for r in rows]


def verdict(ours: list[float], published: float | None) -> str:
    if not ours or published is None:
        return "—"
    return "yes" if statistics.fmean(ours) <= published else "**no**"


def render(results: list[dict], meta: dict[str, Any]) -> str:
    out = [f"Written by `benchmarks/reproduce_generative.py{' --quick' if meta['quick'] else ''}` (Parvis' run loop, "
           f"CPU). Run {meta['date']}; {meta['machine']}. The machine is shared: absolute times are indicative.",
           "",
           "Common settings: linear generators (the paper's samplers: no hidden layer, noise of the output's width, "
           "k = d, hence no λ term), 100 particles per generator batch (and an independent expectation batch of 100 "
           f"for GPVI and amortised SVGD), Adam lr {meta['lr']:g} for the generator (paper: 1e-3), RBF kernel with h = median / log n "
           "(median of the squared distances between the two batches, or over the distinct pairs of one batch). "
           "GPVI (paper): pairwise helper 10 wide × 3 layers (Table 7), Adam 1e-3 (Table 7: 1e-4, too slow for the "
           "small singular directions of the Jacobian), one helper step per generator step. "
           "`helper: \"matrix\"`: the matrix helper with its defaults (32 wide × 1 layer, Adam 1e-3, "
           "8 probes; the earlier default, 32 wide × 3 layers, gave the same means to two digits: 2-D 0.029, "
           "5-D 0.155, BLR μ 0.0025 and Σ 0.091, code of commit aa63774; its rows were re-run after commit 29132d0, which "
           "made every generative optimiser's step cheaper, the other rows before it, so the ms / step columns do "
           "not compare across rows: docs/benchmarks.md measures step times side by side). Amortised SVGD: ALF's svgd3 (independent expectation batch); GFSF ε = 1e-5; KSD critic "
           "3→100→3 ReLU (no BatchNorm), Adam 1e-3, L2 weight 10, 2 critic steps per generator step, exact trace. "
           f"Seeds {meta['seeds']}; mean ± std (population std over seeds). A generator's output law is N(b, MMᵀ), "
           "computed exactly from its weights, so no sampling error enters the errors below.",
           "", "### Table 1: Σ error on Gaussians", "",
           f"{meta['gauss_steps']:,} steps. Σ* = SSᵀ, S_ij ~ N(0, 1), a fresh S per seed. Error: ‖MMᵀ − Σ*‖_F "
           "(absolute Frobenius; the paper defines the error as \"the difference between the true variance and "
           "the variance of the sampler output WWᵀ − Σ\" without naming the norm) and, for reference, the "
           "relative ‖MMᵀ − Σ*‖_F / ‖Σ*‖_F. \"≤ published?\" compares our mean absolute error with the published "
           "mean.", "",
           "| method | 2-D abs | 2-D rel | published 2-D | ≤ published? | 5-D abs | 5-D rel | published 5-D "
           "| ≤ published? | ms / step (2-D, 5-D) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for key in VARIANTS:
        published = PUBLISHED_T1.get(key) or PUBLISHED_T5.get(key)
        a2, a5 = pick(results, "gauss", key, 2, "cov_abs"), pick(results, "gauss", key, 5, "cov_abs")
        if not a2 and not a5:
            continue
        t2, t5 = pick(results, "gauss", key, 2, "step_ms"), pick(results, "gauss", key, 5, "step_ms")
        times = ", ".join(f"{statistics.median(t):.2f}" if t else "—" for t in (t2, t5))
        out.append(f"| {LABELS[key]} | {fmt(a2)} | {fmt(pick(results, 'gauss', key, 2, 'cov_rel'))} | "
                   f"{pub(published[0] if published else None)} | {verdict(a2, published[0][0] if published else None)} | "
                   f"{fmt(a5)} | {fmt(pick(results, 'gauss', key, 5, 'cov_rel'))} | "
                   f"{pub(published[1] if published else None)} | {verdict(a5, published[1][0] if published else None)} | "
                   f"{times} |")
    out += ["", "The `gpvi_exact` row is compared with Table 5's GPVI Exact Jac; `helper: \"matrix\"` has no "
            "published counterpart and is compared with GPVI's numbers.",
            "", "### Table 5: GPVI against GPVI Exact Jac (same runs as Table 1)", "",
            "| method | 2-D abs (ours) | published 2-D | 5-D abs (ours) | published 5-D |", "|---|---|---|---|---|"]
    for key in ("amortized_svgd", "gpvi", "gpvi_matrix", "gpvi_exact"):
        a2, a5 = pick(results, "gauss", key, 2, "cov_abs"), pick(results, "gauss", key, 5, "cov_abs")
        if not a2 and not a5:
            continue
        published = PUBLISHED_T5.get(key)
        out.append(f"| {LABELS[key]} | {fmt(a2)} | {pub(published[0] if published else None)} | {fmt(a5)} | "
                   f"{pub(published[1] if published else None)} |")
    out += ["", "### Table 2: Bayesian linear regression (d = 3)", "",
            f"{meta['blr_steps']:,} steps. Table 7 / §4.2: X ~ N(0, I₃), β_i ~ U(0, 1) + 5, y = Xβ + N(0, 1), "
            "N = 50 rows (not stated in the paper; the size of the authors' ALF tests; the same data sets as "
            "`## Particle methods`), flat prior, unit noise, posterior N((XᵀX)⁻¹Xᵀy, (XᵀX)⁻¹); minibatch 10 "
            "(likelihood × N/10, rows drawn without replacement each step). Errors: relative ‖b − μ‖₂ / ‖μ‖₂ and "
            "‖MMᵀ − Σ‖_F / ‖Σ‖_F — the paper's \"L2 norm of the difference\" can only be relative (‖Σ‖_F ≈ 0.035 "
            "here, and its deep-ensemble row, 1.0 ± 0, is the relative error of a collapsed covariance); absolute "
            "errors for reference.", "",
            "| method | μ error (rel) | Σ error (rel) | published μ | published Σ | ≤ published (μ, Σ)? "
            "| μ error (abs) | Σ error (abs) | ms / step |",
            "|---|---|---|---|---|---|---|---|---|"]
    for key in VARIANTS:
        mu_rel, cov_rel = pick(results, "blr", key, 3, "mean_rel"), pick(results, "blr", key, 3, "cov_rel")
        if not mu_rel:
            continue
        published = PUBLISHED_T2.get("gpvi" if key == "gpvi_matrix" else key.removesuffix("_fullbatch"))
        check = (f"{verdict(mu_rel, published[0][0])}, {verdict(cov_rel, published[1][0])}" if published else "—")
        t = pick(results, "blr", key, 3, "step_ms")
        out.append(f"| {LABELS[key]} | {fmt(mu_rel, 4)} | {fmt(cov_rel)} | "
                   f"{pub(published[0] if published else None, 4)} | {pub(published[1] if published else None, 3)} | "
                   f"{check} | {fmt(pick(results, 'blr', key, 3, 'mean_abs'), 4)} | "
                   f"{fmt(pick(results, 'blr', key, 3, 'cov_abs'), 4)} | "
                   f"{statistics.median(t):.2f} |")
    out += ["", "### Goals", ""]
    out += goals(results)
    out += per_seed(results)
    return "\n".join(out) + "\n"


def per_seed(results: list[dict]) -> list[str]:
    """The seeds behind the means: a miss driven by one seed reads differently from a uniform one."""
    lines = ["", "Per seed (5-D: absolute Σ error; BLR: relative Σ error), seeds in order:", ""]
    for key in VARIANTS:
        g5 = pick(results, "gauss", key, 5, "cov_abs")
        blr = pick(results, "blr", key, 3, "cov_rel")
        parts = [f"{name} " + ", ".join(f"{v:.3f}" for v in values) for name, values in (("5-D", g5), ("BLR", blr))
                 if values]
        if parts:
            lines.append(f"- {LABELS[key]}: " + "; ".join(parts) + ".")
    lines += ["", "The pairwise helper's settings, diagnosed (earlier runs, code of commit 109cf96): with Table 7's "
              "helper lr 1e-4 and the raw ∇k as input, two runs collapsed, 5-D seed 0 (Σ error 0.976) and BLR seed 2 "
              "(relative Σ error 0.504), while their other seeds sat at the exact solve's level. The residual of eq. 10 "
              "weighs the helper's error along a singular direction of A + λI by σ (its gradient by σ²), so the "
              "direction where (A + λI)^{-T} is largest is learned last. Those two seeds start with the smallest σ_min "
              "(0.022 and 0.046, against 0.059-0.20 for the others); the helper's coefficient along that direction "
              "stayed near 0 (5-D seed 0 at step 5,000: exact repulsion along it 41.3, helper's 0.07) and the "
              "generator collapsed along it. Helper Adam lr 1e-3 (the default now) and a unit-vector input with the "
              "output scaled by ‖w‖ (J^{-T} is linear in w) remove the collapse: the rows above use both."]
    uniform = []  # amortised baselines outside the published bar on EVERY seed
    for key in AMORTISED:
        for table, dim, field, published, name in (("gauss", 5, "cov_abs", PUBLISHED_T1[key][1], "5-D Σ"),
                                                  ("blr", 3, "cov_rel", PUBLISHED_T2[key][1], "BLR Σ")):
            values = pick(results, table, key, dim, field)
            if values and min(values) > published[0] + published[1]:
                uniform.append(f"{LABELS[key]} ({name}: best seed {min(values):.3f} against {published[0]} ± "
                               f"{published[1]})")
    if uniform:
        lines += ["", "Outside the published error bar on every seed, so not a single bad run: " + "; ".join(uniform)
                  + ". Our baselines follow ALF's settings as described in the common settings above."]
        if any(u.startswith(LABELS["amortized_gfsf"] + " (5-D") for u in uniform):
            lines += ["", "Amortised GFSF in 5-D, diagnosed (one-off measurements, not part of this script): the "
                      "learned covariance is shrunk (whitened eigenvalues 0.65-0.77 on seed 0) and is a fixed point "
                      "of the update, not a failure to converge (population drift ‖E[φ zᵀ]‖_F 0.12 at the learned "
                      "generator against 12.2 at the true one, seed 1). On exact samples from N(0, Σ*), n = 100, "
                      "the GFSF estimate of ∇log q with h = med²/log n is shrunk by 0.69-0.83 along the bulk "
                      "directions in 5-D (0.92-1.01 in 2-D) and by ~0.17 along a low-variance one; the shrink "
                      "does not depend on ε (1e-5 to 1e-2) and vanishes at about 4·h. The implementation matches a "
                      "dense float64 solve and ALF's formula (ALF's median includes the zero diagonal: its h is "
                      "0.99× ours). So the gap is the estimator's bias at the paper's bandwidth rule, not a bug; "
                      "with h = med² (`bandwidth: {divisor: \"none\"}`, not the paper's rule) the same protocol "
                      "gives 0.026 in 2-D and 0.61 in 5-D."]
        if any(u.startswith(LABELS["amortized_ksd"] + " (BLR") for u in uniform):
            lines += ["", ksd_note(results)]
        diagnosed = (LABELS["amortized_gfsf"] + " (5-D", LABELS["amortized_ksd"] + " (BLR")
        if not any(u.startswith(diagnosed) for u in uniform):
            lines += ["", "The cause of these gaps was not diagnosed."]
    norms = {r["seed"]: r["cov_abs"] / r["cov_rel"] for r in results
             if r["table"] == "gauss" and r["dim"] == 5 and r["cov_rel"]}
    if norms:
        lines += ["", "Absolute 5-D errors scale with ‖Σ*‖_F, which is " + ", ".join(
            f"{norms[seed]:.1f}" for seed in sorted(norms)) + " for seeds " + ", ".join(map(str, sorted(norms)))
            + "."]
    return lines


def ksd_note(results: list[dict]) -> str:
    """Amortised KSD's BLR gap: the spread of its learned covariance, what was ruled out, and what closes it."""
    def spreads(key: str) -> str:
        rows = sorted((r for r in results if r["table"] == "blr" and r["key"] == key and "spread" in r),
                      key=lambda r: r["seed"])
        return "; ".join("[" + " ".join(f"{v:.3g}" for v in r["spread"]) + "]" for r in rows)
    full = pick(results, "blr", "amortized_ksd_fullbatch", 3, "cov_rel")
    full_text = (f"full-data scores instead of minibatches (the diagnostic row) give {statistics.fmean(full):.2f} "
                 f"(per seed {', '.join(f'{v:.2f}' for v in full)}), so minibatch noise is a minor part; " if full else "")
    return ("Amortised KSD on BLR, diagnosed: its learned covariance is mis-shaped both ways, not only "
            "shrunk (eigenvalues of Σ^(-1/2) Σ̂ Σ^(-1/2), 1 = right spread, per seed: " + spreads("amortized_ksd")
            + "). Ruled out as the main cause: " + full_text + "translating the data so that the posterior mean "
            "lies within 0.5 of 0 (same covariance, so the critic sees inputs near 0 rather than near 5.5) gives "
            "1.20 (1.60, 0.84, 1.16), and 10 critic steps per generator step instead of 2 give 1.29 (1.65, 0.79, "
            "1.44). ALF's default critic "
            "BatchNorm (BatchNorm1d after the hidden layer, batch statistics in the critic's and the generator's "
            "updates) makes it worse: the generator collapses (relative Σ error 1.00 on every seed, whitened "
            "spreads ≤ 1e-3), which is why we leave it out. What closes it is a change of the posterior's scale: "
            "with X/√50 and y − Xβ̂ (posterior N(0, 50 (XᵀX)⁻¹), covariance ≈ I instead of ≈ I/50, mean exactly 0; minibatch "
            "10, every other setting unchanged) the relative Σ error is 0.148 (0.201, 0.186, 0.056), inside the "
            "published bar, with whitened spreads 0.63-1.18. Centring alone did not (above), so the gap follows "
            "the small covariance (‖Σ‖_F ≈ 0.035): SVGD and GFSF adapt to scale through the median bandwidth, "
            "while the KSD critic's initialisation, L2 weight and learning rate are fixed in absolute units. "
            "(The four variants are one-off runs of this protocol, 2026-11-21, not part of this script.)")


def goals(results: list[dict]) -> list[str]:
    """Each GPVI variant against the published means its table rows compare it with: `gpvi_exact` against
    Table 5's / Table 2's GPVI Exact Jac, the pairwise and matrix helpers against GPVI's."""
    lines = []
    for key in ("gpvi", "gpvi_matrix", "gpvi_exact"):
        g2, g5 = pick(results, "gauss", key, 2, "cov_abs"), pick(results, "gauss", key, 5, "cov_abs")
        mu, cov = pick(results, "blr", key, 3, "mean_rel"), pick(results, "blr", key, 3, "cov_rel")
        gauss_bars = PUBLISHED_T5.get(key, PUBLISHED_T5["gpvi"])
        blr_bars = PUBLISHED_T2.get(key, PUBLISHED_T2["gpvi"])
        parts = []
        if g2:
            parts.append(f"2-D {statistics.fmean(g2):.3f} ≤ {gauss_bars[0][0]}: {verdict(g2, gauss_bars[0][0])}")
        if g5:
            parts.append(f"5-D {statistics.fmean(g5):.3f} ≤ {gauss_bars[1][0]}: {verdict(g5, gauss_bars[1][0])}")
        if mu:
            parts.append(f"BLR μ {statistics.fmean(mu):.4f} ≤ {blr_bars[0][0]}: {verdict(mu, blr_bars[0][0])}")
        if cov:
            parts.append(f"BLR Σ {statistics.fmean(cov):.3f} ≤ {blr_bars[1][0]}: {verdict(cov, blr_bars[1][0])}")
        if g5:
            beaten = [a for a in AMORTISED if pick(results, "gauss", a, 5, "cov_abs")]
            worse = [a for a in beaten if statistics.fmean(pick(results, "gauss", a, 5, "cov_abs")) <= statistics.fmean(g5)]
            parts.append("better than every amortised method in 5-D: "
                         + ("yes" if beaten and not worse else f"**no** ({', '.join(worse) or 'no amortised runs'})"))
        if parts:
            lines.append(f"- {LABELS[key]}: " + "; ".join(parts) + ".")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 seed, 3,000 / 5,000 steps at lr 1e-2 (not the paper's 1e-3)")
    parser.add_argument("--lr", type=float, default=1e-3, help="generator learning rate (paper: 1e-3)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--gauss-steps", type=int, default=20_000)
    parser.add_argument("--blr-steps", type=int, default=50_000)
    parser.add_argument("--methods", default=",".join(VARIANTS), help="comma-separated keys of VARIANTS")
    parser.add_argument("--tables", default="gauss,blr")
    parser.add_argument("--cache", type=Path, default=ROOT / "benchmarks" / "results" / "generative_runs.json",
                        help="JSON file of finished runs (read and appended; committed as the raw record)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: see docs/benchmarks.md)")
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing the doc")
    parser.add_argument("--render-only", action="store_true",
                        help="run nothing: render the cached runs again, keeping the doc's run date and machine")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    seeds = list(range(1 if args.quick else args.seeds))
    gauss_steps = 3000 if args.quick else args.gauss_steps
    blr_steps = 5000 if args.quick else args.blr_steps
    lr = 1e-2 if args.quick else args.lr
    keys = [k for k in args.methods.split(",") if k]
    unknown = set(keys) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown methods {sorted(unknown)}")
    results: list[dict] = []
    if args.quick:  # smoke runs never mix with the committed record
        args.cache = args.cache.parent / "quick" / args.cache.name
        args.cache.parent.mkdir(parents=True, exist_ok=True)
    if args.cache.exists():
        results = json.loads(args.cache.read_text())
    jobs = []
    for table in args.tables.split(","):
        dims = (2, 5) if table == "gauss" else (3,)
        steps = gauss_steps if table == "gauss" else blr_steps
        jobs += [(table, key, seed, steps, dim, lr) for dim in dims for key in keys for seed in seeds
                 if table == "blr" or not key.endswith("_fullbatch")]

    def ident(r: dict) -> tuple:
        return r["table"], r["key"], r["seed"], r["steps"], r["dim"], r["lr"]

    for job in jobs:
        if any(ident(r) == job for r in results) or args.render_only:
            continue
        row = run_one(*job)
        results.append(row)
        print(json.dumps(row), flush=True)
        args.cache.write_text(json.dumps(results, indent=1))
    wanted = set(jobs)
    chosen = [r for r in results if ident(r) in wanted]
    meta = {"quick": args.quick, "seeds": seeds, "gauss_steps": gauss_steps, "blr_steps": blr_steps, "lr": lr,
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine_summary(with_load=True)}
    if args.render_only:  # the rows are the cached runs: keep when and where they ran
        ran = re.search(r"\(Parvis' run loop, CPU\)\. Run (.+?); (.+?)\. The machine is shared", DOC.read_text())
        if ran:
            meta.update(date=ran.group(1), machine=ran.group(2))
    body = render(chosen, meta)
    if args.no_write or args.quick:  # a smoke run never replaces the record
        print(body)
    else:
        replace_section(DOC, SECTION, body, doc_title="Reproduction of published results")
        print(f"wrote ## {SECTION} to {DOC}")
    failed = [r for r in chosen if "error" in r]
    for r in failed:
        print(f"{r['table']} {r['key']} seed {r['seed']}: {r['error']}")


if __name__ == "__main__":
    main()
