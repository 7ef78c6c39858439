"""Every response model of the API, in one place (separate from the SQLAlchemy models, which never leave the
repositories; app/api/views.py turns rows into these)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from service.models import JOB_STATUSES

#: A job's status, as the `?status=` filter of GET /v1/jobs takes it (an enum in the OpenAPI document).
JobStatus = Literal[JOB_STATUSES]  # type: ignore[valid-type]  # Literal of a tuple: its members


class Progress(BaseModel):
    step: int
    total_steps: int
    fraction: float
    eta_s: float | None = None
    resumed_from_step: int | None = None  # set while a re-run attempt re-does steps; `step` never decreases


class JobError(BaseModel):
    code: str
    detail: str


class JobOut(BaseModel):
    id: str
    status: str
    method: str
    name: str | None
    progress: Progress
    metrics: dict[str, float | None]
    quality: dict[str, Any] | None = None
    error: JobError | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    sampler_id: str | None
    spec: dict[str, Any]
    attempt: int
    cancel_requested: bool
    checkpoint_step: int | None
    resumed_from_step: int | None
    ranks: int = Field(default=1, description="the processes (ranks) the job runs as: its spec's resources.processes")
    expires_at: datetime | None = None  # retention: 410 `expired` once past (and finished); null: kept forever


class JobList(BaseModel):
    jobs: list[JobOut]
    next_page_token: str | None


class MetricPointOut(BaseModel):
    step: int
    wall_time_s: float
    values: dict[str, float | None]


class MetricTrace(BaseModel):
    job_id: str
    points: list[MetricPointOut]
    next_since_step: int | None = Field(
        default=None, description="more points follow: ask again with since_step set to this (null: this was the "
        "last page, or a downsampled answer)")


class Particles(BaseModel):
    particles: list[list[float]]
    shape: list[int]


class MethodOut(BaseModel):
    name: str
    family: str
    summary: str
    paper: str
    target_kinds: list[str]
    options_schema: dict[str, Any]
    max_processes: int | None = Field(
        default=1, description="the most ranks (resources.processes) the method runs as: 1, or null for as many as "
        "the service allows (PARVIS_MAX_PROCESSES_PER_JOB)")
    shares: str | None = Field(
        default=None, description="how its ranks share the work: 'particles' (each the direction of its share of "
        "the particles, kernel sums over all of them), 'scores' (each the scores of its share; the direction, which "
        "couples every particle, whole on every rank), 'networks' (the same with f-POVI's networks as particles), "
        "'batch' (each its rows of the generator's noise batch; gradients summed), 'data' (each its share of a data "
        "target's minibatch rows; gradients summed); null: one process")


class MethodList(BaseModel):
    methods: list[MethodOut]


class TargetKindOut(BaseModel):
    kind: str
    summary: str
    has_reference: bool
    schema_: dict[str, Any]

    model_config = {"populate_by_name": True}


class TargetKindList(BaseModel):
    kinds: list[dict[str, Any]]


class Health(BaseModel):
    status: str
    checks: dict[str, Any] = {}


class ArtifactOut(BaseModel):
    role: str
    media_type: str
    sha256: str
    size_bytes: int


class SamplerOut(BaseModel):
    id: str
    job_id: str
    method: str
    target: dict[str, Any]
    dim: int
    noise_dim: int | None
    config: dict[str, Any]
    artifacts: list[ArtifactOut]
    created_at: datetime
    expires_at: datetime | None = None  # its job's: 410 `expired` once past; null: kept forever
    quality: dict[str, Any] | None = Field(
        default=None, description="certificate computed when the sampler was stored (docs/api.md, 'Sampler "
        "quality'): PSIS k̂, ESS, ELBO, log Ẑ, KSD test, verdict; null for samplers stored before it existed")


class SamplerList(BaseModel):
    samplers: list[SamplerOut]
    next_page_token: str | None


class DatasetOut(BaseModel):
    id: str
    name: str | None
    n_rows: int
    n_features: int
    n_test_rows: int
    y: str  # none | float | labels
    n_classes: int | None
    dtype: str
    sha256: str
    size_bytes: int
    created_at: datetime
    expires_at: datetime | None = None  # retention: 410 `expired` once past; null: kept forever


class DatasetList(BaseModel):
    datasets: list[DatasetOut]
    next_page_token: str | None


class PredictOut(BaseModel):
    """Regression: `mean`, `std` (observation noise included), `std_epistemic` (without it), `quantiles`
    [len(quantile_levels), m] of the predictive mixture. Classification: `probs` [m, K] (mean softmax) and
    the predictive `entropy` [m] (nats)."""

    task: Literal["regression", "classification"]
    n_draws: int
    mean: list[float] | None = None
    std: list[float] | None = None
    std_epistemic: list[float] | None = None
    quantile_levels: list[float] | None = None
    quantiles: list[list[float]] | None = None
    probs: list[list[float]] | None = None
    entropy: list[float] | None = None


class DensityGrid(BaseModel):
    job_id: str
    x: list[float] = Field(description="grid abscissae: `grid` numbers from x_min to x_max (first coordinate)")
    y: list[float] = Field(description="grid ordinates: `grid` numbers from y_min to y_max (second coordinate)")
    log_prob: list[list[float | None]] = Field(
        description="[grid, grid]: log_prob[i][j] = log p(x[j], y[i]) in float64 (the target's own "
        "normalisation); null where not finite")
    max_log_prob: float | None = Field(description="the largest finite value, null if none is finite")


Dtype = Literal["float32", "float64"]


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
