"""POST /v1/targets/validate: compile a target and evaluate it at given points (a debugging aid).

This is the one job-free route that runs target code in the API process (torch is imported on first use);
the expression language is compiled from an allow-listed tree, so nothing a client sends is executed.
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from app.api.deps import CurrentTenant, SessionDep, SettingsDep, StoreDep
from app.api.problems import Problem
from app.api.routes.jobs import check_dataset_refs, limits_from
from app.data.datasets import dataset_loader
from inference_core.spec import parse_target_spec

router = APIRouter(prefix="/v1/targets", tags=["targets"])


class ValidateRequest(BaseModel):
    target: dict[str, Any]
    points: list[list[float]] = Field(min_length=1)


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


def _json_floats(values: list) -> list:
    """NaN/inf → null (JSON has neither); `finite` says whether any were replaced."""
    if values and isinstance(values[0], list):
        return [_json_floats(row) for row in values]
    return [v if math.isfinite(v) else None for v in values]


@router.post("/validate", response_model=ValidateResponse)
async def validate_target(body: ValidateRequest, request: Request, session: SessionDep, tenant: CurrentTenant,
                          settings: SettingsDep, store: StoreDep) -> ValidateResponse:
    if len(body.points) > settings.max_validate_points:
        raise Problem(413, "payload_too_large",
                      f"at most {settings.max_validate_points} points per request, got {len(body.points)}")
    target_spec = parse_target_spec(body.target, limits_from(settings))
    raw_target = target_spec.model_dump(mode="json")
    check_dataset_refs(session, tenant, raw_target, settings)
    loader = dataset_loader(request.app.state.session_factory, store, tenant)
    return await run_in_threadpool(_evaluate, raw_target, body.points, loader)


def _evaluate(raw_target: dict[str, Any], points: list[list[float]], loader: Any) -> ValidateResponse:
    import torch

    from inference_core.targets import BuildContext, build_target

    target = build_target(raw_target, BuildContext(dtype=torch.float64, load_dataset=loader))
    widths = {len(row) for row in points}
    if widths != {target.dim}:
        raise Problem(422, "points_invalid",
                      f"every point needs {target.dim} coordinates (the target's dimension); got {sorted(widths)}")
    x = torch.tensor(points, dtype=torch.float64)
    try:
        log_prob = target.log_prob(x).detach()
        score = target.score(x).detach()
    except NotImplementedError as exc:
        raise Problem(422, "target_unsupported", f"this target has no pointwise log-density: {exc}") from None
    finite = bool(torch.isfinite(log_prob).all() and torch.isfinite(score).all())
    layout = getattr(target, "layout", None)
    return ValidateResponse(
        kind=raw_target["kind"],
        dim=target.dim,
        log_prob=_json_floats(log_prob.tolist()),
        score=_json_floats(score.tolist()),
        finite=finite,
        layout=[ParameterBlockOut(name=b.name, shape=list(b.shape), offset=b.offset) for b in layout]
        if layout else None,
    )
