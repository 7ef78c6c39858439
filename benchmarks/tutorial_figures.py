"""Run docs/tutorial.md's Python blocks against a service, then draw its figures and save its numbers.

    python benchmarks/tutorial_figures.py [--url http://127.0.0.1:8000]

Without `--url` an embedded service (API + one worker, SQLite, filesystem queue; as `parvis serve`) is started in
a temporary folder and stopped afterwards. The tutorial's blocks run in order in one namespace, exactly as a
reader would paste them (their `URL` comes from `PARVIS_URL`, set here), so the figures and numbers are those of
the tutorial's own code. Writes docs/figures/tutorial_banana.png, docs/figures/tutorial_bnn.png and
benchmarks/results/tutorial.json. A few minutes on a CPU.

The banana's contours are its highest-density regions, exact: ψ(x) = (x1, x2 − b(x1² − σ²)) maps the banana to
N(0, diag(σ², 1)) with unit Jacobian, so the region holding mass α is {x : (x1/σ)² + ψ2(x)² ≤ −2 log(1 − α)}.
The share of a method's draws inside each region is compared with α (the coverage columns of the JSON).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TUTORIAL = ROOT / "docs" / "tutorial.md"
FIGURES = ROOT / "docs" / "figures"
RESULTS = ROOT / "benchmarks" / "results" / "tutorial.json"
HDR_LEVELS = (0.5, 0.9, 0.99)
GAP = 1.5  # the BNN data leave out |x| < 1.5


def python_blocks(path: Path = TUTORIAL, fence: str = "python") -> list[str]:
    """The fenced blocks of a Markdown file whose info string is `fence`, in order. The tutorial fences its
    HTTP steps `python` (they need only httpx and numpy, and this script runs them) and the `parvis` client's
    version of them `py` (tests/integration/test_tutorial.py runs it where the client is installed)."""
    return re.findall(rf"^```{fence}\n(.*?)^```", path.read_text(), flags=re.MULTILINE | re.DOTALL)


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_tutorial(url: str, path: Path = TUTORIAL) -> dict[str, Any]:
    """Execute the tutorial's blocks against `url` in one namespace and return it."""
    namespace: dict[str, Any] = {"__name__": "tutorial"}
    with environment(PARVIS_URL=url):
        for index, block in enumerate(python_blocks(path)):
            exec(compile(block, f"{path.name}, python block {index + 1}", "exec"), namespace)  # noqa: S102
    namespace["api"].close()
    return namespace


# ------------------------------------------------------------------------------------------------ banana


def banana_mahalanobis(x: np.ndarray, scale: float, curvature: float) -> np.ndarray:
    """(x1/σ)² + (x2 − b(x1² − σ²))²: chi-square with 2 degrees of freedom under the banana."""
    untwisted = x[..., 1] - curvature * (x[..., 0] ** 2 - scale**2)
    return (x[..., 0] / scale) ** 2 + untwisted**2


def hdr_coverage(draws: np.ndarray, scale: float, curvature: float) -> dict[str, float]:
    """Share of the draws inside the exact highest-density regions of mass α (≈ α for exact draws)."""
    distance = banana_mahalanobis(draws, scale, curvature)
    return {f"{level:g}": round(float(np.mean(distance <= -2 * np.log1p(-level))), 3) for level in HDR_LEVELS}


