"""Response models (separate from the SQLAlchemy models, which never leave the data layer)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


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
