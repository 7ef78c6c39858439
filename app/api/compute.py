"""Where the API computes, and the one API module that calls torch or the core's torch code: `/sample` draws
and their certificates, `/predict` answers, `/targets/validate`'s evaluations and `/density`'s grids. All of it
runs in a bounded thread pool (`ComputePool.run`), so CPU work never runs on the event loop nor in the request
threadpool that polls need, and at most `sample_concurrency` of them run at once (the rest wait in the pool's
queue, holding no thread and no database connection). Every import of torch or of the core's torch modules is
inside a function here: the API process loads them in the pool's start-up warm-up, never at import
(tests/unit/test_layering.py).

Certificates (`/sample` with `return` and `correct`, issue 16, `inference_core.samplers.certificate`) need the
job's target. It is rebuilt here from the job's stored target spec with `build_target` in float64 (never the
training code), and kept in a small LRU (`TargetCache`, keyed by the spec's sha256) so a burst of requests builds
it once. Targets over an uploaded data set (`ds_…`) are not rebuilt for them: the API process does not read
uploaded data into memory per target, and their full-data log-likelihood for every proposal is the worker's
kind of work: `/sample` answers 422 `log_weights_unavailable`, and the quality report stored with the sampler
(computed by the worker with the data) carries the importance diagnostics. A cost guard keeps a request's target
work bounded: proposals × data rows ≤ `MAX_WEIGHT_ROW_EVALUATIONS`, else 413 `limit_exceeded`.

`.npy` answers are streamed (negotiation.array_response). The draws themselves are computed in one call:
pushing the noise through the network in row chunks changes float32 matmul rounding (measured: up to 6e-5
at d = 1000), and draws must stay bit-identical to `inference_core.samplers` for the same (n, seed)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import numpy as np
import orjson

from app.api.problems import Problem
from app.api.sampler_cache import SamplerCache
from app.api.schemas import DensityGrid, ParameterBlockOut, ValidateResponse, ValidateWarning

logger = logging.getLogger("parvis.api")
T = TypeVar("T")

#: Bytes per value of each answer format, for the `max_sample_bytes` estimate before any work. JSON writes a
#: float32 widened to float64 as up to ~20 characters with its separator.
BYTES_PER_VALUE = {"npy": 4, "json": 20}


@dataclass(frozen=True)
class EvaluationBudget:
    """What one request's target evaluations and density computations may take (service.settings:
    `request_memory_bytes`, `max_evaluation_values`)."""

    memory_bytes: int
    max_values: int

    @classmethod
    def of(cls, settings: Any) -> EvaluationBudget:
        return cls(settings.request_memory_bytes, settings.max_evaluation_values)


def bounded(target: Any, points: int, budget: EvaluationBudget, what: str) -> Any:
    """The target evaluated in chunks within the memory budget (inference_core.targets.bounded), once its work
    (points × data rows × values a row) is checked against the cap: 413 `limit_exceeded` up front."""
    from inference_core.targets.bounded import VALUES_PER_DIMENSION, Bounded

    rows = int(getattr(target, "n_data", 1) or 1)
    per_row = int(getattr(target, "values_per_row", 0) or VALUES_PER_DIMENSION * target.dim)
    work = points * rows * per_row
    if work > budget.max_values:
        raise Problem(413, "limit_exceeded", f"{what}: {points} points × {rows} data rows × {per_row} values a row "
                      f"is {work:.3g} values to compute, over the cap of {budget.max_values:.3g} per request "
                      "(PARVIS_MAX_EVALUATION_VALUES); ask for fewer points")
    return Bounded(target, budget.memory_bytes)


def default_concurrency() -> int:
    return 2 * (os.cpu_count() or 1)


def unmap_large_frees() -> bool:
    """Give large freed blocks back to the OS at once (glibc only; False elsewhere). glibc raises its mmap
    threshold each time a large block is freed (up to 32 MiB), after which blocks that size come from per-thread
    heaps that are not returned: measured, one density request with a 64 MiB budget left its pool thread 500 MB
    larger, and four threads four times that. A fixed 1 MiB threshold maps every large tensor on its own."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, 1 << 20))
    except (OSError, AttributeError):
        return False


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number


