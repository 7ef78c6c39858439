"""Jobs: submit (idempotent), list, inspect, metrics, particles, cancel, delete."""

from __future__ import annotations

import hashlib
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.api.deps import CurrentTenant, SenderDep, SessionDep, SettingsDep, StoreDep
from app.api.negotiation import array_response, load_npy
from app.api.pagination import clamp_page_size, decode_token, encode_token
from app.api.problems import Problem, not_found
from app.api.retention import RETENTION_QUERY_DESCRIPTION, expired, requested_expiry
from app.api.schemas import JobError, JobList, JobOut, MetricPointOut, MetricTrace, Progress
from inference_core.catalog import TARGET_KINDS
from inference_core.datasets import dataset_ref_ids
from inference_core.datasets.columns import DatasetShape
from inference_core.spec import Limits, check_job_memory, spec_fingerprint, validate_job_spec
from service.datasets import owned_dataset
from service.jobs import new_id
from service.models import (
    JOB_STATUSES,
    TERMINAL_STATUSES,
    Artifact,
    Job,
    JobDataset,
    MetricPoint,
    Sampler,
    utcnow,
)
from service.queue import enqueue_job
from service.quota import lock_tenant_jobs
from service.retention import delete_bytes, is_expired, job_is_expired, job_is_live
from service.settings import Settings

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
logger = logging.getLogger("parvis.api")

ACTIVE_STATUSES = ("queued", "running")
#: Largest `max_points` of GET /v1/jobs/{id}/metrics (one downsampled answer).
MAX_METRIC_POINTS_ANSWERED = 10_000


def limits_from(settings: Settings) -> Limits:
    return Limits(max_particles=settings.max_particles, max_steps=settings.max_steps, max_dim=settings.max_dim,
                  max_job_memory_bytes=settings.max_job_memory_bytes,
                  max_metric_points=settings.max_metric_points_per_job)


def check_dataset_refs(session: Session, tenant: str, target: dict[str, Any], settings: Settings) -> list[str]:
    """The uploaded data sets a target uses must be the tenant's own; their shapes fix the dimension."""
    refs = dataset_ref_ids(target)
    schema = TARGET_KINDS[target["kind"]].schema.model_validate(target)
    shapes = {}
    for dataset_id in refs:
        record = owned_dataset(session, tenant, dataset_id)
        if record is None:
            raise Problem(422, "dataset_unknown", f"no dataset {dataset_id!r}", extra={"loc": ["target", "dataset"]})
        if is_expired(record.expires_at):
            raise Problem(422, "dataset_expired", f"dataset {dataset_id!r} has expired",
                          extra={"loc": ["target", "dataset"]})
        if getattr(schema, "dim", None) is None and hasattr(schema, "dim_for"):
            try:
                dim = schema.dim_for(record.n_features, record.n_classes, record.n_rows)
            except ValueError as exc:
                raise Problem(422, "target_invalid", f"target with dataset {dataset_id!r}: {exc}",
                              extra={"loc": ["target", "dataset"]}) from None
            if dim > settings.max_dim:
                raise Problem(422, "limit_exceeded", f"target dimension {dim} is over the cap of {settings.max_dim}",
                              extra={"loc": ["target"]})
        shapes[dataset_id] = DatasetShape(record.n_rows, record.n_features, record.y_kind != "none")
    check_shapes = getattr(schema, "check_dataset_shapes", None)
    if refs and callable(check_shapes):  # an expression over data-set columns: checked now, a 422 target_invalid
        check_shapes(shapes)
    return refs


def dataset_target_dim(session: Session, tenant: str, target: dict[str, Any]) -> int | None:
    """The dimension of a target that takes it from an uploaded data set's shape (checked by
    check_dataset_refs), else None."""
    schema = TARGET_KINDS[target["kind"]].schema.model_validate(target)
    if getattr(schema, "dim", None) is not None or not hasattr(schema, "dim_for"):
        return None
    for dataset_id in dataset_ref_ids(target):
        record = owned_dataset(session, tenant, dataset_id)
        if record is not None:
            return schema.dim_for(record.n_features, record.n_classes, record.n_rows)
    return None


def owned_job(session: Session, tenant: str, job_id: str) -> Job:
    """The tenant's job or 404 (another tenant's job is indistinguishable from a missing one); 410 once the
    finished job has expired (until the sweeper deletes it)."""
    job = session.execute(select(Job).where(Job.id == job_id, Job.tenant_id == tenant)).scalar_one_or_none()
    if job is None:
        raise not_found("job", job_id)
    if job_is_expired(job):
        raise expired("job", job_id, job.expires_at)
    return job


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
        expires_at=job.expires_at,
    )


