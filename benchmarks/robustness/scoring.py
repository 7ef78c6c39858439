"""The suite's two error measures (issue 14) of draws against a reference's marginal means and sds.

    mean_error   = max_j |mean_j(draws) − mean_ref_j| / sd_ref_j          (bar: ≤ 0.15)
    log_sd_error = max_j |log(sd_j(draws) / sd_ref_j)|                   (bar: ≤ 0.25)

sd_j(draws) is the sample sd (ddof = 1). Draws with a non-finite value, or with zero spread in a coordinate
(collapsed particles), score inf on the measure they break.

Two spaces (issue 41): `score` measures draws in whatever coordinates it is given; `score_problem` scores a
problem's draws in the sampler's coordinates (what the expression's x is) and, through `Problem.constrain`, in the
model's own parameters (τ rather than log τ, θ rather than η), each against its reference
(`load_reference(name, space)`); a run passes only when both do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

MEAN_BAR = 0.15
LOG_SD_BAR = 0.25
REF_DIR = Path(__file__).resolve().parent / "references"


SPACES = ("sampler", "model")


def load_reference(name: str, space: str = "sampler") -> dict[str, Any]:
    """The stored reference of problem `name`. space "sampler": the whole JSON, whose top-level `mean`, `sd`,
    `param_names` (and for NUTS `mcse_mean`, `rhat`, `ess_bulk`, ...) are in the sampler's coordinates. space
    "model": the JSON's `model` block (`mean`, `sd`, `names`, and for NUTS its `mcse_mean`, `rhat`, `ess_bulk`,
    `max_rhat`, `min_ess_bulk`), with `param_names` (= its `names`), `name`, `dim` and `kind` added."""
    if space not in SPACES:
        raise ValueError(f"space must be one of {SPACES}, got {space!r}")
    reference = json.loads((REF_DIR / f"{name}.json").read_text())
    if space == "sampler":
        return reference
    if "model" not in reference:
        raise KeyError(f"the reference of {name} has no model block; rerun make_references.py --only {name} --force")
    model = reference["model"]
    return {**model, "name": reference["name"], "dim": reference["dim"], "kind": model.get("kind", reference["kind"]),
            "param_names": model["names"]}


def load_draws(name: str) -> np.ndarray:
    """The NUTS reference's stored draws of problem `name`, float32 [chains, m, dim] in the sampler's coordinates
    (every `draws_file.thin`-th draw of the run; see make_references.py)."""
    reference = load_reference(name)
    entry = reference.get("draws_file")
    if entry is None:
        raise KeyError(f"the reference of {name} stores no draws (kind {reference['kind']!r})")
    with np.load(REF_DIR / entry["path"]) as stored:
        return stored[entry["key"]]


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


def score_problem(problem: Any, draws: np.ndarray) -> dict[str, Any]:
    """Score draws [n, problem.dim] (sampler's coordinates) of a suite problem in both spaces:
    {"sampler": score(...), "model": score(...), "pass": both pass, "mean_error" / "log_sd_error": the worse
    of the two spaces, "worst_mean_param" / "worst_sd_param": where that is, as "sampler:NAME" or "model:NAME",
    "nonfinite": True when either space has a non-finite draw}. Each space is scored on its own scored
    coordinates (`problem.scored` and `problem.scored_in_model`)."""
    draws = np.asarray(draws, dtype=np.float64)
    if draws.ndim != 2 or draws.shape[1] != problem.dim:
        raise ValueError(f"draws must be [n, {problem.dim}], got {list(draws.shape)}")
    sampler_ref, model_ref = load_reference(problem.name), load_reference(problem.name, "model")
    out: dict[str, Any] = {
        "sampler": score(draws, sampler_ref["mean"], sampler_ref["sd"], problem.param_names, problem.scored),
        "model": score(problem.constrain(draws), model_ref["mean"], model_ref["sd"], problem.model_names,
                       problem.scored_in_model),
    }
    for measure, where in (("mean_error", "worst_mean_param"), ("log_sd_error", "worst_sd_param")):
        space = max(SPACES, key=lambda k: out[k][measure])
        out[measure] = out[space][measure]
        out[where] = None if out[space][where] is None else f"{space}:{out[space][where]}"
    out["pass"] = bool(out["sampler"]["pass"] and out["model"]["pass"])
    if out["sampler"].get("nonfinite") or out["model"].get("nonfinite"):
        out["nonfinite"] = True
    return out
