"""POST /v1/targets/validate: compile a target and evaluate it at given points (a debugging aid).

This is the one job-free route that runs target code in the API process (torch is imported on first use);
the expression language is compiled from an allow-listed tree, so nothing a client sends is executed.

The target is evaluated in float64 (`log_prob`, `score`, `finite`) and again in the dtype the job would use
(`dtype`: the request's, else `options.dtype`, else the method's default, else float32), because a target
finite in float64 can overflow or underflow in float32 and fail the job at start with `target_nonfinite`
(issue 14). Differences come back as `warnings` with stable codes (docs/api.md, "Validating a target").
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.api.compute import DTYPE_RTOL, EvaluationBudget, evaluate_target
from app.api.deps import CurrentTenant, SettingsDep, StoreDep
from app.api.problems import Problem
from app.api.schemas import Dtype, ValidateResponse
from inference_core import errors
from inference_core.catalog import METHODS
from inference_core.spec import admit_target
from service.datasets import dataset_loader
from service.repositories import Datasets
from service.settings import Settings

router = APIRouter(prefix="/v1/targets", tags=["targets"])


class ValidateRequest(BaseModel):
    model_config = ConfigDict(strict=True)  # "1.5" or true is not a number (issue 15)

    target: dict[str, Any]
    points: list[list[float]] = Field(min_length=1)
    dtype: Dtype | None = Field(default=None, description="the job's dtype; default: options.dtype, then the "
                                "method's default, then float32")
    method: str | None = Field(default=None, min_length=1, max_length=64,
                               description="the job's method: its options fix the default dtype")
    options: dict[str, Any] | None = Field(default=None, description="the job's method options")


@router.post("/validate", response_model=ValidateResponse)
async def validate_target(body: ValidateRequest, request: Request, tenant: CurrentTenant, settings: SettingsDep,
                          store: StoreDep) -> ValidateResponse:
    # The target is admitted as a job's would be (in the request threadpool: compiling an expression up to its
    # caps is ~0.2 s of CPU), then built and evaluated in the bounded compute pool.
    if len(body.points) > settings.max_validate_points:
        raise Problem(413, "payload_too_large",
                      f"at most {settings.max_validate_points} points per request, got {len(body.points)}")
    raw_target, dtype = await run_in_threadpool(admitted_target, request, tenant, body, settings)
    loader = dataset_loader(request.app.state.session_factory, store, tenant)
    return await request.app.state.compute.run(evaluate_target, raw_target, body.points, loader, dtype,
                                               EvaluationBudget.of(settings))


def admitted_target(request: Request, tenant: str, body: ValidateRequest, settings: Settings) -> tuple[dict, Dtype]:
    """The normalised target and the job's dtype, from a session closed on return."""
    with request.app.state.session_factory() as session:
        target, _, _ = admit_target(body.target, settings.limits(), Datasets(session, tenant).shapes)
    raw_target = target.model_dump(mode="json")
    return raw_target, job_dtype(body, raw_target["kind"])


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