def sampler_ids(session: Session, job_ids: list[str]) -> dict[str, str]:
    if not job_ids:
        return {}
    rows = session.execute(select(Sampler.job_id, Sampler.id).where(Sampler.job_id.in_(job_ids))).all()
    return {job_id: sampler_id for job_id, sampler_id in rows}


def _replay(job: Job, fingerprint: str, session: Session) -> JSONResponse:
    if job.spec_sha256 != fingerprint:
        raise Problem(422, "idempotency_key_reused",
                      "this Idempotency-Key was already used with a different request body")
    if job_is_expired(job):  # the job it names is gone for the client (once swept, the key is free again)
        raise expired("job", job.id, job.expires_at)
    out = job_out(job, sampler_ids(session, [job.id]).get(job.id))
    return JSONResponse(out.model_dump(mode="json"), status_code=200, headers={"Location": f"/v1/jobs/{job.id}"})


@router.post(
    "",
    status_code=202,
    response_model=JobOut,
    responses={200: {"model": JobOut, "description": "idempotent replay"}},
)
def submit_job(
    body: Annotated[Any, Body()],
    session: SessionDep,
    tenant: CurrentTenant,
    settings: SettingsDep,
    sender: SenderDep,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=255)] = None,
    retention_seconds: Annotated[int | None, Query(ge=1, description=RETENTION_QUERY_DESCRIPTION)] = None,
) -> JSONResponse:
    spec = validate_job_spec(body, limits_from(settings))
    expires_at = requested_expiry(settings, tenant, retention_seconds)  # 422 before anything is stored
    dataset_ids = check_dataset_refs(session, tenant, spec.target, settings)
    if dataset_ids and (dim := dataset_target_dim(session, tenant, spec.target)) is not None:
        check_job_memory(spec, dim, limits_from(settings))  # validate_job_spec checked the others
    normalized = spec.model_dump(mode="json")
    fingerprint = spec_fingerprint(normalized)

    # The key lookup, the count and the insert below are one serialised step per tenant (service.quota):
    # concurrent submits cannot all see room under the cap, and a retry of a key sees the first one's job.
    # The lock ends with the transaction (commit or rollback).
    lock_tenant_jobs(session, tenant)
    if idempotency_key is not None:
        existing = session.execute(
            select(Job).where(Job.tenant_id == tenant, Job.idempotency_key == idempotency_key)
        ).scalar_one_or_none()
        if existing is not None:
            try:
                return _replay(existing, fingerprint, session)
            finally:
                session.rollback()  # releases the lock before the response is sent

    active = session.execute(
        select(func.count()).select_from(Job).where(Job.tenant_id == tenant, Job.status.in_(ACTIVE_STATUSES))
    ).scalar_one()
    if active >= settings.max_active_jobs_per_tenant:
        session.rollback()
        raise Problem(429, "quota_exceeded",
                      f"{active} jobs are queued or running; the limit is {settings.max_active_jobs_per_tenant}",
                      headers={"Retry-After": "30"})

    now = utcnow()
    job = Job(
        id=new_id("job"),
        tenant_id=tenant,
        status="queued",
        method=spec.method,
        name=spec.name,
        spec=normalized,
        spec_sha256=fingerprint,
        idempotency_key=idempotency_key,
        max_attempts=settings.max_attempts,
        progress={"step": 0, "total_steps": spec.steps, "fraction": 0.0, "eta_s": None},
        created_at=now,
        updated_at=now,
        enqueued_at=now,
        expires_at=expires_at,
    )
    session.add(job)
    session.add_all(JobDataset(job_id=job.id, dataset_id=dataset_id) for dataset_id in dataset_ids)
    try:
        session.commit()
    except IntegrityError:
        # A concurrent request with the same key won the insert: answer as its replay.
        session.rollback()
        existing = session.execute(
            select(Job).where(Job.tenant_id == tenant, Job.idempotency_key == idempotency_key)
        ).scalar_one()
        return _replay(existing, fingerprint, session)

    try:
        enqueue_job(sender, settings, job.id)
    except Exception:  # noqa: BLE001 - any broker failure: undo the row, tell the client to retry
        logger.exception("could not enqueue job %s", job.id)
        session.execute(delete(Job).where(Job.id == job.id))
        session.commit()
        raise Problem(503, "broker_unavailable", "the job queue is unreachable; nothing was stored, retry later",
                      headers={"Retry-After": "5"}) from None
    logger.info("job submitted id=%s tenant=%s method=%s", job.id, tenant, spec.method)
    return JSONResponse(job_out(job).model_dump(mode="json"), status_code=202,
                        headers={"Location": f"/v1/jobs/{job.id}"})


