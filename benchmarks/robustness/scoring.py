"""The suite's two error measures (issue 14) of draws against a reference's marginal means and sds.

    mean_error   = max_j |mean_j(draws) − mean_ref_j| / sd_ref_j          (bar: ≤ 0.15)
    log_sd_error = max_j |log(sd_j(draws) / sd_ref_j)|                   (bar: ≤ 0.25)

sd_j(draws) is the sample sd (ddof = 1). Draws with a non-finite value, or with zero spread in a coordinate
(collapsed particles), score inf on the measure they break.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

MEAN_BAR = 0.15
LOG_SD_BAR = 0.25
REF_DIR = Path(__file__).resolve().parent / "references"


def load_reference(name: str) -> dict[str, Any]:
    return json.loads((REF_DIR / f"{name}.json").read_text())


def score(draws: np.ndarray, ref_mean: Any, ref_sd: Any, param_names: list[str] | None = None,
          scored: Any = None) -> dict[str, Any]:
    """{"mean_error", "log_sd_error", "worst_mean_param", "worst_sd_param", "pass"} of draws [n, d], the maxima
    taken over the coordinates `scored` (all when None)."""
    draws = np.asarray(draws, dtype=np.float64)
    ref_mean, ref_sd = np.asarray(ref_mean, dtype=np.float64), np.asarray(ref_sd, dtype=np.float64)
    if draws.ndim != 2 or draws.shape[1] != ref_mean.shape[0] or draws.shape[0] < 2:
        raise ValueError(f"draws must be [n >= 2, {ref_mean.shape[0]}], got {list(draws.shape)}")
    names = param_names or [str(j) for j in range(draws.shape[1])]
    if not np.isfinite(draws).all():
        return {"mean_error": float("inf"), "log_sd_error": float("inf"), "worst_mean_param": None,
                "worst_sd_param": None, "pass": False, "nonfinite": True}
    index = np.arange(draws.shape[1]) if scored is None else np.asarray(scored, dtype=int)
    draws, ref_mean, ref_sd, names = draws[:, index], ref_mean[index], ref_sd[index], [names[j] for j in index]
    mean_err = np.abs(draws.mean(0) - ref_mean) / ref_sd
    with np.errstate(divide="ignore"):
        sd_err = np.abs(np.log(draws.std(0, ddof=1) / ref_sd))
    mean_error, log_sd_error = float(mean_err.max()), float(sd_err.max())
    return {"mean_error": mean_error, "log_sd_error": log_sd_error,
            "worst_mean_param": names[int(mean_err.argmax())], "worst_sd_param": names[int(sd_err.argmax())],
            "pass": mean_error <= MEAN_BAR and log_sd_error <= LOG_SD_BAR}
