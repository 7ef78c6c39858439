"""Posterior predictive at new inputs: `POST /v1/jobs/{id}/predict` (particle jobs on `bnn`/`function_posterior`
targets, from their stored predictor) and `POST /v1/samplers/{id}/predict` (samplers whose config carries a
predictive `model`: BNN hypernetworks, function-space samplers). See docs/prediction.md.

Inputs and outputs are in the data's original units. Loaded predictors are cached in the process (the
sampler cache, keyed by the artifact's sha256). torch is imported only when a prediction is computed. Checks and
reads run in the request threadpool with a short-lived session; loading and predicting run in the bounded
compute pool (app.api.sampling), like /sample's draws, so at most `sample_concurrency` of them run at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Body, Request, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import select
from starlette.concurrency import run_in_threadpool

from app.api.deps import CurrentTenant, SettingsDep, StoreDep
from app.api.problems import Problem
from app.api.routes.jobs import owned_job
from app.api.routes.samplers import owned_sampler, sampler_artifacts
from app.api.sampling import one_intra_op_thread
from service.models import Artifact, Sampler
from service.samplers import PREDICTOR_ROLE
from service.settings import Settings

router = APIRouter(tags=["predict"])

PREDICT_KINDS = ("bnn", "function_posterior")
#: Draws a sampler gives when the request names no `n` (inference_core.prediction.DEFAULT_SAMPLER_DRAWS).
SAMPLER_DEFAULT_DRAWS = 100
MAX_QUANTILE_LEVELS = 99


class PredictRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    x: list[list[float]] = Field(min_length=1, description="inputs [m, p] in the data's original units")
    n: int | None = Field(default=None, ge=1, description="posterior draws to use; default: every particle of "
                          "a job, 100 draws of a sampler")
    seed: int = Field(default=0, ge=0, lt=2**63, description="seed of a sampler's draws (same seed, same answer)")
    quantiles: list[float] | None = Field(default=None, min_length=1, max_length=MAX_QUANTILE_LEVELS,
                                          description="levels in (0, 1); default 0.025, 0.05, 0.5, 0.95, 0.975")


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
    """413 before any work when draws · inputs is over the cap."""
    values = draws * len(request.x)
    if values > settings.max_predict_values:
        raise Problem(413, "limit_exceeded", f"{draws} draws at {len(request.x)} inputs is {values} function "
                      f"values, over the cap of {settings.max_predict_values}; ask for fewer draws or inputs")


def unsupported(detail: str) -> Problem:
    return Problem(422, "predict_unsupported", detail)


def answer(predictor: Any, request: PredictRequest) -> bytes:
    """The JSON answer (computed in the compute pool, like /sample's draws: one intra-op thread, so concurrent
    answers are bit-identical to a lone one)."""
    from inference_core.prediction import PredictionUnsupported

    one_intra_op_thread()
    try:
        result = predictor.predict(request.x, n=request.n, seed=request.seed, quantiles=request.quantiles)
    except PredictionUnsupported as exc:
        raise unsupported(str(exc)) from None
    except ValueError as exc:
        raise Problem(422, "input_invalid", str(exc)) from None
    return orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY)


async def computed(request: Request, predictor: Callable[[], Any], parsed: PredictRequest) -> Response:
    """Loads (cache) and predicts in the bounded compute pool (app.api.sampling), never in the request
    threadpool that polls need, and with no database session open."""
    body = await request.app.state.compute.run(lambda: answer(predictor(), parsed))
    return Response(body, media_type="application/json")


def cached_predictor(request: Request, sha256: str, load: Any) -> Any:
    # Prefixed keys: /sample caches the Sampler itself under the bare sha256 of the same zip.
    return request.app.state.sampler_cache.get(f"predict:{sha256}", load)


def sampler_predictor(request: Request, store: Any, weights_path: str, weights_sha256: str) -> Callable[[], Any]:
    def load() -> Any:
        from inference_core.prediction import predictor_from_sampler
        from inference_core.samplers import load as load_sampler

        return predictor_from_sampler(load_sampler(store.get(weights_path)))

    return lambda: cached_predictor(request, weights_sha256, load)


def ensemble_predictor(request: Request, store: Any, path: str, sha256: str) -> Callable[[], Any]:
    def load() -> Any:
        from inference_core.prediction import load_ensemble

        return load_ensemble(store.get(path))

    return lambda: cached_predictor(request, sha256, load)


@router.post("/v1/jobs/{job_id}/predict", **ROUTE_DOCS)
async def predict_job(job_id: str, request: Request, body: Annotated[Any, Body()], tenant: CurrentTenant,
                      settings: SettingsDep, store: StoreDep) -> Response:
    """Posterior predictive of a particle job on a `bnn` or `function_posterior` target (its final particles,
    all of them unless `n` asks for the first n); a generative job answers with its sampler's predictive."""
    parsed, predictor = await run_in_threadpool(job_predictor, request, tenant, job_id, body, settings, store)
    return await computed(request, predictor, parsed)


