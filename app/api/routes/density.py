"""GET /v1/jobs/{id}/density: a 2-D job's target log-density on a grid (what the dashboard draws under the
particles or the generator's draws).

The target is rebuilt from the job's stored spec (validated at submit) and evaluated in float64 in the
bounded compute pool (app.api.compute), like /sample: CPU work never runs on the event loop or in the
threads that serve polls. Only `inference_core.targets` is imported, never the training code.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool

from app.api.compute import EvaluationBudget, density_grid, density_unsupported
from app.api.deps import CurrentTenant, SettingsDep, StoreDep
from app.api.problems import Problem
from app.api.schemas import DensityGrid
from inference_core.catalog import TARGET_KINDS
from inference_core.datasets.resolve import dataset_ref_ids
from service.datasets import dataset_loader
from service.repositories import Datasets, Jobs

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

MIN_GRID = 2
DEFAULT_GRID = 64  # or the cap, if lower


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
    target_spec = await run_in_threadpool(_target_spec, request, tenant, job_id, grid * grid,
                                          settings.max_evaluation_values)
    loader = dataset_loader(request.app.state.session_factory, store, tenant)
    return await request.app.state.compute.run(
        density_grid, job_id, target_spec, loader, (x_min, x_max, y_min, y_max), grid, EvaluationBudget.of(settings))


def _target_spec(request: Request, tenant: str, job_id: str, points: int, max_values: int) -> dict[str, Any]:
    """The job's target spec (404/410 first), from a session closed before any computing; a dimension the spec
    itself gives is checked here, before any data set is loaded or anything is built, and so is work that the
    uploaded data sets' row counts alone put over the cap (points × rows, at least one value a row): such a grid
    is refused at once, not after a wait for the compute pool, where the exact count is checked again."""
    with request.app.state.session_factory() as session:
        spec = dict(Jobs(session, tenant).owned(job_id).spec["target"])
        shapes = Datasets(session, tenant).shapes(dataset_ref_ids(spec), live_only=False)
    dim = getattr(TARGET_KINDS[spec["kind"]].schema.model_validate(spec), "dim", None)
    if isinstance(dim, int) and dim != 2:
        raise density_unsupported(spec, dim)
    rows = max((shape.n_rows for shape in shapes.values()), default=1)
    if points * rows > max_values:
        raise Problem(413, "limit_exceeded", f"the density on {points} points over {rows} data rows is at least "
                      f"{points * rows:.3g} values to compute, over the cap of {max_values:.3g} per request "
                      "(PARVIS_MAX_EVALUATION_VALUES); ask for a smaller grid")
    return spec