class ComputePool:
    """A fixed-size thread pool for CPU work of the API; `warm` is set once torch and the samplers module
    are imported (readiness reports it)."""

    #: the backlog a cold start admitted drains before a call's wait for a thread is bounded (as the handler slots')
    ARM_AFTER_WARM_S = 2.0

    def __init__(self, workers: int, queue_limit: int | None = None, max_wait: float = 0.0):
        unmap_large_frees()
        self.workers = max(1, workers)
        self.queue_limit = 16 * self.workers if queue_limit is None else max(0, queue_limit)
        self.max_wait = max(0.0, max_wait)
        self.executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="parvis-compute")
        self.warm = threading.Event()
        self.warm_error: str | None = None
        self.warm_at: float | None = None  # time.monotonic() when the warm-up ended
        self.pending = 0  # submitted by `run` and not finished: running (at most `workers`) or queued
        self._lock = threading.Lock()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """fn(*args) in the pool; 503 `overloaded` at once when `queue_limit` calls already wait for a thread,
        and, for a call submitted once the pool has been warm ARM_AFTER_WARM_S, when it waited more than `max_wait`
        seconds for its thread: it is refused then instead of run (shed, not queued: a refusal now beats an answer in a
        minute; the wait is checked where the thread picks the call up, so no call is refused that could still
        start in time)."""
        with self._lock:
            if self.pending >= self.workers + self.queue_limit:
                raise Problem(503, "overloaded", f"the compute pool is full ({self.workers} running, "
                              f"{self.queue_limit} waiting); retry shortly", headers={"Retry-After": "1"})
            self.pending += 1
        future = self.executor.submit(self._started_in_time, time.monotonic(), fn, *args)
        future.add_done_callback(self._done)
        return await asyncio.wrap_future(future)

    def _started_in_time(self, submitted: float, fn: Callable[..., T], *args: Any) -> T:
        waited = time.monotonic() - submitted
        # a call submitted while the pool was cold, or within ARM_AFTER_WARM_S of its warm-up, is the cold start's
        # backlog: it runs however long it waited
        armed = self.warm_at is not None and submitted - self.warm_at >= self.ARM_AFTER_WARM_S
        if self.max_wait > 0 and armed and waited > self.max_wait:
            raise Problem(503, "overloaded", f"this call waited {waited * 1e3:.0f} ms for a compute thread, over the "
                          f"bound of {self.max_wait * 1e3:.0f} ms; retry shortly", headers={"Retry-After": "1"})
        return fn(*args)

    def _done(self, _: Any) -> None:
        with self._lock:
            self.pending -= 1

    def start_warm_up(self) -> None:
        self.executor.submit(self._warm_up)

    def _warm_up(self) -> None:
        try:
            import torch

            import inference_core.samplers  # noqa: F401 - the import is the warm-up

            # Parallelism comes from concurrent requests; one intra-op thread each keeps them from
            # oversubscribing the cores (and the polls' threads) under load.
            torch.set_num_threads(1)
        except Exception as exc:  # noqa: BLE001 - readiness reports it; /sample would raise it again
            self.warm_error = f"{type(exc).__name__}: {exc}"
            logger.exception("warm-up failed")
        finally:
            self.warm_at = time.monotonic()
            self.warm.set()

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


def values_per_draw(config: dict[str, Any], x: list[list[float]] | None) -> int:
    """Numbers one draw contributes to the answer: the output dimension, or len(x) for function samplers."""
    if x is not None:
        return len(x)
    generator = config.get("generator", {})
    return int(generator.get("output_dim", config.get("target", {}).get("dim", 0)) or 0)


def one_intra_op_thread() -> None:
    """One torch intra-op thread for the calling thread (per thread under OpenMP, so every thread that computes
    calls this first): parallelism comes from concurrent requests, and an answer must not depend on how many
    threads happened to split its matmuls (float32 rounding differs, and /sample and /predict are seeded and
    bit-identical)."""
    import torch

    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def draw(generator: Any, n: int, seed: int, x: list[list[float]] | None) -> np.ndarray:
    one_intra_op_thread()
    values = generator.sample(n, seed) if x is None else generator.sample(n, seed, x)
    return values.numpy()


# --- /sample with `return` and `correct`: certificates ---

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


def generator_widths(config: dict[str, Any]) -> tuple[int, list[int]]:
    """(k, the layer widths k → hidden → output) of a stored generator's config."""
    structure = config.get("generator", {})
    k = int(structure.get("input_dim", 0)) or 1
    return k, [k, *(int(w) for w in structure.get("hidden", [])), int(structure.get("output_dim", 0)) or 1]


def draw_bytes(config: dict[str, Any]) -> int:
    """Bytes one draw of a stored generator takes to compute: its noise, every layer's activations and its output
    in float32, twice (the temporaries beside them)."""
    k, widths = generator_widths(config)
    return (int(config.get("generator", {}).get("noise_dim", 0) or k) + sum(widths)) * 4 * 2


