"""FastAPI application factory. Engines, store and task sender are built in the lifespan, not at import."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.api.access_log import log_access
from app.api.compute import TARGET_CACHE_SIZE, ComputePool, TargetCache, default_concurrency
from app.api.decode_budget import DecodeBudget
from app.api.docs import install_offline_docs
from app.api.middleware import (
    AuthMiddleware,
    BodyLimitMiddleware,
    BodyReadTimeoutMiddleware,
    InFlightLimitMiddleware,
    RequestIdMiddleware,
    RequestObserverMiddleware,
)
from app.api.observability import install_metrics
from app.api.openapi import add_problem_responses, bound_query_parameter, state_catalog_enums
from app.api.problems import install_problem_handlers
from app.api.routes import catalog, datasets, density, events, health, jobs, predict, samplers, targets
from app.api.sampler_cache import SamplerCache
from app.api.stream_slots import make_stream_slots
from app.ui.dashboard import install_dashboard
from inference_core import __version__
from inference_core.spec import JobSpec
from service.db import make_engine, make_session_factory, pool_capacity
from service.queue import make_celery
from service.settings import Settings, get_settings
from service.store import make_store

logger = logging.getLogger("parvis.api")
#: Default calls waiting per compute-pool thread before 503 `overloaded`: a cold API's burst of 40 concurrent
#: /sample calls with 100 polls (tests/integration/test_hardening_load.py) is admitted on 2 cores.
QUEUED_PER_THREAD = 16


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(settings.database_url)
        app.state.settings = settings
        app.state.engine = engine
        app.state.session_factory = make_session_factory(engine)
        app.state.session_gate = asyncio.Semaphore(pool_capacity(engine))  # deps.get_session
        app.state.store = make_store(settings.artifacts_url, settings)
        app.state.celery = make_celery(settings, main="parvis-api")
        app.state.sampler_cache = SamplerCache(settings.sampler_cache_size)
        app.state.decode_budget = DecodeBudget(settings.upload_decode_budget_bytes)  # shared by concurrent uploads
        app.state.target_cache = TargetCache(TARGET_CACHE_SIZE)  # float64 targets for /sample's log weights
        app.state.stream_slots = make_stream_slots(settings)  # open event streams per tenant (shared via Redis)
        # Torch and the samplers are imported in the background: /health/live answers at once, /health/ready
        # says `warm` once the first /sample no longer pays for the import.
        threads = settings.sample_concurrency or default_concurrency()
        app.state.compute = ComputePool(threads, settings.compute_queue_limit or QUEUED_PER_THREAD * threads,
                                        max_wait=settings.max_compute_wait_seconds)
        app.state.compute.start_warm_up()
        if not settings.auth_enabled:
            logger.warning("authentication is OFF: every request acts as the single tenant 'local'")
        yield
        app.state.compute.shutdown()
        app.state.stream_slots.close()
        engine.dispose()

    app = FastAPI(
        title="Parvis",
        version=__version__,
        description="Posterior sampling as a service: particle and generative variational inference.",
        openapi_url="/v1/openapi.json",
        docs_url=None,  # served from packaged assets by install_offline_docs, not from a CDN
        redoc_url=None,
        lifespan=lifespan,
        **fastapi_telemetry(settings),
    )
    install_problem_handlers(app)
    app.add_middleware(BodyLimitMiddleware, limit_for=lambda path: settings.max_dataset_bytes
                       if path.rstrip("/") == "/v1/datasets" else settings.max_request_bytes)
    app.add_middleware(BodyReadTimeoutMiddleware, timeout_for=lambda: settings.body_read_timeout_seconds)
    app.add_middleware(AuthMiddleware, enabled=settings.auth_enabled)  # outside the body limits: 401 first
    app.add_middleware(InFlightLimitMiddleware, limit=settings.max_in_flight_requests,
                       max_loop_lag=settings.max_loop_lag_seconds, max_wait=settings.max_queue_wait_seconds,
                       running=settings.max_running_requests, slot_wait=settings.max_slot_wait_seconds)
    app.add_middleware(RequestIdMiddleware)
    if settings.log_format == "json":
        app.add_middleware(RequestObserverMiddleware, observe=log_access)  # outermost: times the whole request, 413s included
    install_metrics(app, settings)  # Prometheus GET /metrics and the per-route latency middleware
    for module in (health, catalog, targets, jobs, density, events, datasets, samplers, predict):
        app.include_router(module.router)
    app.openapi = lambda: _openapi(app, settings)  # type: ignore[method-assign]
    install_offline_docs(app)
    install_dashboard(app, settings.auth_enabled)
    return app


def fastapi_telemetry(settings: Settings) -> dict:
    """FastAPI's own OpenTelemetry instrumentation (since 0.16x: spans, metrics and logs of every request, on by
    default): off unless `otel_telemetry` is set. Off, since it asks OpenTelemetry for its providers on every
    request (an environment lookup each): 13 % of the API process's busy samples (py-spy) at twice the target
    load, where the service exports its own metrics (`/metrics`) and access log. {} on a FastAPI without it."""
    if "telemetry" not in inspect.signature(FastAPI).parameters:
        return {}
    on = settings.otel_telemetry
    return {"telemetry": {"tracing": on, "metrics": on, "logs": on}}


def _openapi(app: FastAPI, settings: Settings) -> dict:
    """The generated spec, plus JobSpec (the submit body is parsed by hand to give precise error codes), and
    the problem responses and key requirement of every operation (app/api/openapi.py)."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        spec_schema = JobSpec.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(spec_schema.pop("$defs", {}))
        components["JobSpec"] = spec_schema
        submit = schema["paths"]["/v1/jobs"]["post"]
        submit["requestBody"] = {"required": True, "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/JobSpec"}}}}
        state_catalog_enums(schema)
        bound_query_parameter(schema, "/v1/jobs/{job_id}/density", "get", "grid", minimum=density.MIN_GRID,
                              maximum=max(density.MIN_GRID, settings.max_density_grid))
        add_problem_responses(schema, app.routes)
        app.openapi_schema = schema
    return app.openapi_schema
