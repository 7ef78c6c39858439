"""Reproduce the BNN experiments of the GPVI paper (Ratzlaff et al. 2021) with Parvis' run loop on the CPU:
Figure 1 (1-D regression bands), Figure 2 (4-class uncertainty map) and the open-category experiment (Table 3,
MNIST in the paper; scikit-learn's digits here). Writes the figures to docs/figures/ and the section
`## GPVI paper: Bayesian neural networks` of docs/reproduction.md (only that section is replaced).

    nice -n 10 python benchmarks/reproduce_bnn_figures.py            # full run (about half an hour on 1 core)
    python benchmarks/reproduce_bnn_figures.py --quick               # smoke run: short runs, nothing committed
    python benchmarks/reproduce_bnn_figures.py --experiments open_category --methods svgd,ensemble

Resumable: every finished (experiment, method[, seed]) is kept in benchmarks/results/bnn_figures/*.json and
skipped on a rerun; figures and the doc section are rebuilt from those files. Methods not registered in
`inference_core.catalog.METHODS` (`ensemble`, `mfvi` before the baselines land) are reported as missing.
NUTS (the reference of Figures 1–2) runs through Pyro's `pyro.infer.mcmc.NUTS` on the `bnn` target's own
log-density (float64), not a home-made sampler.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
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

from inference_core import run  # noqa: E402
from inference_core.catalog import METHODS  # noqa: E402
from inference_core.datasets import Dataset, load_builtin  # noqa: E402
from inference_core.metrics.classification import auroc, expected_calibration_error, predictive_entropy  # noqa: E402
from inference_core.targets import BuildContext, build_target  # noqa: E402

SECTION = "GPVI paper: Bayesian neural networks"
DOC = ROOT / "docs" / "reproduction.md"
FIGURES = ROOT / "docs" / "figures"
RESULTS = ROOT / "benchmarks" / "results" / "bnn_figures"
EXPERIMENTS = ("regression", "classification", "open_category")
LABELS = {"gpvi": "GPVI (`helper: \"matrix\"`)", "svgd": "SVGD", "amortized_svgd": "Amortized SVGD",
          "nuts": "NUTS (Pyro)", "ensemble": "Deep ensemble", "mfvi": "MF-VI", "amortized_fsvgd": "Amortized f-SVGD"}
FIGURE_METHODS = ("nuts", "svgd", "gpvi", "amortized_svgd", "amortized_fsvgd", "ensemble", "mfvi")
OPEN_METHODS = ("gpvi", "svgd", "amortized_svgd", "ensemble", "mfvi")
# Table 3 (MNIST, LeNet-5): clean accuracy %, AUC, ECE (mean ± std over 3 runs).
PUBLISHED_MNIST = {"svgd": (99.3, (0.989, 0.001), (0.001, 0.0002)),
                   "amortized_svgd": (99.1, (0.958, 0.015), (0.002, 0.0007)),
                   "mfvi": (98.6, (0.951, 0.008), (0.014, 0.0027)),
                   "ensemble": (99.3, (0.972, 0.002), (0.008, 0.0060)),
                   "gpvi": (99.3, (0.988, 0.001), (0.001, 0.0005))}
N_DRAWS = 100  # posterior draws per method in Figures 1–2 (paper: 100)
NO_EVAL = {"ksd": False, "mmd": False}


# ------------------------------------------------------------------------------------------------ data


def regression_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Appendix E: 80 points, 76 with x ~ U([−6, −2] ∪ [2, 6]) and 4 with x ~ U[−2, 2];
    y = −(1 + x) sin(1.2x) + ε, ε ~ N(0, 0.04) read as variance 0.04 (std 0.2)."""
    rng = np.random.default_rng(100 + seed)
    outer = rng.uniform(2, 6, size=76) * rng.choice([-1.0, 1.0], size=76)
    x = np.sort(np.r_[outer, rng.uniform(-2, 2, size=4)])
    return x, -(1 + x) * np.sin(1.2 * x) + rng.normal(0, 0.2, size=80)


MIXTURE_MEANS = np.array([[-2.0, -2.0], [-2.0, 2.0], [2.0, -2.0], [2.0, 2.0]])