def density_chunk(generator: Any, draws: int, budget: EvaluationBudget) -> int:
    """Draws whose exact log q is computed at once within the budget (forward-mode tangents: k × the widest
    layer per draw, float64, a few copies); 413 `limit_exceeded` up front when the draws themselves (noise,
    activations and outputs in float32, computed in one call for bit-identical draws) are over the budget."""
    k, widths = generator_widths(generator.config)
    per_draw = draw_bytes(generator.config)
    if draws * per_draw > budget.memory_bytes:
        raise Problem(413, "limit_exceeded", f"{draws} draws of this generator take about {draws * per_draw} bytes "
                      f"to compute, over the request memory budget of {budget.memory_bytes} bytes "
                      "(PARVIS_REQUEST_MEMORY_BYTES); ask for fewer draws or proposals")
    return max(1, budget.memory_bytes // (k * max(widths) * 8 * 3))


def certified_draw(generator: Any, target: Any | None, n: int, seed: int, returns: list[str],
                   correct: str | None, proposals: int | None,
                   budget: EvaluationBudget) -> tuple[np.ndarray, dict[str, Any]]:
    """(draws [n, d] float32, extra JSON fields): `log_q` / `log_weights` per returned draw, `density`
    ("exact" or "branch": the generator folds among these draws), `correction` diagnostics. Within the
    request's budget: the draws' own memory is checked up front, their densities are computed in chunks, and
    the target is evaluated through `bounded`."""
    from inference_core.samplers.certificate import (
        PROPOSALS_PER_DRAW,
        corrected_draws,
        draws_with_density,
        importance_draws,
    )
    from inference_core.samplers.density import DensityUnavailable

    one_intra_op_thread()
    pool = (proposals or PROPOSALS_PER_DRAW * n) if correct is not None else n
    chunk = density_chunk(generator, pool, budget)
    if hasattr(generator, "density"):
        check_jacobian_work(generator, pool)
    try:
        if correct is not None:
            check_weight_cost(target, pool)
            weighted = corrected_draws(generator, bounded(target, pool, budget, "the proposals' log weights"), n,
                                       seed, correct, proposals, chunk)
        elif "log_weights" in returns:
            check_weight_cost(target, n)
            weighted = importance_draws(generator, bounded(target, n, budget, "the draws' log weights"), n, seed,
                                        chunk)
        else:
            draws, density = draws_with_density(generator, n, seed, chunk)
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


# --- /targets/validate ---

Dtype = Literal["float32", "float64"]
DTYPE_RTOL: dict[str, float] = {"float32": 1e-3, "float64": 0.0}
"""`dtype_mismatch` when |v_dtype − v_float64| > rtol·(1 + |v_float64|) for log p, or the same with max-norms
for a point's score (float32's eps is 1.2e-7: 1e-3 leaves room for rounding summed over ~10⁴ terms)."""
MAX_LISTED = 10  # points named in a warning's message (all are in its `points`)


def evaluate_target(raw_target: dict[str, Any], points: list[list[float]], loader: Any,
                    dtype: Dtype, budget: EvaluationBudget) -> ValidateResponse:
    """The target's log p and score at the points in float64, and again in the job's dtype (with warnings where
    they part), each within the request's budget (`bounded`)."""
    import torch

    from inference_core.targets import BuildContext, build_target

    one_intra_op_thread()
    target = build_target(raw_target, BuildContext(dtype=torch.float64, load_dataset=loader))
    target = bounded(target, 2 * len(points), budget, "the target at these points in float64 and the job's dtype")
    widths = {len(row) for row in points}
    if widths != {target.dim}:
        raise Problem(422, "points_invalid",
                      f"every point needs {target.dim} coordinates (the target's dimension); got {sorted(widths)}")
    log_prob, score = _log_prob_and_score(target, torch.tensor(points, dtype=torch.float64))
    finite = bool(torch.isfinite(log_prob).all() and torch.isfinite(score).all())
    if dtype == "float64":
        log_prob_d, score_d, warnings = log_prob, score, []
    else:
        job_target = bounded(build_target(raw_target, BuildContext(dtype=getattr(torch, dtype), load_dataset=loader)),
                             len(points), budget, "the target at these points")
        log_prob_d, score_d = _log_prob_and_score(job_target, torch.tensor(points, dtype=getattr(torch, dtype)))
        warnings = dtype_warnings(log_prob, score, log_prob_d.double(), score_d.double(), dtype)
    layout = getattr(target, "layout", None)
    return ValidateResponse(
        kind=raw_target["kind"],
        dim=target.dim,
        log_prob=json_floats(log_prob.tolist()),
        score=json_floats(score.tolist()),
        finite=finite,
        layout=[ParameterBlockOut(name=b.name, shape=list(b.shape), offset=b.offset) for b in layout]
        if layout else None,
        dtype=dtype,
        finite_in_dtype=bool(torch.isfinite(log_prob_d).all() and torch.isfinite(score_d).all()),
        log_prob_in_dtype=json_floats(log_prob_d.double().tolist()),
        warnings=warnings,
    )


def json_floats(values: list) -> list:
    """NaN/inf → null (JSON has neither); `finite` says whether any were replaced."""
    if values and isinstance(values[0], list):
        return [json_floats(row) for row in values]
    return [v if math.isfinite(v) else None for v in values]


def _log_prob_and_score(target: Any, x: Any) -> tuple[Any, Any]:
    try:
        log_prob, score = target.log_prob_and_score(x)
        return log_prob.detach(), score.detach()
    except NotImplementedError as exc:
        raise no_pointwise_density(exc) from None


def no_pointwise_density(exc: NotImplementedError) -> Problem:
    """422 `target_unsupported`: a target whose log-density cannot be evaluated at given points."""
    return Problem(422, "target_unsupported", f"this target has no pointwise log-density: {exc}")


def _listed(indices: list[int]) -> str:
    shown = ", ".join(str(i) for i in indices[:MAX_LISTED])
    return f"{shown}, ... ({len(indices)} in all)" if len(indices) > MAX_LISTED else shown


def dtype_warnings(log_prob: Any, score: Any, log_prob_d: Any, score_d: Any, dtype: str) -> list[ValidateWarning]:
    """`nonfinite_in_dtype`: points whose log p or score is finite in float64 but not in `dtype` (naming the
    score's coordinates); `dtype_mismatch`: finite in both but apart by more than DTYPE_RTOL (see there)."""
    import torch

    warnings = []
    lost_value = torch.isfinite(log_prob) & ~torch.isfinite(log_prob_d)
    lost_score = torch.isfinite(score) & ~torch.isfinite(score_d)
    lost = (lost_value | lost_score.any(-1)).nonzero().flatten().tolist()
    if lost:
        parts = []
        value_points = lost_value.nonzero().flatten().tolist()
        if value_points:
            parts.append(f"log p at points {_listed(value_points)}")
        for i in lost_score.any(-1).nonzero().flatten().tolist()[:MAX_LISTED]:
            parts.append(f"the score of point {i} at coordinates {_listed(lost_score[i].nonzero().flatten().tolist())}")
        warnings.append(ValidateWarning(
            code="nonfinite_in_dtype", points=lost,
            message=f"finite in float64 but not in {dtype} (the job's dtype; it would fail with target_nonfinite "
                    f"there): {'; '.join(parts)}. Rewrite the target (e.g. logsumexp/logaddexp, "
                    "log_normal instead of log(exp(...))) or run the job with options.dtype = 'float64'."))
    rtol = DTYPE_RTOL[dtype]
    both = torch.isfinite(log_prob) & torch.isfinite(log_prob_d) & torch.isfinite(score).all(-1) \
        & torch.isfinite(score_d).all(-1)
    value_off = (log_prob_d - log_prob).abs() > rtol * (1 + log_prob.abs())
    score_off = (score_d - score).abs().amax(-1) > rtol * (1 + score.abs().amax(-1))
    off = (both & (value_off | score_off)).nonzero().flatten().tolist()
    if off:
        worst = ((log_prob_d - log_prob).abs() / (1 + log_prob.abs()))[off].max().item()
        warnings.append(ValidateWarning(
            code="dtype_mismatch", points=off,
            message=f"log p or its score in {dtype} differs from float64 by more than rtol {rtol:g} "
                    f"(relative to 1 + |value|) at points {_listed(off)} (worst log p: {worst:.3g}); "
                    "look for cancellation between large terms"))
    return warnings


# --- /density ---

def density_unsupported(target_spec: dict[str, Any], dim: int) -> Problem:
    return Problem(422, "density_unsupported", f"the density grid is drawn for 2-D targets; this job's "
                   f"{target_spec.get('kind')} target has dimension {dim}")


def density_grid(job_id: str, target_spec: dict[str, Any], loader: Any,
                 bounds: tuple[float, float, float, float], grid: int, budget: EvaluationBudget) -> DensityGrid:
    """log p on a grid × grid mesh of a 2-D target, in float64, within the request's budget (`bounded`)."""
    import torch

    from inference_core.targets import BuildContext, build_target

    one_intra_op_thread()
    target = build_target(target_spec, BuildContext(dtype=torch.float64, load_dataset=loader))
    if target.dim != 2:  # a dimension that comes from an uploaded data set's shape
        raise density_unsupported(target_spec, target.dim)
    target = bounded(target, grid * grid, budget, f"the density on a {grid} × {grid} grid")
    x_min, x_max, y_min, y_max = bounds
    xs = torch.linspace(x_min, x_max, grid, dtype=torch.float64)
    ys = torch.linspace(y_min, y_max, grid, dtype=torch.float64)
    mesh_y, mesh_x = torch.meshgrid(ys, xs, indexing="ij")  # row i: y = ys[i]
    points = torch.stack([mesh_x.reshape(-1), mesh_y.reshape(-1)], dim=1)
    try:
        with torch.no_grad():
            values = target.log_prob(points).reshape(grid, grid)
    except NotImplementedError as exc:
        raise no_pointwise_density(exc) from None
    finite = torch.isfinite(values)
    peak = float(values[finite].max()) if bool(finite.any()) else None
    return DensityGrid(job_id=job_id, x=xs.tolist(), y=ys.tolist(), log_prob=json_floats(values.tolist()),
                       max_log_prob=peak)


# --- /predict ---

def predict_answer(cache: SamplerCache, key: str, load: Callable[[], Any], x: list[list[float]], n: int | None,
                   seed: int, quantiles: list[float] | None) -> bytes:
    """The JSON answer of a predictor (loaded once per `key` through the cache), with one intra-op thread like
    /sample's draws, so concurrent answers are bit-identical to a lone one."""
    from inference_core.prediction import PredictionUnsupported

    predictor = cache.get(f"predict:{key}", load)  # prefixed: /sample caches the Sampler under the bare sha256
    one_intra_op_thread()
    try:
        result = predictor.predict(x, n=n, seed=seed, quantiles=quantiles)
    except PredictionUnsupported as exc:
        raise Problem(422, "predict_unsupported", str(exc)) from None
    except ValueError as exc:
        raise Problem(422, "input_invalid", str(exc)) from None
    check_prediction_finite(result)
    return orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY)


