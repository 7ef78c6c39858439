"""POST /v1/targets/validate: compile a target and evaluate it at given points (a debugging aid).

This is the one job-free route that runs target code in the API process (torch is imported on first use);
the expression language is compiled from an allow-listed tree, so nothing a client sends is executed.

The target is evaluated in float64 (`log_prob`, `score`, `finite`) and again in the dtype the job would use
(`dtype`: the request's, else `options.dtype`, else the method's default, else float32), because a target
finite in float64 can overflow or underflow in float32 and fail the job at start with `target_nonfinite`
(issue 14). Differences come back as `warnings` with stable codes (docs/api.md, "Validating a target").
"""

from __future__ import annotations

import math
from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.api.deps import CurrentTenant, SessionDep, SettingsDep, StoreDep
from app.api.problems import Problem
from app.api.routes.jobs import check_dataset_refs, limits_from
from inference_core import errors
from inference_core.catalog import METHODS
from inference_core.spec import parse_target_spec
from service.datasets import dataset_loader

router = APIRouter(prefix="/v1/targets", tags=["targets"])


Dtype = Literal["float32", "float64"]
DTYPE_RTOL: dict[str, float] = {"float32": 1e-3, "float64": 0.0}
"""`dtype_mismatch` when |v_dtype − v_float64| > rtol·(1 + |v_float64|) for log p, or the same with max-norms
for a point's score (float32's eps is 1.2e-7: 1e-3 leaves room for rounding summed over ~10⁴ terms)."""
MAX_LISTED = 10  # points named in a warning's message (all are in its `points`)


class ValidateRequest(BaseModel):
    model_config = ConfigDict(strict=True)  # "1.5" or true is not a number (issue 15)

    target: dict[str, Any]
    points: list[list[float]] = Field(min_length=1)
    dtype: Dtype | None = Field(default=None, description="the job's dtype; default: options.dtype, then the "
                                "method's default, then float32")
    method: str | None = Field(default=None, min_length=1, max_length=64,
                               description="the job's method: its options fix the default dtype")
    options: dict[str, Any] | None = Field(default=None, description="the job's method options")


class ValidateWarning(BaseModel):
    code: str = Field(description="nonfinite_in_dtype | dtype_mismatch")
    message: str
    points: list[int] = Field(default_factory=list, description="indices of the points concerned")


class ParameterBlockOut(BaseModel):
    name: str
    shape: list[int]
    offset: int


class ValidateResponse(BaseModel):
    kind: str
    dim: int
    log_prob: list[float | None]
    score: list[list[float | None]]
    finite: bool
    layout: list[ParameterBlockOut] | None = None
    dtype: Dtype = "float32"
    finite_in_dtype: bool = True
    log_prob_in_dtype: list[float | None] = Field(default_factory=list)
    warnings: list[ValidateWarning] = Field(default_factory=list)


def json_floats(values: list) -> list:
    """NaN/inf → null (JSON has neither); `finite` says whether any were replaced."""
    if values and isinstance(values[0], list):
        return [json_floats(row) for row in values]
    return [v if math.isfinite(v) else None for v in values]


# A sync route: FastAPI runs it in the thread pool, so parsing and compiling the target (up to the expression
# and params caps: ~0.2 s of CPU) never blocks the event loop and every other request on it.
@router.post("/validate", response_model=ValidateResponse)
def validate_target(body: ValidateRequest, request: Request, session: SessionDep, tenant: CurrentTenant,
                    settings: SettingsDep, store: StoreDep) -> ValidateResponse:
    if len(body.points) > settings.max_validate_points:
        raise Problem(413, "payload_too_large",
                      f"at most {settings.max_validate_points} points per request, got {len(body.points)}")
    target_spec = parse_target_spec(body.target, limits_from(settings))
    raw_target = target_spec.model_dump(mode="json")
    check_dataset_refs(session, tenant, raw_target, settings)
    dtype = job_dtype(body, raw_target["kind"])
    loader = dataset_loader(request.app.state.session_factory, store, tenant)
    session.close()  # no pooled connection held while the target is built and evaluated (the loader has its own)
    return _evaluate(raw_target, body.points, loader, dtype)


def job_dtype(body: ValidateRequest, target_kind: str) -> Dtype:
    """The dtype the job would build its target in (training.build_method): the request's `dtype`, else
    `options.dtype`, else the method's default option, else float32. Method and options are checked as a job's."""
    explicit = (body.options or {}).get("dtype")
    if explicit is not None and explicit not in DTYPE_RTOL:
        raise errors.MethodOptionsInvalid("options.dtype: must be 'float32' or 'float64'", loc=("options", "dtype"))
    if body.dtype is not None and explicit is not None and body.dtype != explicit:
        raise errors.SpecInvalid(f"dtype {body.dtype!r} contradicts options.dtype {explicit!r}", loc=("dtype",))
    if body.method is None:
        return body.dtype or explicit or "float32"
    method = METHODS.get(body.method)
    if method is None:
        raise errors.MethodUnknown(f"unknown method {body.method!r}; known: {', '.join(sorted(METHODS))}",
                                   loc=("method",))
    if target_kind not in method.target_kinds:
        raise errors.MethodUnsupportedForTarget(
            f"method {method.name!r} does not accept target kind {target_kind!r}", loc=("method",))
    try:
        options = method.schema.model_validate(body.options or {})
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in ("options", *first["loc"]))
        raise errors.MethodOptionsInvalid(f"{where}: {first['msg']}", loc=("options", *first["loc"])) from None
    return body.dtype or getattr(options, "dtype", "float32")


def _evaluate(raw_target: dict[str, Any], points: list[list[float]], loader: Any, dtype: Dtype) -> ValidateResponse:
    import torch

    from inference_core.targets import BuildContext, build_target

    target = build_target(raw_target, BuildContext(dtype=torch.float64, load_dataset=loader))
    widths = {len(row) for row in points}
    if widths != {target.dim}:
        raise Problem(422, "points_invalid",
                      f"every point needs {target.dim} coordinates (the target's dimension); got {sorted(widths)}")
    log_prob, score = _log_prob_and_score(target, torch.tensor(points, dtype=torch.float64))
    finite = bool(torch.isfinite(log_prob).all() and torch.isfinite(score).all())
    if dtype == "float64":
        log_prob_d, score_d, warnings = log_prob, score, []
    else:
        job_target = build_target(raw_target, BuildContext(dtype=getattr(torch, dtype), load_dataset=loader))
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


def _log_prob_and_score(target: Any, x: Any) -> tuple[Any, Any]:
    try:
        return target.log_prob(x).detach(), target.score(x).detach()
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