def mixture_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """§4.3: x ~ N(μ_c, 0.3 I) with class c uniform over the four means (±2, ±2) (the paper prints (2, −2)
    twice; DESIGN.md errata); 0.3 read as a variance, as ε's 0.04 above. Labels 0..3."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, size=n)
    return MIXTURE_MEANS[labels] + rng.normal(0, math.sqrt(0.3), size=(n, 2)), labels


def digits_split(seed: int = 0) -> dict[str, np.ndarray]:
    """scikit-learn digits: classes 0–5 are inliers (2/3 of each class for training, 1/3 for testing, a
    fixed split), classes 6–9 are the outliers (all their rows, never trained on)."""
    data = load_builtin("sklearn:digits")
    X, y = np.asarray(data.X), np.asarray(data.y)
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in range(6):
        rows = rng.permutation(np.flatnonzero(y == c))
        cut = (2 * len(rows)) // 3
        train += list(rows[:cut])
        test += list(rows[cut:])
    train, test = np.sort(train), np.sort(test)
    outliers = np.flatnonzero(y >= 6)
    return {"X": X[train], "y": y[train], "X_test": X[test], "y_test": y[test], "X_out": X[outliers]}


# --------------------------------------------------------------------------------------------- methods


def method_options(key: str, experiment: str, lr: float) -> tuple[str, dict[str, Any]]:
    """(registered method, options). Generators: Appendix E's [32, 32] for Fig. 1 with noise of width 32 (k = 32 <
    d = 151; GPVI's λ is the BNN-hypernetwork default, fixed at 0.01: at ALF's 0.1 the λz term gives the weights
    past the first 32 an sd ≥ 0.1 and GPVI's band no longer fits the data; k = d = 151 was too slow for this CPU
    budget),
    Table 8's [64, 64] with 64-D noise for Fig. 2, [256, 512] with 64-D noise for the open category (the paper's
    [256, 512, 1024] with 256-D noise, scaled down for the CPU)."""
    adam = {"name": "adam", "lr": lr}
    generator = {"regression": {"hidden": [32, 32], "noise_dim": 32},
                 "classification": {"hidden": [64, 64], "noise_dim": 64},
                 "open_category": {"hidden": [256, 512], "noise_dim": 64}}[experiment]
    if key == "gpvi":  # λ: the default for BNN hypernetworks (HYPERNETWORK_LAMBDA; benchmarks/gpvi_bnn_lambda.py)
        return "gpvi", {"helper": "matrix", "generator": generator, "optimizer": adam}
    if key in ("amortized_svgd", "amortized_fsvgd"):  # the same generator; f-SVGD's options at their defaults
        return key, {"generator": generator, "optimizer": adam}
    if key in ("svgd", "ensemble"):  # the ensemble is SVGD without the repulsion: same optimiser
        return key, {"optimizer": adam}
    if key == "mfvi":
        # Bayes by Backprop's own defaults: σ starts at 0.05 (ρ ≈ −3) and Adam lr 1e-2 moves ρ far enough; at
        # lr 1e-3 σ was still rising after 3000 steps on the digits (mean 0.39 against 0.83 at 1e-2, 0.86
        # after 10,000 steps at 1e-2).
        return "mfvi", {}
    raise ValueError(f"unknown method {key}")


def generator_lambda(result) -> dict[str, float]:
    """{"lambda": λ} of a generator f(z) = g(z[:k]) + λz (what the GPVI rows were trained with), else {}."""
    network = getattr(result.method, "network", None)
    return {"lambda": network.lam_float()} if hasattr(network, "lam_float") else {}


def recorded_lambda(records: list[dict]) -> str:
    """"λ = …" as the GPVI records of an experiment were trained with (one value, or each)."""
    values = sorted({f"{r['lambda']:g}" for r in records if r.get("key") == "gpvi" and "lambda" in r})
    return "λ = " + " / ".join(values) if values else "λ not recorded"


def weight_draws(result, n: int, seed: int) -> torch.Tensor:
    """Posterior draws [n, D]: fresh draws from a generator's sampler, else the particles (all of them)."""
    sampler = result.method.sampler()
    if sampler is not None:
        return sampler.sample(n, seed).detach()
    return result.particles.detach()


def train(key: str, experiment: str, target: dict, steps: int, seed: int, n_particles: int, lr: float,
          context: BuildContext | None = None) -> tuple[Any, float]:
    method, options = method_options(key, experiment, lr)
    spec = {"method": method, "target": target, "num_particles": n_particles, "steps": steps, "seed": seed,
            "device": "cpu", "options": options, "eval": NO_EVAL}
    started = time.perf_counter()
    result = run(spec, context=context)
    return result, time.perf_counter() - started


def nuts_draws(target_spec: dict, warmup: int, samples: int, seed: int, keep: int,
               probe: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any], float]:
    """Pyro NUTS on the bnn target's log p (float64, full data), one chain from the target's own
    initialisation; `keep` draws evenly thinned from `samples`. Diagnostics: weight-space ESS/split R-hat
    and the ESS of the network outputs at the `probe` inputs (what the figures show)."""
    from pyro import set_rng_seed
    from pyro.infer.mcmc import MCMC, NUTS
    from pyro.ops.stats import effective_sample_size, split_gelman_rubin

    target = build_target(target_spec, BuildContext(dtype=torch.float64))
    set_rng_seed(seed)
    init = target.initial_particles(1, torch.Generator().manual_seed(seed))[0]

    def potential(params: dict[str, torch.Tensor]) -> torch.Tensor:
        return -target.log_prob(params["w"].unsqueeze(0))[0]

    kernel = NUTS(potential_fn=potential, max_tree_depth=8, target_accept_prob=0.8)
    mcmc = MCMC(kernel, num_samples=samples, warmup_steps=warmup, initial_params={"w": init}, disable_progbar=True)
    started = time.perf_counter()
    mcmc.run()
    wall = time.perf_counter() - started
    chain = mcmc.get_samples()["w"]  # [samples, D]
    diag = mcmc.diagnostics()
    outputs = target.forward(chain, probe.to(torch.float64)).reshape(samples, -1)  # [samples, probes·out]
    ess_f = effective_sample_size(outputs.unsqueeze(0), chain_dim=0, sample_dim=1)
    rhat_f = split_gelman_rubin(outputs.unsqueeze(0), chain_dim=0, sample_dim=1)
    stats = {"warmup": warmup, "samples": samples, "max_tree_depth": 8,
             "ess_weights_min": float(diag["w"]["n_eff"].min()), "ess_weights_median": float(diag["w"]["n_eff"].median()),
             "rhat_weights_max": float(diag["w"]["r_hat"].max()),
             "ess_outputs_min": float(ess_f.min()), "ess_outputs_median": float(ess_f.median()),
             "rhat_outputs_max": float(rhat_f.max()),
             "divergences": len(diag["divergences"]["chain 0"]),
             "acceptance_rate": float(diag["acceptance rate"]["chain 0"])}
    index = torch.linspace(0, samples - 1, keep).round().long()
    return chain[index].float(), stats, wall


# ------------------------------------------------------------------------------------------ experiments


def regression_target(x: np.ndarray, y: np.ndarray) -> dict:
    """1 → 50 → 1 ReLU (the width of the authors' ALF test of this figure; the paper does not say),
    N(0, 1) weight prior scaled by 1/√fan_in, fixed noise std 0.2 (the data's), in standardised units."""
    y_std = float(y.std())
    return {"kind": "bnn", "task": "regression", "dataset": {"X": x[:, None].tolist(), "y": y.tolist()},
            "hidden": [50], "activation": "relu", "noise": {"type": "fixed", "std": 0.2 / y_std},
            "prior_std": 1.0, "prior_std_scaling": "fan_in", "standardize": True}