#: The answer arrays of a prediction whose input rows run along the last axis (`quantiles` is [L, m]); the
#: others ([m], [m, K]) have them along the first.
_ROWS_LAST = frozenset({"quantiles"})


def check_prediction_finite(result: dict[str, Any]) -> None:
    """422 `output_nonfinite`, naming the input rows, when a prediction holds NaN or an infinity (inputs far
    outside the data's range overflow the network: `x = [[1e308]]`); JSON would carry them as null."""
    bad: set[int] = set()
    for key, value in result.items():
        if not isinstance(value, np.ndarray) or value.dtype.kind not in "fc" or value.ndim == 0:
            continue
        finite = np.isfinite(value)
        if finite.all():
            continue
        rows = np.moveaxis(finite, -1, 0) if key in _ROWS_LAST else finite
        bad.update(int(i) for i in np.flatnonzero(~rows.reshape(rows.shape[0], -1).all(axis=1)))
    if bad:
        rows = sorted(bad)
        shown = ", ".join(map(str, rows[:10])) + (f" and {len(rows) - 10} more" if len(rows) > 10 else "")
        raise Problem(422, "output_nonfinite", f"the prediction overflows (NaN or infinite) at input row(s) "
                      f"{shown} of x: inputs far outside the training data's range; send values of a "
                      "moderate size", extra={"loc": ["body", "x"], "rows": rows[:100]})


def sampler_predictor(blob: bytes) -> Any:
    """The predictive of a stored sampler zip (BNN hypernetwork, function-space sampler)."""
    from inference_core.prediction import predictor_from_sampler

    return predictor_from_sampler(load_sampler(blob))


def ensemble_predictor(blob: bytes) -> Any:
    """The predictive of a particle job's stored predictor zip."""
    from inference_core.prediction import load_ensemble

    return load_ensemble(blob)


def load_sampler(blob: bytes) -> Any:
    from inference_core.samplers import load

    return load(blob)


def spg_density_unavailable() -> Problem:
    """422 `density_unavailable`: function-space samplers have no density over parameters."""
    from inference_core.samplers.spg import DENSITY_UNAVAILABLE

    return Problem(422, "density_unavailable", DENSITY_UNAVAILABLE)
