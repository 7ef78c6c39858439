"""Posterior predictive at new inputs: `POST /v1/jobs/{id}/predict` (particle jobs on `bnn`/`function_posterior`
targets, from their stored predictor) and `POST /v1/samplers/{id}/predict` (samplers whose config carries a
predictive `model`: BNN hypernetworks, function-space samplers). See docs/prediction.md.

Inputs and outputs are in the data's original units. Loaded predictors are cached in the process (the
sampler cache, keyed by the artifact's sha256). torch is imported only when a prediction is computed. Checks and
reads run in the request threadpool with a short-lived session; loading and predicting run in the bounded
compute pool (app.api.compute), like /sample's draws, so at most `sample_concurrency` of them run at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from app.api.compute import draw_bytes, ensemble_predictor, predict_answer, sampler_predictor
from app.api.deps import CurrentTenant, SettingsDep, StoreDep
from app.api.problems import Problem
from app.api.schemas import PredictOut
from service.repositories import Jobs, Samplers
from service.samplers import PREDICTOR_ROLE
from service.settings import Settings

router = APIRouter(tags=["predict"])

PREDICT_KINDS = ("bnn", "function_posterior")
#: Draws a sampler gives when the request names no `n` (inference_core.prediction.DEFAULT_SAMPLER_DRAWS).
SAMPLER_DEFAULT_DRAWS = 100
MAX_QUANTILE_LEVELS = 99
DEFAULT_LEVELS = 5  # inference_core.prediction.DEFAULT_QUANTILES


class PredictRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    x: list[Annotated[list[float], Field(min_length=1)]] = Field(
        min_length=1, description="inputs [m, p] in the data's original units")
    n: int | None = Field(default=None, ge=1, description="posterior draws to use; default: every particle of "
                          "a job, 100 draws of a sampler")
    seed: int = Field(default=0, ge=0, le=2**63 - 1, description="seed of a sampler's draws (same seed, same answer)")
    quantiles: list[Annotated[float, Field(gt=0, lt=1)]] | None = Field(
        default=None, min_length=1, max_length=MAX_QUANTILE_LEVELS,
        description="levels in (0, 1); default 0.025, 0.05, 0.5, 0.95, 0.975")


_PROBLEM = {"content": {"application/problem+json": {}}}
ROUTE_DOCS: dict[str, Any] = {
    "response_model": PredictOut,
    "responses": {404: _PROBLEM, 409: _PROBLEM, 413: _PROBLEM, 422: _PROBLEM},
    "openapi_extra": {"requestBody": {"required": True, "content": {"application/json": {
        "schema": PredictRequest.model_json_schema()}}}},
}


def parse_request(body: Any) -> PredictRequest:
    try:
        return PredictRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = ".".join(str(part) for part in first["loc"])
        raise Problem(422, "input_invalid", f"{loc}: {first['msg']}" if loc else first["msg"]) from None


def check_size(request: PredictRequest, draws: int, settings: Settings) -> None:
    """413 before any work when draws · inputs is over the cap, or draws · inputs · quantile levels over the cap
    times the default's 5 levels (each level of a regression's quantiles is a root search over the whole
    mixture: 60,000 inputs × 99 levels held the compute pool for 17-20 s)."""
    values = draws * len(request.x)
    if values > settings.max_predict_values:
        raise Problem(413, "limit_exceeded", f"{draws} draws at {len(request.x)} inputs is {values} function "
                      f"values, over the cap of {settings.max_predict_values}; ask for fewer draws or inputs")
    levels = len(request.quantiles) if request.quantiles is not None else DEFAULT_LEVELS
    if values * levels > settings.max_predict_values * DEFAULT_LEVELS:
        raise Problem(413, "limit_exceeded", f"{values} function values at {levels} quantile levels is "
                      f"{values * levels} mixture evaluations, over the cap of {settings.max_predict_values} × "
                      f"{DEFAULT_LEVELS}; ask for fewer levels, inputs or draws")


def check_draw_memory(draws: int, config: dict[str, Any], settings: Settings) -> None:
    """413 before any work when a sampler's `draws` would take more than half the request memory budget to
    generate (`draw_bytes`: a hypernetwork's draws are whole weight vectors, and `n` is capped only by n · m): the
    other half is the prediction's own working set, which `inference_core.prediction` keeps to a few
    PREDICT_CHUNK_ELEMENTS arrays by working through the inputs in chunks."""
    needed = draws * draw_bytes(config)
    if 2 * needed > settings.request_memory_bytes:
        raise Problem(413, "limit_exceeded", f"{draws} draws of this sampler take about {needed} bytes to generate, "
                      f"over half the request memory budget of {settings.request_memory_bytes} bytes "
                      "(PARVIS_REQUEST_MEMORY_BYTES); ask for fewer draws")


def unsupported(detail: str) -> Problem:
    return Problem(422, "predict_unsupported", detail)


async def computed(request: Request, key: str, load: Callable[[], Any], parsed: PredictRequest) -> Response:
    """Loads (cache) and predicts in the bounded compute pool (app.api.compute), never in the request
    threadpool that polls need, and with no database session open."""
    body = await request.app.state.compute.run(predict_answer, request.app.state.sampler_cache, key, load,
                                               parsed.x, parsed.n, parsed.seed, parsed.quantiles)
    return Response(body, media_type="application/json")


Prepared = tuple[PredictRequest, str, Callable[[], Any]]  # the request, its predictor's cache key and loader


@router.post("/v1/jobs/{job_id}/predict", **ROUTE_DOCS)
async def predict_job(job_id: str, request: Request, body: Annotated[Any, Body()], tenant: CurrentTenant,
                      settings: SettingsDep, store: StoreDep) -> Response:
    """Posterior predictive of a particle job on a `bnn` or `function_posterior` target (its final particles,
    all of them unless `n` asks for the first n); a generative job answers with its sampler's predictive."""
    parsed, key, load = await run_in_threadpool(job_predictor, request, tenant, job_id, body, settings, store)
    return await computed(request, key, load, parsed)


def job_predictor(request: Request, tenant: str, job_id: str, body: Any, settings: Settings,
                  store: Any) -> Prepared:
    """The parsed request and what computes the job's answer, from a session closed on return; 404, 422, 409
    and 413 first."""
    with request.app.state.session_factory() as session:
        job = Jobs(session, tenant).owned(job_id)
        parsed = parse_request(body)
        if job.status != "succeeded":
            raise Problem(409, "job_not_finished",
                          f"predictions exist once the job has succeeded; it is {job.status}")
        kind = (job.spec.get("target") or {}).get("kind")
        if kind not in PREDICT_KINDS:
            raise unsupported(f"a {kind} job has no predictive model; /predict serves bnn and "
                              "function_posterior jobs")
        artifact = Jobs(session, tenant).artifact(job, PREDICTOR_ROLE)
        num_particles = int(job.spec.get("num_particles", 1))
        record = weights = None
        if artifact is None:
            samplers = Samplers(session, tenant)
            record = samplers.of_job(job)
            weights = None if record is None else samplers.artifacts(record).get("weights")
    if artifact is not None:
        check_size(parsed, parsed.n or num_particles, settings)
        path = artifact.path
        return parsed, artifact.sha256, lambda: ensemble_predictor(store.get(path))
    if record is None or weights is None or record.config.get("model") is None:
        raise unsupported("this job stored no predictive model (a function_posterior job whose prior has no "
                          "network keeps only function values at the training inputs)")
    check_size(parsed, parsed.n or SAMPLER_DEFAULT_DRAWS, settings)
    check_draw_memory(parsed.n or SAMPLER_DEFAULT_DRAWS, record.config, settings)
    path = weights.path
    return parsed, weights.sha256, lambda: sampler_predictor(store.get(path))


@router.post("/v1/samplers/{sampler_id}/predict", **ROUTE_DOCS)
async def predict_sampler(sampler_id: str, request: Request, body: Annotated[Any, Body()], tenant: CurrentTenant,
                          settings: SettingsDep, store: StoreDep) -> Response:
    """Posterior predictive of a trained sampler with a predictive model (BNN hypernetwork, function-space
    sampler) from `n` seeded draws (default 100)."""
    parsed, key, load = await run_in_threadpool(sampler_predictor_of, request, tenant, sampler_id, body, settings,
                                                store)
    return await computed(request, key, load, parsed)


def sampler_predictor_of(request: Request, tenant: str, sampler_id: str, body: Any, settings: Settings,
                         store: Any) -> Prepared:
    """The parsed request and what computes the sampler's answer, from a session closed on return; 404, 422
    and 413 first."""
    with request.app.state.session_factory() as session:
        samplers = Samplers(session, tenant)
        record = samplers.owned(sampler_id)
        parsed = parse_request(body)
        if record.config.get("model") is None:
            raise unsupported("this sampler has no predictive model: it was not trained on a bnn or "
                              "function_posterior target")
        check_size(parsed, parsed.n or SAMPLER_DEFAULT_DRAWS, settings)
        check_draw_memory(parsed.n or SAMPLER_DEFAULT_DRAWS, record.config, settings)
        weights = samplers.artifacts(record).get("weights")
    if weights is None:
        raise Problem(404, "not_found", "this sampler has no stored weights")
    path = weights.path
    return parsed, weights.sha256, lambda: sampler_predictor(store.get(path))