def regression_setup() -> tuple[dict, Any, np.ndarray, torch.Tensor]:
    """Figure 1's target spec, the built target, the plotting grid and that grid in the model's units."""
    x, y = regression_data()
    spec = regression_target(x, y)
    target = build_target(spec)
    st = target.standardization
    grid = np.linspace(-8, 8, 161)
    return spec, target, grid, torch.tensor((grid[:, None] - st.x_mean) / st.x_std, dtype=torch.float32)


def run_regression(key: str, args) -> dict[str, Any]:
    spec, target, grid, grid_std = regression_setup()
    st = target.standardization
    if key == "nuts":
        draws, stats, wall = nuts_draws(spec, args.nuts_warmup, args.nuts_samples, 0, N_DRAWS, grid_std[::10])
    else:
        result, wall = train(key, "regression", spec, args.regression_steps, 0, N_DRAWS, args.lr)
        draws = weight_draws(result, N_DRAWS, seed=1)
        stats = {"steps": args.regression_steps, "lr": args.lr, **generator_lambda(result)}
    f = target.forward(draws.to(torch.float32), grid_std)[..., 0].double().numpy() * st.y_std + st.y_mean
    return {"key": key, "grid": grid.tolist(), "mean": np.round(f.mean(0), 4).tolist(),
            "std": np.round(f.std(0), 4).tolist(), "wall_s": round(wall, 1), **stats}


def classification_target(X: np.ndarray, labels: np.ndarray) -> dict:
    """Table 8's network 2 → 10 → 10 → 4 (ReLU), N(0, 1) weight prior, full batch of the 100 points."""
    return {"kind": "bnn", "task": "classification", "n_classes": 4,
            "dataset": {"X": X.tolist(), "y": labels.astype(float).tolist()},
            "hidden": [10, 10], "activation": "relu", "prior_std": 1.0}


GRID_2D = np.linspace(-10, 10, 81)


def run_classification(key: str, args) -> dict[str, Any]:
    X, labels = mixture_data(100, seed=0)
    X_test, labels_test = mixture_data(200, seed=1)
    spec = classification_target(X, labels)
    target = build_target(spec)
    gx, gy = np.meshgrid(GRID_2D, GRID_2D)
    grid = torch.tensor(np.c_[gx.ravel(), gy.ravel()], dtype=torch.float32)
    if key == "nuts":
        draws, stats, wall = nuts_draws(spec, args.nuts_warmup, args.nuts_samples, 0, N_DRAWS, grid[::400])
    else:
        result, wall = train(key, "classification", spec, args.classification_steps, 0, N_DRAWS, args.lr)
        draws = weight_draws(result, N_DRAWS, seed=1)
        stats = {"steps": args.classification_steps, "lr": args.lr, **generator_lambda(result)}
    probs = torch.softmax(target.forward(draws.to(torch.float32), grid), -1).double().numpy()  # [n, G, 4]
    spread = probs.std(0).mean(-1)  # the paper's quantity: std of the predictions among draws (class mean)
    entropy = predictive_entropy(probs.mean(0))
    test_probs = torch.softmax(target.forward(draws.to(torch.float32), torch.tensor(X_test, dtype=torch.float32)),
                               -1).double().numpy().mean(0)
    return {"key": key, "std_map": np.round(spread, 3).tolist(), "entropy_map": np.round(entropy, 3).tolist(),
            "test_accuracy": float((test_probs.argmax(1) == labels_test).mean()), "wall_s": round(wall, 1),
            **stats}


def run_open_category(key: str, seed: int, args) -> dict[str, Any]:
    split = digits_split()
    dataset = Dataset(X=split["X"], y=split["y"], X_test=split["X_test"], y_test=split["y_test"],
                      name="digits 0-5")
    dataset_id = "ds_" + "d1" * 16  # served by the loader below, as the worker serves an uploaded set
    spec = {"kind": "bnn", "task": "classification", "n_classes": 6, "dataset": dataset_id,
            "hidden": [args.open_hidden], "activation": "relu", "prior_std": 1.0, "standardize": True,
            "batch_size": 50}
    context = BuildContext(load_dataset=lambda _id: dataset)
    result, wall = train(key, "open_category", spec, args.open_steps, seed, args.open_particles, args.lr, context)
    target = result.method.target
    st = target.standardization
    draws = weight_draws(result, args.open_particles, seed=seed + 1).to(torch.float32)
    outliers = torch.tensor((split["X_out"] - st.x_mean) / st.x_std, dtype=torch.float32)

    def predict(inputs: torch.Tensor) -> np.ndarray:
        with torch.no_grad():
            return torch.softmax(target.forward(draws, inputs), -1).double().numpy()  # [n, B, K]

    p_in, p_out = predict(target.X_test), predict(outliers)
    labels = target.y_test.numpy()
    mean_in, mean_out = p_in.mean(0), p_out.mean(0)
    variance_in, variance_out = p_in.var(0).sum(-1), p_out.var(0).sum(-1)  # ALF: summed softmax variance
    return {"key": key, "seed": seed, "steps": args.open_steps, "particles": args.open_particles, "lr": args.lr,
            "hidden": args.open_hidden,
            "accuracy": float((mean_in.argmax(1) == labels).mean()),
            "auroc_entropy": auroc(predictive_entropy(mean_in), predictive_entropy(mean_out)),
            "auroc_variance": auroc(variance_in, variance_out),
            "ece": expected_calibration_error(mean_in, labels, n_bins=15),
            "n_train": int(len(split["y"])), "n_test": int(len(labels)), "n_outliers": int(len(outliers)),
            "wall_s": round(wall, 1), **generator_lambda(result)}


# ------------------------------------------------------------------------------------------------ figures


