"""GET /v1/jobs/{id}/density: a 2-D job's target log-density on a grid (what the dashboard draws under the
particles or the generator's draws).

The target is rebuilt from the job's stored spec (validated at submit) and evaluated in float64 in the
bounded compute pool (app.api.sampling), like /sample: CPU work never runs on the event loop or in the
threads that serve polls. Only `inference_core.targets` is imported, never the training code.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from app.api.deps import CurrentTenant, SettingsDep, StoreDep
from app.api.problems import Problem
from app.api.routes.jobs import owned_job
from app.api.routes.targets import json_floats, no_pointwise_density
from app.api.sampling import one_intra_op_thread
from inference_core.catalog import TARGET_KINDS
from service.datasets import dataset_loader

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

MIN_GRID = 2
DEFAULT_GRID = 64  # or the cap, if lower


class DensityGrid(BaseModel):
    job_id: str
    x: list[float] = Field(description="grid abscissae: `grid` numbers from x_min to x_max (first coordinate)")
    y: list[float] = Field(description="grid ordinates: `grid` numbers from y_min to y_max (second coordinate)")
    log_prob: list[list[float | None]] = Field(
        description="[grid, grid]: log_prob[i][j] = log p(x[j], y[i]) in float64 (the target's own "
        "normalisation); null where not finite")
    max_log_prob: float | None = Field(description="the largest finite value, null if none is finite")


@router.get("/{job_id}/density", response_model=DensityGrid)
async def job_density(
    job_id: str,
    request: Request,
    tenant: CurrentTenant,
    settings: SettingsDep,
    store: StoreDep,
    x_min: Annotated[float, Query(description="left edge of the grid (first coordinate)")],
    x_max: Annotated[float, Query(description="right edge of the grid")],
    y_min: Annotated[float, Query(description="bottom edge of the grid (second coordinate)")],
    y_max: Annotated[float, Query(description="top edge of the grid")],
    grid: Annotated[int | None, Query(description="points per axis (grid × grid evaluations), 2 to "
                                      "PARVIS_MAX_DENSITY_GRID (200); default 64")] = None,
) -> DensityGrid:
    """The job's target must have dimension 2 (422 `density_unsupported` otherwise). Any job status: the target
    is the spec's, not the result's."""
    grid = min(DEFAULT_GRID, settings.max_density_grid) if grid is None else grid
    if not MIN_GRID <= grid <= settings.max_density_grid:
        raise Problem(422, "limit_exceeded", f"grid must be between {MIN_GRID} and {settings.max_density_grid} "
                      f"points per axis, got {grid}")
    for low, high, axis in ((x_min, x_max, "x"), (y_min, y_max, "y")):
        if not (math.isfinite(low) and math.isfinite(high) and low < high and math.isfinite(high - low)):
            raise Problem(422, "bounds_invalid", f"{axis}_min and {axis}_max must be finite with {axis}_min < "
                          f"{axis}_max (and a finite width); got {low} and {high}")
    target_spec = await run_in_threadpool(_target_spec, request, tenant, job_id)
    loader = dataset_loader(request.app.state.session_factory, store, tenant)
    return await request.app.state.compute.run(
        _evaluate_grid, job_id, target_spec, loader, (x_min, x_max, y_min, y_max), grid)


def _target_spec(request: Request, tenant: str, job_id: str) -> dict[str, Any]:
    """The job's target spec (404/410 first), from a session closed before any computing; a dimension the spec
    itself gives is checked here, before any data set is loaded or anything is built."""
    with request.app.state.session_factory() as session:
        spec = dict(owned_job(session, tenant, job_id).spec["target"])
    dim = getattr(TARGET_KINDS[spec["kind"]].schema.model_validate(spec), "dim", None)
    if isinstance(dim, int) and dim != 2:
        raise _not_2d(spec, dim)
    return spec


def _not_2d(target_spec: dict[str, Any], dim: int) -> Problem:
    return Problem(422, "density_unsupported", f"the density grid is drawn for 2-D targets; this job's "
                   f"{target_spec.get('kind')} target has dimension {dim}")


def _evaluate_grid(job_id: str, target_spec: dict[str, Any], loader: Any,
                   bounds: tuple[float, float, float, float], grid: int) -> DensityGrid:
    import torch

    from inference_core.targets import BuildContext, build_target

    one_intra_op_thread()
    target = build_target(target_spec, BuildContext(dtype=torch.float64, load_dataset=loader))
    if target.dim != 2:  # a dimension that comes from an uploaded data set's shape
        raise _not_2d(target_spec, target.dim)
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
