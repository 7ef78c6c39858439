"""Rows from the repositories → the response models of app/api/schemas.py."""

from __future__ import annotations

from app.api.schemas import ArtifactOut, DatasetOut, JobError, JobOut, MetricPointOut, Progress, SamplerOut
from service.models import Artifact, DatasetRecord, Job, MetricPoint, Sampler


def job_out(job: Job, sampler_id: str | None = None) -> JobOut:
    total = int(job.spec.get("steps", 0))
    progress = job.progress or {"step": 0, "total_steps": total, "fraction": 0.0, "eta_s": None}
    error = JobError(code=job.error_code, detail=job.error_detail or "") if job.error_code else None
    return JobOut(
        id=job.id,
        status=job.status,
        method=job.method,
        name=job.name,
        progress=Progress(**progress),
        metrics=job.metrics or {},
        quality=job.quality,
        error=error,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        sampler_id=sampler_id,
        spec=job.spec,
        attempt=job.attempt,
        cancel_requested=job.cancel_requested,
        checkpoint_step=job.checkpoint_step,
        resumed_from_step=job.resumed_from_step,
        ranks=int(((job.spec or {}).get("resources") or {}).get("processes") or 1),
        expires_at=job.expires_at,
    )


def metric_point_out(point: MetricPoint) -> MetricPointOut:
    return MetricPointOut(step=point.step, wall_time_s=point.wall_time_s, values=point.values)


def sampler_out(sampler: Sampler, artifacts: dict[str, Artifact]) -> SamplerOut:
    config = sampler.config
    generator = config.get("generator", {})
    return SamplerOut(
        id=sampler.id, job_id=sampler.job_id, method=sampler.method, target=config.get("target", {}),
        dim=int(generator.get("output_dim", config.get("target", {}).get("dim", 0))),
        noise_dim=generator.get("noise_dim"), config=config,
        artifacts=[ArtifactOut(role=a.role, media_type=a.media_type, sha256=a.sha256, size_bytes=a.size_bytes)
                   for a in sorted(artifacts.values(), key=lambda a: a.role)],
        created_at=sampler.created_at,
        expires_at=sampler.expires_at,
        quality=sampler.quality,
    )


def dataset_out(record: DatasetRecord, artifact: Artifact) -> DatasetOut:
    return DatasetOut(id=record.id, name=record.name, n_rows=record.n_rows, n_features=record.n_features,
                      n_test_rows=record.n_test_rows, y=record.y_kind, n_classes=record.n_classes,
                      dtype="float64", sha256=artifact.sha256, size_bytes=artifact.size_bytes,
                      created_at=record.created_at, expires_at=record.expires_at)