def plot_regression(records: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x, y = regression_data()
    keys = [k for k in FIGURE_METHODS if k in records]
    fig, axes = plt.subplots(1, len(keys), figsize=(3.6 * len(keys), 3.3), sharey=True, squeeze=False)
    truth_x = np.linspace(-8, 8, 400)
    for ax, key in zip(axes[0], keys, strict=True):
        r = records[key]
        grid, mean, std = np.array(r["grid"]), np.array(r["mean"]), np.array(r["std"])
        ax.fill_between(grid, mean - 2 * std, mean + 2 * std, color="tab:blue", alpha=0.3, lw=0, label="mean ± 2 sd")
        ax.plot(grid, mean, color="tab:blue", lw=1.5, label="predictive mean")
        ax.plot(truth_x, -(1 + truth_x) * np.sin(1.2 * truth_x), color="tab:red", lw=1, ls="--", label="truth")
        ax.scatter(x, y, s=8, color="k", zorder=3, label="training data")
        ax.set_title(LABELS[key].replace("`", ""), fontsize=10)
        ax.set_ylim(-10, 12)
        ax.set_xlabel("x")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_classification(records: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    X, labels = mixture_data(100, seed=0)
    keys = [k for k in FIGURE_METHODS if k in records]
    fig, axes = plt.subplots(2, len(keys), figsize=(3.0 * len(keys), 6.0), squeeze=False)
    extent = (GRID_2D[0], GRID_2D[-1], GRID_2D[0], GRID_2D[-1])
    rows = [("std_map", "std of p(y|x) among draws", 0.5), ("entropy_map", "predictive entropy (nats)", math.log(4))]
    for row, (field, name, vmax) in enumerate(rows):
        for ax, key in zip(axes[row], keys, strict=True):
            image = np.array(records[key][field]).reshape(len(GRID_2D), len(GRID_2D))
            shown = ax.imshow(image, origin="lower", extent=extent, cmap="Greys", vmin=0, vmax=vmax)
            ax.scatter(X[:, 0], X[:, 1], c=labels, cmap="tab10", vmin=0, vmax=9, s=4)
            ax.set_xticks([-10, 0, 10])
            ax.set_yticks([-10, 0, 10])
            if row == 0:
                ax.set_title(LABELS[key].replace("`", ""), fontsize=10)
        axes[row][0].set_ylabel(name, fontsize=9)
        fig.colorbar(shown, ax=list(axes[row]), shrink=0.8, pad=0.01)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


# ---------------------------------------------------------------------------------------------- the doc


def trained_steps(records: dict[str, dict], default: int) -> int:
    """The steps the recorded runs used (not this invocation's default)."""
    return next((r["steps"] for k, r in records.items() if k != "nuts" and "steps" in r), default)


def region_means(record: dict) -> dict[str, float]:
    """Mean predictive sd over the training ranges, the gap |x| < 2 and outside |x| > 6 (Figure 1)."""
    grid, std = np.array(record["grid"]), np.array(record["std"])
    on_data = (np.abs(grid) >= 2) & (np.abs(grid) <= 6)
    return {"data": float(std[on_data].mean()), "gap": float(std[np.abs(grid) < 2].mean()),
            "outside": float(std[np.abs(grid) > 6].mean())}


def map_regions(record: dict, field: str) -> dict[str, float]:
    """Mean of a map near the data (within 1 of a class mean) and in the far corners (both |coords| > 6)."""
    gx, gy = np.meshgrid(GRID_2D, GRID_2D)
    points = np.c_[gx.ravel(), gy.ravel()]
    values = np.array(record[field])
    near = np.min(np.linalg.norm(points[:, None] - MIXTURE_MEANS[None], axis=-1), axis=1) < 1
    corners = (np.abs(points) > 6).all(1)
    return {"near": float(values[near].mean()), "corners": float(values[corners].mean())}


def fmt(values: list[float], digits: int = 3) -> str:
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{np.mean(values):.{digits}f} ± {np.std(values):.{digits}f}"


def render(regression: dict, classification: dict, open_rows: list[dict], meta: dict) -> str:
    lines = [f"Written by `benchmarks/reproduce_bnn_figures.py` (Parvis' run loop, CPU). Run {meta['date']}; "
             f"{meta['machine']}. Raw numbers: `benchmarks/results/bnn_figures/`. NUTS is Pyro's "
             "(`pyro.infer.mcmc.NUTS`) on each `bnn` target's own log-density (float64, full data), one chain from "
             "the target's initialisation, max tree depth 8; the figures use 100 of its draws, evenly thinned (these NUTS "
             "runs predate the `nuts` method; switching would cost re-running 804 s + 606 s of NUTS, so the Pyro-direct "
             "draws were kept). Rows were run at different times as methods changed: the GPVI rows of all three "
             "experiments on 2026-11-29 at λ = 0.001 (the BNN-hypernetwork default since; Figure 1's side by side "
             "with another run, two processes on the two cores; Figure 2's beside two UCI cells), with `expectation: "
             "\"same\"`; the amortized f-SVGD rows on 2026-11-28; the rest before (their wall times from the "
             "machines of those runs).", ""]
    missing = [k for k in FIGURE_METHODS + OPEN_METHODS if k not in METHODS and k != "nuts"]
    if missing:
        lines += [f"Not run: {', '.join(sorted(set(missing)))} (not registered in `METHODS` when this ran); "
                  "their rows and panels are added by rerunning the script once they are.", ""]
    lines += ["### Figure 1: 1-D regression", ""]
    if regression:
        lines += [
            "Setting (Appendix E): 80 points, 76 with x ~ U([−6, −2] ∪ [2, 6]), 4 with x ~ U[−2, 2], "
            "y = −(1 + x) sin(1.2x) + ε, ε ~ N(0, 0.04) read as variance 0.04 (std 0.2; the authors' ALF test "
            "of this figure draws std 0.04 with x on a grid). Network 1 → 50 → 1, ReLU (the paper does not give "
            "it; 50 is the width in that ALF test), N(0, 1) weight prior scaled by 1/√fan_in, Gaussian likelihood "
            "with the data's noise std 0.2 fixed (ALF uses unit noise and no prior), inputs and targets standardised. "
            f"100 particles / draws; {trained_steps(regression, meta['regression_steps'])} Adam steps at lr "
            f"{meta['lr']} (paper: 50,000), full batch. Generators (Appendix E): two hidden layers [32, 32], "
            "noise of width 32 (k = 32 < d = 151: f(z) = g(z[:32]) + λz for GPVI, "
            f"{recorded_lambda(list(regression.values()))}, the default for BNN hypernetworks since the studies "
            "below; amortised SVGD has no λ term: λ = 0, noise of width 32). "
            "Band: predictive mean ± 2 sd of the network outputs (the noise std 0.2 is not added), in original units.",
            "", "![Figure 1 reproduction](figures/bnn_regression.png)", "",
            "Mean predictive sd by region (NUTS is the reference):", "",
            "| method | on the data (2 ≤ \\|x\\| ≤ 6) | gap (\\|x\\| < 2) | outside (\\|x\\| > 6) | wall time |",
            "|---|---|---|---|---|"]
        for key in FIGURE_METHODS:
            if key in regression:
                r = region_means(regression[key])
                lines.append(f"| {LABELS[key]} | {r['data']:.3f} | {r['gap']:.3f} | {r['outside']:.3f} | "
                             f"{regression[key]['wall_s']:.0f} s |")
        if "nuts" in regression:
            n = regression["nuts"]
            lines += ["", nuts_line(n), "", *regression_findings(regression)]
        lines += ["", *lambda_study(load(RESULTS / "gpvi_lambda.json") or {}, regression)]
        lines.append("")
    lines += ["### Figure 2: 4-class uncertainty map", ""]
    if classification:
        lines += [
            "Setting (§4.3, Table 8): 100 training and 200 test points, x ~ N(μ_c, 0.3 I) with the four means "
            "(±2, ±2) (the paper misprints one mean) and 0.3 read as a variance; network 2 → 10 → 10 → 4, ReLU, "
            "N(0, 1) weight prior, full batch; 100 particles / draws; "
            f"{trained_steps(classification, meta['classification_steps'])} Adam steps at lr {meta['lr']} (paper: 500,000); generators: Table 8's "
            f"[64, 64] with 64-D noise (k = 64 < d = 184, {recorded_lambda(list(classification.values()))} for GPVI). Top row: the paper's quantity, the standard "
            "deviation of the predicted class probabilities among the draws (mean over the 4 classes); bottom "
            "row: the entropy of the mean prediction. Grid [−10, 10]², 81 × 81. Darker = more uncertain.",
            "", "![Figure 2 reproduction](figures/bnn_classification.png)", "",
            "| method | std near the data | std in the corners (\\|x₁\\|, \\|x₂\\| > 6) | entropy near the data | "
            "entropy in the corners | test accuracy | wall time |", "|---|---|---|---|---|---|---|"]
        for key in FIGURE_METHODS:
            if key in classification:
                rec = classification[key]
                s, e = map_regions(rec, "std_map"), map_regions(rec, "entropy_map")
                lines.append(f"| {LABELS[key]} | {s['near']:.3f} | {s['corners']:.3f} | {e['near']:.3f} | "
                             f"{e['corners']:.3f} | {rec['test_accuracy']:.3f} | {rec['wall_s']:.0f} s |")
        if "nuts" in classification:
            lines += ["", nuts_line(classification["nuts"]), "", *classification_findings(classification)]
        lines.append("")
    lines += ["### Open category: scikit-learn digits (the paper: MNIST, Table 3)", ""]
    if open_rows:
        first = open_rows[0]
        seeds = sorted({r["seed"] for r in open_rows})
        lines += [
            "**digits is not MNIST**: 1,797 8 × 8 images (64 features) instead of 70,000 28 × 28 ones, and an "
            f"MLP 64 → {first['hidden']} → 6 (ReLU) instead of LeNet-5, so the published numbers below are "
            "context, not a target. Classes 0–5 are the inliers (a fixed 2/3 of each class for training: "
            f"{first['n_train']} rows; the other 1/3 for testing: {first['n_test']} rows), classes 6–9 the "
            f"outliers ({first['n_outliers']} rows, never trained on), as the paper's 6/4 split of MNIST. "
            f"{first['particles']} particles / draws (the paper: 10), minibatch 50 (likelihood × N/50), "
            f"{first['steps']} Adam steps at lr {first['lr']} (about {first['steps'] * 50 // first['n_train']} "
            "epochs; the paper: 100 epochs at lr 1e-5), N(0, 1) weight prior, inputs standardised. "
            "Generators [256, 512] with 64-D noise (the paper's [256, 512, 1024] with 256-D noise, scaled down for "
            f"the CPU; GPVI {recorded_lambda(open_rows)}). Deep ensemble: 10 members, each its own MAP, Adam 1e-3 as SVGD, one shared "
            "minibatch per step. MF-VI (Bayes by Backprop): its defaults, σ starting at 0.05 and Adam 1e-2 (at 1e-3 "
            "its σ were still growing after 3000 steps, mean 0.39 against 0.83; 0.86 after 10,000 steps at 1e-2); "
            "the 10 draws are from q. Prediction: the softmax averaged over the draws. AUROC of inliers vs outliers from the "
            "predictive entropy and from the summed variance of the softmax over draws (the paper's Appendix E "
            "uses the variance); ECE with 15 equal-width confidence bins on the inlier test set. "
            f"Mean ± std over seeds {seeds}.", "",
            "| method | accuracy (%) | AUROC (entropy) | AUROC (variance) | ECE | wall time | published MNIST: "
            "clean acc. (%) | AUC | ECE |", "|---|---|---|---|---|---|---|---|---|"]
        for key in OPEN_METHODS:
            rows = [r for r in open_rows if r["key"] == key]
            pub = PUBLISHED_MNIST.get(key)
            pub_cells = (f"{pub[0]} | {pub[1][0]:.3f} ± {pub[1][1]:.3f} | {pub[2][0]:.3f} ± {pub[2][1]:.4f}"
                         if pub else "— | — | —")
            if not rows:
                lines.append(f"| {LABELS[key]} | not run | | | | | {pub_cells} |")
                continue
            lines.append(f"| {LABELS[key]} | {fmt([100 * r['accuracy'] for r in rows], 1)} | "
                         f"{fmt([r['auroc_entropy'] for r in rows])} | {fmt([r['auroc_variance'] for r in rows])} | "
                         f"{fmt([r['ece'] for r in rows])} | {np.mean([r['wall_s'] for r in rows]):.0f} s | "
                         f"{pub_cells} |")
        lines += ["", *open_findings(open_rows)]
        lines.append("")
    return "\n".join(lines)


#: What the second λ study showed (its table is rendered from the results; this reads it).
SAME_BATCH_READING = [
    "Reading (NUTS's sd: 0.085 on the data, 0.134 in the gap): with each draw driven by its own score, λ sets the "
    "band's width again. From 0.01 to 0.001 the sd on the data falls from 1.46× NUTS's to 0.36×, and the "
    "gap-to-data ratio rises from 0.56 to 1.16; on UCI split 0 the same change narrowed GPVI's too-wide predictive "
    "(Energy NLL 0.94 → 0.67, Yacht 0.98 → 0.67), though over splits 0-4 it helped Energy and hurt Yacht and "
    "Concrete, where a split's draws fit badly (the UCI section). λ = 0.001 is the BNN-hypernetwork default since "
    "2026-11-29: it meets issue 40's two Figure 1 goals for GPVI (sd on the data ≤ 2× NUTS's, gap ratio > 1). "
    "What it costs: the band is narrower than NUTS's everywhere (0.26× in the gap) and its band error is larger "
    "than at 0.01 (the table); GPVI's draws are under-dispersed here, as reverse-KL fits tend to be. These three "
    "runs are Figure 1's GPVI run itself (`reproduce_bnn_figures.py`) at each λ, without the z[k:] = 0 readout; "
    "the 0.003 and 0.001 runs ran side by side (two processes on the two cores), hence their wall times. The "
    "injective coupling generator (`structure: \"coupling\"`, its k × k Jacobian in closed form since "
    "2026-11-29: 1.70× the residual generator's step time measured side by side, "
    "`benchmarks/gpvi_structure_uci.py --step-time`; its wall time here is from three processes on the two cores) "
    "is as narrow on the data but no wider in the gap (ratio 0.99), so it misses the gap-ratio goal that the "
    "residual generator meets; it stays opt-in (`inference_core/methods/generative/gpvi.py` has its UCI split-0 "
    "cells too). All of this is at a constant learning rate. Since 2026-11-29 GPVI's BNN default decays it along "
    "half a cosine to `lr_final_factor` × (`lr_schedule`, chosen on UCI: Energy NLL 0.79 → 0.68), and Figure 1's "
    "GPVI run above is under it: the band settles narrower, most in the gap, and the gap ratio falls below 1. "
    "Figure 1's GPVI run at λ = 0.001 by final factor (sd on the data / in the gap, ratio; one seed, 2026-11-29): "
    "1 (constant) 0.030 / 0.035, 1.16; 0.5 0.025 / 0.023, 0.93; 0.3 0.023 / 0.020, 0.86; 0.1 (the default) "
    "0.022 / 0.017, 0.77. So the constant rate's wider gap band came in part from the optimiser's step-to-step "
    "noise, not from the variational fit it oscillates about; the default keeps the settled fit and says so: "
    "issue 40's gap-ratio goal for GPVI is not met by it."]


def lambda_study(study: dict[str, dict], regression: dict[str, dict]) -> list[str]:
    """The λz measurements of benchmarks/gpvi_bnn_lambda.py: on-data sd of GPVI's band per variant, first with the
    independent expectation batch (2026-11-27), then with the updated batch itself (the BNN default since)."""
    if not study:
        return []
    names = {"lam0.1": "λ = 0.1 fixed (ALF's)", "lam0.1_trained": "λ trained from 0.1",
             "lam0.03": "λ = 0.03", "lam0.01": "λ = 0.01", "lam0.01_trained": "λ trained from 0.01",
             "lam0.001": "λ = 0.001", "k151": "k = d = 151, no λ term",
             "exact_lam0.01": "`gpvi_exact`, λ = 0.01", "pairwise_lam0.01": "pairwise helper, λ = 0.01",
             "same_lam0.01": "λ = 0.01", "same_lam0.003": "λ = 0.003", "same_lam0.001": "λ = 0.001",
             "same_coupling_lam0.001": "`structure: \"coupling\"`, λ = 0.001"}
    nuts = region_means(regression["nuts"])["data"] if "nuts" in regression else float("nan")
    nuts_std = np.array(regression["nuts"]["std"]) if "nuts" in regression else None
    independent = [k for k in study if not k.startswith("same_")]
    same = [k for k in study if k.startswith("same_")]
    out = ["**Which λ (measured, `benchmarks/gpvi_bnn_lambda.py`).** The suspicion was λz: "
           "f(z) = g(z[:k]) + λz gives each of the 119 weights past the noise prefix an sd of at least λ whatever g "
           "learns. Each variant below trains Figure 1's GPVI (matrix helper unless said, seed 0) and measures the "
           "mean sd on the data of its 100 draws, and of the same draws with the noise past the prefix set to zero "
           "(z[k:] = 0, removing the part of λz that g cannot see). Second machine's CPU (GPU where said), "
           "one run per variant.", ""]
    if independent:
        order = ["lam0.1", "lam0.1_trained", "lam0.03", "lam0.01", "lam0.01_trained", "lam0.001", "k151",
                 "exact_lam0.01", "lam0.01@6000", "exact_lam0.01@6000", "pairwise_lam0.01@6000", "lam0.01@50000",
                 "lam0.01_trained@50000"]
        out += ["First study (2026-11-27), eq. 9's expectation over an independent batch z' (ALF's estimator):", "",
                "| variant | steps | final λ | sd on the data | with z[k:] = 0 | gap | outside |",
                "|---|---|---|---|---|---|---|"]
        for key in [k for k in order if k in independent] + [k for k in independent if k not in order]:
            r = study[key]
            lam = "—" if r["k"] == r["d"] else f"{r['lambda_final']:.3f}"
            where = " (GPU)" if r["device"] == "cuda" else ""
            out.append(f"| {names.get(key.split('@')[0], key)}{where} | {r['steps']:,} | {lam} | "
                       f"{r['full']['data']:.2f} | {r['prefix_only']['data']:.2f} | {r['full']['gap']:.2f} | "
                       f"{r['full']['outside']:.2f} |")
        out += ["", f"Reading (NUTS's sd on the data: {nuts:.3f}): with the independent batch the λz floor was real "
                "but not the main cause. At λ = 0.1 it made up the difference between 1.08 and 0.64 (zeroing z[k:] "
                "on the same generator), and a trainable λ settled near 0.02 from either start; below 0.03 λ no "
                "longer mattered (0.61 at 0.01, 0.60 at 0.001). What was left, about 7× NUTS's sd, came neither from "
                "λ nor from the matrix helper's inverse (k = d: 0.52; the exact k × k Jacobian solve 0.96; the "
                "pairwise helper 0.91 after 6,000 steps, matrix 0.83) but from the independent batch: each draw was "
                "driven by a kernel-weighted average of the other draws' scores. With z' = z (`expectation: "
                "\"same\"`, the BNN default since 2026-11-28) each draw's own score drives it. This study made 0.01 the "
                "default for BNN hypernetworks (was ALF's 0.1); the second one below replaced it.", ""]
    if same:
        out += ["Second study (2026-11-29), eq. 9's expectation over the updated batch (today's default); band "
                "error = mean |sd − sd_NUTS| over x in [−8, 8]:", "",
                "| variant | steps | sd on the data | with z[k:] = 0 | gap | outside | gap / data | band error | "
                "wall time |", "|---|---|---|---|---|---|---|---|---|"]
        for key in sorted(same, key=lambda k: (study[k]["steps"], "coupling" in k, -study[k]["lambda_final"])):
            r = study[key]
            error = float(np.abs(np.array(r["std"]) - nuts_std).mean()) if nuts_std is not None else float("nan")
            prefix = "—" if r.get("prefix_only") is None else f"{r['prefix_only']['data']:.3f}"
            out.append(f"| {names.get(key.split('@')[0], key)} | {r['steps']:,} | {r['full']['data']:.3f} | "
                       f"{prefix} | {r['full']['gap']:.3f} | {r['full']['outside']:.3f} | "
                       f"{r['full']['gap'] / r['full']['data']:.2f} | {error:.3f} | {r['wall_s']:.0f} s |")
        out += ["", *SAME_BATCH_READING]
    return out


def open_findings(rows: list[dict]) -> list[str]:
    """The paper's Table 3 ordering (AUC: SVGD ≈ GPVI > ensemble > amortised SVGD > MF-VI) against ours."""
    ran = [k for k in OPEN_METHODS if any(r["key"] == k for r in rows)]
    by_auc = sorted(ran, key=lambda k: -np.mean([r["auroc_variance"] for r in rows if r["key"] == k]))
    return ["Published AUC order on MNIST: SVGD 0.989 ≈ GPVI 0.988 > deep ensemble 0.972 > amortised SVGD 0.958 "
            "> MF-VI 0.951. Ours on digits (AUROC from the variance, the paper's score): "
            + " > ".join(LABELS[k] for k in by_auc) + ". ECE here is estimated from "
            f"{rows[0]['n_test']} inlier test rows (MNIST's six inlier classes have about 6,000), in 15 bins, "
            "so it is much noisier than the published values, and a 64 → 50 → 6 MLP on 8 × 8 digits is not "
            "LeNet-5 on MNIST: the published columns are context only."]


def regression_findings(records: dict[str, dict]) -> list[str]:
    """The paper's Figure 1 claims against our numbers (gap/data sd ratios; distance to NUTS's band)."""
    nuts = np.array(records["nuts"]["std"])
    out = ["Figure 1's claims against ours (ratio = mean sd in the gap / mean sd on the data; band error = "
           "mean |sd − sd_NUTS| over x in [−8, 8]):", ""]
    for key in FIGURE_METHODS:
        if key in records:
            r = region_means(records[key])
            error = float(np.abs(np.array(records[key]["std"]) - nuts).mean())
            out.append(f"* {LABELS[key]}: ratio {r['gap'] / r['data']:.1f}, band error {error:.3f}.")
    nuts_regions = region_means(records["nuts"])
    nuts_gap = nuts_regions["gap"]
    goals = []
    for key, ratio_goal in (("gpvi", 1.0), ("amortized_fsvgd", 1.5)):
        if key in records:
            r = region_means(records[key])
            ratio, on_data = r["gap"] / r["data"], r["data"] / nuts_regions["data"]
            met = ratio > ratio_goal if key == "gpvi" else ratio >= ratio_goal
            goals.append(f"{LABELS[key]}: sd on the data {on_data:.2f}× NUTS's (goal ≤ 2: "
                         f"{'met' if on_data <= 2 else '**not met**'}), gap ratio {ratio:.2f} (goal "
                         f"{'>' if key == 'gpvi' else '≥'} {ratio_goal:g}: {'met' if met else '**not met**'})")
    if goals:
        out += ["", "Issue 40's goals for Figure 1: " + "; ".join(goals) + "."]
    out += ["", "The paper's claims: (b) SVGD comparable to HMC; (c) GPVI similar to SVGD; (d) amortised SVGD "
            "overestimates the uncertainty where data are sparse. Gap sd relative to NUTS's here: "
            + ", ".join(f"{LABELS[key]} {region_means(records[key])['gap'] / nuts_gap:.2f}×"
                        for key in FIGURE_METHODS if key in records and key != "nuts") + "."]
    return out


def classification_findings(records: dict[str, dict]) -> list[str]:
    """The paper's Figure 2 claims: GPVI and SVGD more uncertain than HMC in the empty corners, amortised SVGD
    underestimating; ratios of the corner std to NUTS's."""
    nuts = map_regions(records["nuts"], "std_map")["corners"]
    out = ["Corner std relative to NUTS's (the paper: GPVI and SVGD above HMC, amortised SVGD and MF-VI "
           "below it):", ""]
    for key in FIGURE_METHODS:
        if key in records and key != "nuts":
            out.append(f"* {LABELS[key]}: {map_regions(records[key], 'std_map')['corners'] / nuts:.2f}× NUTS.")
    certain = [key for key in ("svgd", "gpvi")
               if key in records and map_regions(records[key], "std_map")["corners"] < 0.1 * nuts]
    if certain:
        names = " and ".join(LABELS[key] for key in certain)
        out += ["", f"Not reproduced: {names}, more uncertain than HMC in the paper's Figure 2, "
                f"{'is' if len(certain) == 1 else 'are'} nearly certain away from the data here. SVGD's 100 particles "
                "in d = 184 with the median-heuristic RBF kernel have nearly collapsed onto one function away from "
                "the data (the variance collapse of kernel methods in high dimension with few particles, also seen "
                "in the speed-up section above), and GPVI's generator, whose draws are each driven by their own "
                "score (`expectation: \"same\"`), does likewise; we trained {steps} steps against the paper's "
                "500,000, so a longer run may differ, which was not tested.".format(
                    steps=records[certain[0]]["steps"])]
    return out


def nuts_line(n: dict) -> str:
    return (f"NUTS: {n['warmup']} warm-up + {n['samples']} draws in {n['wall_s']:.0f} s, acceptance "
            f"{n['acceptance_rate']:.2f}, {n['divergences']} divergences; effective sample size of the network "
            f"outputs at probe inputs min {n['ess_outputs_min']:.0f} / median {n['ess_outputs_median']:.0f} "
            f"(split R-hat ≤ {n['rhat_outputs_max']:.2f}); of the weights min {n['ess_weights_min']:.0f} / median "
            f"{n['ess_weights_median']:.0f} (split R-hat ≤ {n['rhat_weights_max']:.2f}; a single chain of a "
            "network posterior with its permutation symmetries mixes slowly in weight space).")


# ------------------------------------------------------------------------------------------------- main


def load(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


def save(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=None, separators=(",", ":")) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: short runs, written under results/quick")
    parser.add_argument("--experiments", default=",".join(EXPERIMENTS))
    parser.add_argument("--methods", default=",".join(dict.fromkeys(FIGURE_METHODS + OPEN_METHODS)))
    parser.add_argument("--lr", type=float, default=1e-3, help="Adam lr of every method (paper: 1e-3)")
    parser.add_argument("--regression-steps", type=int, default=20_000)
    parser.add_argument("--classification-steps", type=int, default=10_000)
    parser.add_argument("--nuts-warmup", type=int, default=1000)
    parser.add_argument("--nuts-samples", type=int, default=1000)
    parser.add_argument("--open-steps", type=int, default=3000)
    parser.add_argument("--open-particles", type=int, default=10)
    parser.add_argument("--open-hidden", type=int, default=50)
    parser.add_argument("--seeds", type=int, default=3, help="seeds of the open-category runs")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing the doc")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results, figures = RESULTS, FIGURES
    if args.quick:
        args.regression_steps = args.classification_steps = 300
        args.open_steps, args.seeds = 200, 1
        args.nuts_warmup = args.nuts_samples = 30
        results, figures = RESULTS / "quick", RESULTS / "quick" / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    experiments = [e for e in args.experiments.split(",") if e]
    keys = [k for k in args.methods.split(",") if k]
    known = set(FIGURE_METHODS) | set(OPEN_METHODS)
    if set(keys) - known or set(experiments) - set(EXPERIMENTS):
        parser.error(f"methods must be among {sorted(known)}, experiments among {EXPERIMENTS}")

    def available(key: str) -> bool:
        if key == "nuts" or key in METHODS:
            return True
        print(f"skip {key}: not registered in METHODS (merge the baselines branch)", flush=True)
        return False

    for experiment, runner in (("regression", run_regression), ("classification", run_classification)):
        path = results / f"{experiment}.json"
        records = load(path) or {}
        if experiment in experiments:
            for key in keys:
                if key in FIGURE_METHODS and key not in records and available(key):
                    print(f"[{experiment}] {key} ...", flush=True)
                    records[key] = runner(key, args)
                    print(f"[{experiment}] {key} done in {records[key]['wall_s']:.0f} s", flush=True)
                    save(path, records)
        if records:
            (plot_regression if experiment == "regression" else plot_classification)(
                records, figures / f"bnn_{experiment}.png")
    open_path = results / "open_category.json"
    open_rows = load(open_path) or []
    if "open_category" in experiments:
        for key in [k for k in keys if k in OPEN_METHODS]:
            if not available(key):
                continue
            for seed in range(args.seeds):
                if any(r["key"] == key and r["seed"] == seed for r in open_rows):
                    continue
                print(f"[open_category] {key} seed {seed} ...", flush=True)
                row = run_open_category(key, seed, args)
                open_rows.append(row)
                print(json.dumps(row), flush=True)
                save(open_path, open_rows)
    meta = {"date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine_summary(with_load=True),
            "lr": args.lr, "regression_steps": args.regression_steps, "classification_steps": args.classification_steps}
    body = render(load(results / "regression.json") or {}, load(results / "classification.json") or {}, open_rows, meta)
    if args.no_write or args.quick:
        print(body)
    else:
        replace_section(DOC, SECTION, body, doc_title="Reproduction of published results")
        print(f"wrote ## {SECTION} to {DOC}")


if __name__ == "__main__":
    main()
