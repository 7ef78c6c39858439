"""Jobs: submit (idempotent), list, inspect, metrics, particles, cancel, delete."""

from __future__ import annotations

import hashlib
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query, Request, Response
from fastapi.responses import JSONResponse

from app.api.deps import CurrentTenant, SenderDep, SessionDep, SettingsDep, StoreDep
from app.api.negotiation import array_response, load_npy
from app.api.pagination import QUERY_INT_MAX, PageSize, PageToken, clamp_page_size, cursor_of, next_token
from app.api.problems import Problem
from app.api.retention import RetentionSeconds, requested_expiry
from app.api.schemas import JobList, JobOut, JobStatus, MetricTrace
from app.api.views import job_out, metric_point_out
from inference_core.spec import admit
from service.queue import enqueue_job
from service.repositories import Datasets, Jobs

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
logger = logging.getLogger("parvis.api")

#: Largest `max_points` of GET /v1/jobs/{id}/metrics (one downsampled answer).
MAX_METRIC_POINTS_ANSWERED = 10_000


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
    retention_seconds: RetentionSeconds = None,
) -> JSONResponse:
    # The spec is admitted once (inference_core.spec.admit: the uploaded data sets' shapes come from the
    # tenant's own records), then stored and enqueued in one step serialised per tenant (Jobs.submit).
    admitted = admit(body, settings.limits(), Datasets(session, tenant).shapes)
    expires_at = requested_expiry(settings, tenant, retention_seconds)  # 422 before anything is stored
    jobs = Jobs(session, tenant)
    submitted = jobs.submit(admitted, idempotency_key=idempotency_key, expires_at=expires_at,
                            max_active=settings.max_active_jobs_per_tenant, max_attempts=settings.max_attempts,
                            enqueue=lambda job_id: enqueue_job(sender, settings, job_id),
                            retention_seconds=retention_seconds)
    job = submitted.job
    if submitted.replayed:
        out, status = job_out(job, jobs.sampler_ids([job.id]).get(job.id)), 200
    else:
        out, status = job_out(job), 202
        logger.info("job submitted id=%s tenant=%s method=%s", job.id, tenant, job.method)
    return JSONResponse(out.model_dump(mode="json"), status_code=status, headers={"Location": f"/v1/jobs/{job.id}"})


@router.get("", response_model=JobList, responses={304: {"description": "not modified (If-None-Match)"}})
def list_jobs(
    request: Request,
    session: SessionDep,
    tenant: CurrentTenant,
    settings: SettingsDep,
    status: Annotated[JobStatus | None, Query(description="only jobs in this status")] = None,
    page_size: PageSize = None,
    page_token: PageToken = None,
) -> Response:
    size = clamp_page_size(page_size, settings.default_page_size, settings.max_page_size)
    filters, secret = {"status": status}, settings.resolved_secret_key()
    jobs = Jobs(session, tenant)
    page = jobs.page(size, cursor_of(secret, page_token, filters), status)
    samplers = jobs.sampler_ids([job.id for job in page.items])
    out = JobList(jobs=[job_out(job, samplers.get(job.id)) for job in page.items],
                  next_page_token=next_token(secret, page, filters))
    return etag_response(request, out.model_dump(mode="json"))


@router.get("/{job_id}", response_model=JobOut, responses={304: {"description": "not modified (If-None-Match)"}})
def get_job(job_id: str, request: Request, session: SessionDep, tenant: CurrentTenant) -> Response:
    """Carries a strong ETag; a poll with `If-None-Match: <etag>` gets 304 and no body while nothing changed."""
    jobs = Jobs(session, tenant)
    job = jobs.owned(job_id)
    out = job_out(job, jobs.sampler_ids([job.id]).get(job.id))
    return etag_response(request, out.model_dump(mode="json"))


@router.get("/{job_id}/metrics", response_model=MetricTrace)
def get_metrics(
    job_id: str,
    session: SessionDep,
    tenant: CurrentTenant,
    settings: SettingsDep,
    since_step: Annotated[int | None, Query(ge=0, le=QUERY_INT_MAX, description="only points after this step")]
    = None,
    limit: Annotated[int | None, Query(ge=1, le=QUERY_INT_MAX, description="points per page (default and maximum: "
                                       "PARVIS_MAX_PAGE_SIZE); `next_since_step` asks for the next page")] = None,
    max_points: Annotated[int | None, Query(ge=1, le=MAX_METRIC_POINTS_ANSWERED,
                                            description="downsample: at most this many points, evenly spread over "
                                            "the steps, the last one always included; one page")] = None,
) -> MetricTrace:
    size = min(limit or settings.max_page_size, settings.max_page_size)
    points, next_step = Jobs(session, tenant).metrics(job_id, since_step=since_step, size=size,
                                                      max_points=max_points)
    return MetricTrace(job_id=job_id, points=[metric_point_out(p) for p in points], next_since_step=next_step)


@router.get(
    "/{job_id}/particles",
    responses={200: {"content": {"application/json": {}, "application/x-npy": {}},
                     "description": "particles [n, d] as JSON (`{particles, shape}`) or a float32 .npy"}},
)
def get_particles(job_id: str, request: Request, session: SessionDep, tenant: CurrentTenant,
                  store: StoreDep) -> Response:
    jobs = Jobs(session, tenant)
    job = jobs.owned(job_id)
    if job.status != "succeeded":
        raise Problem(409, "job_not_finished", f"particles exist once the job has succeeded; it is {job.status}")
    artifact = jobs.artifact(job, "particles")
    if artifact is None:
        raise Problem(404, "not_found", "this job stored no particles")
    return array_response(request, load_npy(store.get(artifact.path)), "particles")


@router.post("/{job_id}/cancel", status_code=202, response_model=JobOut)
def cancel_job(job_id: str, session: SessionDep, tenant: CurrentTenant) -> JobOut:
    """Idempotent. A queued job is cancelled at once and never starts; a running job stops at its next
    step boundary (`cancel_requested` is true until the worker confirms with status `cancelled`)."""
    jobs = Jobs(session, tenant)
    job = jobs.cancel(job_id)
    logger.info("job cancel requested id=%s tenant=%s", job.id, tenant)
    return job_out(job, jobs.sampler_ids([job.id]).get(job.id))


@router.delete("/{job_id}", status_code=204)
def delete_job(job_id: str, session: SessionDep, tenant: CurrentTenant, store: StoreDep) -> Response:
    Jobs(session, tenant).delete(job_id, store)
    logger.info("job deleted id=%s tenant=%s", job_id, tenant)
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