@router.get("", response_model=JobList, responses={304: {"description": "not modified (If-None-Match)"}})
def list_jobs(
    request: Request,
    session: SessionDep,
    tenant: CurrentTenant,
    settings: SettingsDep,
    status: Annotated[str | None, Query()] = None,
    page_size: Annotated[int | None, Query()] = None,
    page_token: Annotated[str | None, Query()] = None,
) -> Response:
    if status is not None and status not in JOB_STATUSES:
        raise Problem(422, "request_invalid", f"status must be one of {', '.join(JOB_STATUSES)}")
    size = clamp_page_size(page_size, settings.default_page_size, settings.max_page_size)
    filters = {"status": status}
    query = select(Job).where(Job.tenant_id == tenant, job_is_live(utcnow()))
    if status is not None:
        query = query.where(Job.status == status)
    if page_token:
        created, last_id = decode_token(settings.resolved_secret_key(), page_token, filters)
        query = query.where(or_(Job.created_at < created, and_(Job.created_at == created, Job.id < last_id)))
    rows = list(session.execute(query.order_by(Job.created_at.desc(), Job.id.desc()).limit(size + 1)).scalars())
    page, more = rows[:size], len(rows) > size
    token = encode_token(settings.resolved_secret_key(), page[-1].created_at, page[-1].id, filters) if more else None
    samplers = sampler_ids(session, [job.id for job in page])
    out = JobList(jobs=[job_out(job, samplers.get(job.id)) for job in page], next_page_token=token)
    return etag_response(request, out.model_dump(mode="json"))


@router.get("/{job_id}", response_model=JobOut, responses={304: {"description": "not modified (If-None-Match)"}})
def get_job(job_id: str, request: Request, session: SessionDep, tenant: CurrentTenant) -> Response:
    """Carries a strong ETag; a poll with `If-None-Match: <etag>` gets 304 and no body while nothing changed."""
    job = owned_job(session, tenant, job_id)
    out = job_out(job, sampler_ids(session, [job.id]).get(job.id))
    return etag_response(request, out.model_dump(mode="json"))


@router.get("/{job_id}/metrics", response_model=MetricTrace)
def get_metrics(
    job_id: str,
    session: SessionDep,
    tenant: CurrentTenant,
    settings: SettingsDep,
    since_step: Annotated[int | None, Query(ge=0, description="only points after this step")] = None,
    limit: Annotated[int | None, Query(ge=1, description="points per page (default and maximum: "
                                       "PARVIS_MAX_PAGE_SIZE); `next_since_step` asks for the next page")] = None,
    max_points: Annotated[int | None, Query(ge=1, le=MAX_METRIC_POINTS_ANSWERED,
                                            description="downsample: at most this many points, evenly spread over "
                                            "the steps, the last one always included; one page")] = None,
) -> MetricTrace:
    owned_job(session, tenant, job_id)
    after = [MetricPoint.job_id == job_id]
    if since_step is not None:
        after.append(MetricPoint.step > since_step)
    if max_points is not None:
        rows = list(session.execute(evenly_spread(after, max_points)).scalars())
        return MetricTrace(job_id=job_id, points=[metric_point_out(p) for p in rows])
    size = min(limit or settings.max_page_size, settings.max_page_size)
    order = (MetricPoint.step, MetricPoint.id)
    rows = list(session.execute(select(MetricPoint).where(*after).order_by(*order).limit(size + 1)).scalars())
    page, more = rows[:size], len(rows) > size
    if more and rows[size].step == page[-1].step and page[0].step != page[-1].step:
        # Pages end on a step boundary: since_step is exclusive, so a step split across pages would be lost.
        page = [p for p in page if p.step != page[-1].step]
    return MetricTrace(job_id=job_id, points=[metric_point_out(p) for p in page],
                       next_since_step=page[-1].step if more else None)


def metric_point_out(point: MetricPoint) -> MetricPointOut:
    return MetricPointOut(step=point.step, wall_time_s=point.wall_time_s, values=point.values)