def job_predictor(request: Request, tenant: str, job_id: str, body: Any, settings: Settings,
                  store: Any) -> tuple[PredictRequest, Callable[[], Any]]:
    """The parsed request and what computes the job's answer, from a session closed on return; 404, 422, 409
    and 413 first."""
    with request.app.state.session_factory() as session:
        job = owned_job(session, tenant, job_id)
        parsed = parse_request(body)
        if job.status != "succeeded":
            raise Problem(409, "job_not_finished",
                          f"predictions exist once the job has succeeded; it is {job.status}")
        kind = (job.spec.get("target") or {}).get("kind")
        if kind not in PREDICT_KINDS:
            raise unsupported(f"a {kind} job has no predictive model; /predict serves bnn and "
                              "function_posterior jobs")
        artifact = session.execute(
            select(Artifact).where(Artifact.job_id == job.id, Artifact.role == PREDICTOR_ROLE)
        ).scalar_one_or_none()
        num_particles = int(job.spec.get("num_particles", 1))
        record = weights = None
        if artifact is None:
            record = session.execute(select(Sampler).where(Sampler.job_id == job.id)).scalar_one_or_none()
            weights = None if record is None else sampler_artifacts(session, record.id).get("weights")
    if artifact is not None:
        check_size(parsed, parsed.n or num_particles, settings)
        return parsed, ensemble_predictor(request, store, artifact.path, artifact.sha256)
    if record is None or weights is None or record.config.get("model") is None:
        raise unsupported("this job stored no predictive model (a function_posterior job whose prior has no "
                          "network keeps only function values at the training inputs)")
    check_size(parsed, parsed.n or SAMPLER_DEFAULT_DRAWS, settings)
    return parsed, sampler_predictor(request, store, weights.path, weights.sha256)


@router.post("/v1/samplers/{sampler_id}/predict", **ROUTE_DOCS)
async def predict_sampler(sampler_id: str, request: Request, body: Annotated[Any, Body()], tenant: CurrentTenant,
                          settings: SettingsDep, store: StoreDep) -> Response:
    """Posterior predictive of a trained sampler with a predictive model (BNN hypernetwork, function-space
    sampler) from `n` seeded draws (default 100)."""
    parsed, predictor = await run_in_threadpool(sampler_predictor_of, request, tenant, sampler_id, body, settings,
                                                store)
    return await computed(request, predictor, parsed)


def sampler_predictor_of(request: Request, tenant: str, sampler_id: str, body: Any, settings: Settings,
                         store: Any) -> tuple[PredictRequest, Callable[[], Any]]:
    """The parsed request and what computes the sampler's answer, from a session closed on return; 404, 422
    and 413 first."""
    with request.app.state.session_factory() as session:
        record = owned_sampler(session, tenant, sampler_id)
        parsed = parse_request(body)
        if record.config.get("model") is None:
            raise unsupported("this sampler has no predictive model: it was not trained on a bnn or "
                              "function_posterior target")
        check_size(parsed, parsed.n or SAMPLER_DEFAULT_DRAWS, settings)
        weights = sampler_artifacts(session, record.id).get("weights")
    if weights is None:
        raise Problem(404, "not_found", "this sampler has no stored weights")
    return parsed, sampler_predictor(request, store, weights.path, weights.sha256)