def plot_banana(ns: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    scale, curvature = ns["banana"]["scale"], ns["banana"]["curvature"]
    x1, x2 = np.meshgrid(np.linspace(-34, 34, 400), np.linspace(-9, 32, 400))
    distance = banana_mahalanobis(np.stack([x1, x2], -1), scale, curvature)
    levels = [-2 * np.log1p(-level) for level in HDR_LEVELS]
    panels = [("svgd", ns["svgd_draws"], f"SVGD: the job's {len(ns['svgd_draws'])} particles"),
              ("gpvi", ns["gpvi_draws"], f"GPVI: {len(ns['gpvi_draws'])} fresh draws of its sampler")]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4), sharex=True, sharey=True)
    for ax, (name, draws, title) in zip(axes, panels, strict=True):
        contours = ax.contour(x1, x2, distance, levels=levels, colors="0.35", linewidths=1)
        ax.clabel(contours, fmt={lv: f"{a:.0%}" for lv, a in zip(levels, HDR_LEVELS, strict=True)}, fontsize=8)
        few = len(draws) < 500  # SVGD's few particles drawn larger than GPVI's many draws
        ax.scatter(draws[:, 0], draws[:, 1], s=10 if few else 4, alpha=0.8 if few else 0.45,
                   color="C0" if name == "svgd" else "C3", linewidths=0)
        ax.set_title(title, fontsize=11)
        ax.set_xlabel("x1")
    axes[0].set_ylabel("x2")
    fig.suptitle("banana (scale 10, curvature 0.03): contours hold 50 / 90 / 99 % of the mass", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------------------------------- bnn


def bnn_summary(ns: dict[str, Any]) -> dict[str, Any]:
    """Epistemic sd in the gap, over the data and beyond them; how well the mean fits the noiseless curve."""
    grid, x = ns["grid"], ns["x"]
    regions = {"gap |x| < 1.5": np.abs(grid) < GAP,
               "data": (np.abs(grid) >= GAP) & (np.abs(grid) <= np.abs(x).max()),
               "beyond |x| > 4": np.abs(grid) > np.abs(x).max()}
    truth = np.sin(grid) + 0.1 * grid
    out = {}
    for method, answer in ns["predictions"].items():
        epistemic, mean = np.asarray(answer["std_epistemic"]), np.asarray(answer["mean"])
        out[method] = {"mean_epistemic_sd": {name: round(float(epistemic[mask].mean()), 3)
                                             for name, mask in regions.items()},
                       "rmse_to_curve_over_data": round(float(np.sqrt(np.mean((mean - truth)[regions["data"]] ** 2))),
                                                        3)}
    return out


def plot_bnn(ns: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    grid, x, y = ns["grid"], ns["x"], ns["y"]
    fig, axes = plt.subplots(1, len(ns["predictions"]), figsize=(11, 4.6), sharey=True)
    for ax, (method, answer) in zip(axes, ns["predictions"].items(), strict=True):
        mean, epistemic = np.asarray(answer["mean"]), np.asarray(answer["std_epistemic"])
        levels, quantiles = answer["quantile_levels"], np.asarray(answer["quantiles"])
        low, high = quantiles[levels.index(0.05)], quantiles[levels.index(0.95)]
        ax.fill_between(grid, low, high, color="C0", alpha=0.18, label="predictive 5-95 %")
        ax.fill_between(grid, mean - 2 * epistemic, mean + 2 * epistemic, color="C0", alpha=0.35,
                        label="mean ± 2 epistemic sd")
        ax.plot(grid, mean, color="C0", label="predictive mean")
        ax.plot(grid, np.sin(grid) + 0.1 * grid, "k--", linewidth=1, label="sin x + 0.1 x")
        ax.scatter(x, y, s=12, color="k", zorder=3, label="data")
        ax.set_title(f"{method}: {answer['n_draws']} networks", fontsize=11)
        ax.set_xlabel("x")
    axes[0].set_ylabel("y")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=5, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -------------------------------------------------------------------------------------------------- main


def summarise(ns: dict[str, Any], wall_s: float) -> dict[str, Any]:
    scale, curvature = ns["banana"]["scale"], ns["banana"]["curvature"]
    banana = {name: {**row, "hdr_coverage": hdr_coverage(ns[f"{name}_draws"], scale, curvature)}
              for name, row in ns["comparison"].items()}
    from benchmarks._timing import machine_summary

    return {"machine": machine_summary(with_load=True), "tutorial_wall_s": round(wall_s, 1),
            "banana": banana, "bnn": bnn_summary(ns)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running service (default: start an embedded one)")
    parser.add_argument("--figures", type=Path, default=FIGURES)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()

    started = time.perf_counter()
    if args.url:
        ns = run_tutorial(args.url)
    else:
        from tests.support.stack import started_embedded

        with tempfile.TemporaryDirectory() as tmp, started_embedded(Path(tmp)) as stack:
            ns = run_tutorial(stack.base_url)
    results = summarise(ns, time.perf_counter() - started)
    args.figures.mkdir(parents=True, exist_ok=True)
    plot_banana(ns, args.figures / "tutorial_banana.png")
    plot_bnn(ns, args.figures / "tutorial_bnn.png")
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