def evenly_spread(where: list[Any], n: int) -> Any:
    """At most n metric points, evenly spread: with T rows in (step, id) order, row r (0-based) is kept when
    r·(n−1) mod (T−1) < n−1, i.e. the first row of each of n equal shares of the range: rows 0 and T−1 are
    always kept. Computed in the database (window functions: SQLite ≥ 3.25, PostgreSQL)."""
    ranked = select(
        MetricPoint.id.label("id"),
        (func.row_number().over(order_by=(MetricPoint.step, MetricPoint.id)) - 1).label("r"),
        func.count().over().label("total"),
    ).where(*where).subquery()
    keep = or_(
        ranked.c.total <= n,
        ranked.c.r == ranked.c.total - 1,
        (ranked.c.r * (n - 1)) % func.nullif(ranked.c.total - 1, 0) < n - 1,
    )
    return (select(MetricPoint).where(MetricPoint.id.in_(select(ranked.c.id).where(keep)))
            .order_by(MetricPoint.step, MetricPoint.id))


@router.get(
    "/{job_id}/particles",
    responses={200: {"content": {"application/json": {}, "application/x-npy": {}},
                     "description": "particles [n, d] as JSON (`{particles, shape}`) or a float32 .npy"}},
)
def get_particles(job_id: str, request: Request, session: SessionDep, tenant: CurrentTenant,
                  store: StoreDep) -> Response:
    job = owned_job(session, tenant, job_id)
    if job.status != "succeeded":
        raise Problem(409, "job_not_finished", f"particles exist once the job has succeeded; it is {job.status}")
    artifact = session.execute(
        select(Artifact).where(Artifact.job_id == job.id, Artifact.role == "particles")
    ).scalar_one_or_none()
    if artifact is None:
        raise Problem(404, "not_found", "this job stored no particles")
    return array_response(request, load_npy(store.get(artifact.path)), "particles")


@router.post("/{job_id}/cancel", status_code=202, response_model=JobOut)
def cancel_job(job_id: str, session: SessionDep, tenant: CurrentTenant) -> JobOut:
    """Idempotent. A queued job is cancelled at once and never starts; a running job stops at its next
    step boundary (`cancel_requested` is true until the worker confirms with status `cancelled`)."""
    job = owned_job(session, tenant, job_id)
    if job.status in ("succeeded", "failed"):
        raise Problem(409, "job_finished", f"the job already {job.status}; there is nothing to cancel")
    now = utcnow()
    session.execute(
        update(Job).where(Job.id == job.id, Job.status == "queued")
        .values(status="cancelled", cancel_requested=True, finished_at=now, updated_at=now)
    )
    session.execute(
        update(Job).where(Job.id == job.id, Job.status == "running").values(cancel_requested=True, updated_at=now)
    )
    session.commit()
    session.refresh(job)
    logger.info("job cancel requested id=%s tenant=%s", job.id, tenant)
    return job_out(job, sampler_ids(session, [job.id]).get(job.id))


@router.delete("/{job_id}", status_code=204)
def delete_job(job_id: str, session: SessionDep, tenant: CurrentTenant, store: StoreDep) -> Response:
    job = owned_job(session, tenant, job_id)
    if job.status not in TERMINAL_STATUSES:
        raise Problem(409, "job_not_finished", f"only finished jobs can be deleted; this one is {job.status}")
    paths = list(session.execute(select(Artifact.path).where(
        or_(Artifact.job_id == job.id, Artifact.sampler_id.in_(select(Sampler.id).where(Sampler.job_id == job.id)))
    )).scalars())
    session.execute(delete(Job).where(Job.id == job.id, Job.tenant_id == tenant))
    delete_bytes(session, store, [*paths, f"jobs/{job.id}"])  # commits; a failed deletion is retried by the sweeper
    logger.info("job deleted id=%s tenant=%s", job.id, tenant)
    return Response(status_code=204)


def etag_response(request: Request, content: Any) -> Response:
    """200 JSON with a strong ETag (quoted sha256 of the exact body bytes), or 304 with no body when the
    request's If-None-Match names that tag. `no-cache`: caches keep it but must revalidate every time."""
    response = JSONResponse(content)
    etag = f'"{hashlib.sha256(response.body).hexdigest()}"'
    headers = {"ETag": etag, "Cache-Control": "private, no-cache"}
    if etag_matches(request.headers.get("if-none-match"), etag):
        return Response(status_code=304, headers=headers)
    response.headers.update(headers)
    return response


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """RFC 9110 If-None-Match: `*` or a list of entity tags compared weakly (a `W/` prefix is ignored)."""
    if not if_none_match:
        return False
    if if_none_match.strip() == "*":
        return True
    return etag in (tag.strip().removeprefix("W/") for tag in if_none_match.split(","))
