"""`/sample` with `return` (log q, log weights) and `correct` (PSIS resampling, IMH): sampler certificates,
issue 16 (`inference_core.samplers.certificate`), computed in the API's compute pool.

Log weights need the job's target. It is rebuilt here, in the API process, from the job's stored target spec
with `inference_core.targets.build_target` in float64 (never the training code), and kept in a small LRU
(`TargetCache`, keyed by the spec's sha256) so a burst of requests builds it once. Data targets over a
built-in or inline data set are rebuilt the same way; targets over an uploaded data set (`ds_…`) are not:
the API process does not read uploaded data into memory per target, and their full-data log-likelihood
for every proposal is the worker's kind of work. For them `/sample` answers 422 `log_weights_unavailable`,
and the quality report stored with the sampler (computed by the worker with the data) carries the
importance diagnostics. A cost guard keeps a request's target work bounded: proposals × data rows ≤
`MAX_WEIGHT_ROW_EVALUATIONS`, else 413 `limit_exceeded`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from app.api.problems import Problem
from app.api.sampler_cache import SamplerCache
from app.api.sampling import one_intra_op_thread

#: Targets kept built in the API process (each holds at most its data set, bounded by the upload limits)
TARGET_CACHE_SIZE = 8
#: proposals × data rows of one request's log p̃ evaluations
MAX_WEIGHT_ROW_EVALUATIONS = 2**26
#: proposals per returned draw, most (`proposals` in the request)
MAX_PROPOSALS_PER_DRAW = 100
#: multiply-adds of one request's Jacobian tangents, most: draws × k × Σ_l (width_{l−1} · width_l) (about 2 s
#: of one CPU core in float64)
MAX_JACOBIAN_WORK = 2**34


class TargetCache(SamplerCache):
    """The same single-flight LRU as the generators', holding float64 targets."""


def target_key(spec: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def build_float64_target(spec: dict[str, Any]) -> Any:
    """The job's target in float64 on the CPU; 422 `log_weights_unavailable` when it cannot be rebuilt here."""
    import torch

    from inference_core import errors
    from inference_core.datasets.resolve import is_dataset_id
    from inference_core.targets import BuildContext, build_target

    dataset = spec.get("dataset")
    if isinstance(dataset, str) and is_dataset_id(dataset):
        raise Problem(422, "log_weights_unavailable", "this sampler's target is over an uploaded data set: log "
                      "weights and corrections are not computed in the API (see the sampler's `quality`, "
                      "computed by the worker with the data)")
    try:
        return build_target(spec, BuildContext(dtype=torch.float64))
    except (errors.InferenceError, ValueError) as exc:  # ValueError: pydantic's, for a spec no longer valid
        raise Problem(422, "log_weights_unavailable", f"this sampler's target cannot be rebuilt: {exc}") from None


def check_weight_cost(target: Any, proposals: int) -> None:
    rows = int(getattr(target, "n_data", 1) or 1)
    if proposals * rows > MAX_WEIGHT_ROW_EVALUATIONS:
        raise Problem(413, "limit_exceeded", f"{proposals} proposals × {rows} data rows is over the cap of "
                      f"{MAX_WEIGHT_ROW_EVALUATIONS} log-likelihood row evaluations per request; ask for fewer draws")


def check_jacobian_work(generator: Any, draws: int) -> None:
    """413 `limit_exceeded` before any work when the log-determinants of `draws` draws would cost more than
    MAX_JACOBIAN_WORK multiply-adds (forward-mode tangents: k rows through every hidden layer)."""
    structure = generator.config.get("generator", {})
    k = int(structure.get("input_dim", 0))
    widths = [k, *(int(w) for w in structure.get("hidden", [])), k]
    work = draws * k * sum(a * b for a, b in zip(widths[:-1], widths[1:], strict=True))
    if work > MAX_JACOBIAN_WORK:
        raise Problem(413, "limit_exceeded", f"the exact log q of {draws} draws of this generator costs about "
                      f"{work:.3g} multiply-adds, over the cap of {MAX_JACOBIAN_WORK:.3g} per request; ask for fewer "
                      "draws or proposals")


def certified_draw(generator: Any, target: Any | None, n: int, seed: int, returns: list[str],
                   correct: str | None, proposals: int | None) -> tuple[np.ndarray, dict[str, Any]]:
    """(draws [n, d] float32, extra JSON fields): `log_q` / `log_weights` per returned draw, `density`
    ("exact" or "branch": the generator folds among these draws), `correction` diagnostics."""
    from inference_core.samplers.certificate import (
        PROPOSALS_PER_DRAW,
        corrected_draws,
        draws_with_density,
        importance_draws,
    )
    from inference_core.samplers.density import DensityUnavailable

    one_intra_op_thread()
    if hasattr(generator, "density"):
        check_jacobian_work(generator, (proposals or PROPOSALS_PER_DRAW * n) if correct is not None else n)
    try:
        if correct is not None:
            check_weight_cost(target, proposals or PROPOSALS_PER_DRAW * n)
            weighted = corrected_draws(generator, target, n, seed, correct, proposals)
        elif "log_weights" in returns:
            check_weight_cost(target, n)
            weighted = importance_draws(generator, target, n, seed)
        else:
            draws, density = draws_with_density(generator, n, seed)
            return draws.numpy(), {"density": "branch" if density.folded else "exact",
                                   "log_q": density.log_q.numpy()}
    except DensityUnavailable as exc:
        raise Problem(422, "density_unavailable", str(exc)) from None
    extra: dict[str, Any] = {}
    extra["density"] = "branch" if weighted.info.get("folded") else "exact"
    if "log_q" in returns:
        extra["log_q"] = weighted.log_q
    if "log_weights" in returns:
        extra["log_weights"] = weighted.log_weights
    if correct is not None:
        extra["correction"] = {key: value for key, value in weighted.info.items() if key != "folded"}
    return weighted.draws.numpy(), extra
