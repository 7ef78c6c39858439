"""Prometheus `GET /metrics` (text exposition format): aggregates only, never a tenant, job or key id.

Two sources:
- HTTP latency per route template, observed in this process by `RequestObserverMiddleware`
  (`parvis_http_request_duration_seconds{route,method,status}`, which covers `/sample`).
- Job gauges read from the database at scrape time (cached `metrics_cache_seconds`, one reader at a time):
  jobs by state, queue depth, a gauge histogram of the run time of jobs finished in the last
  `metrics_window_seconds`, and training steps/s of running jobs by method.

Several API processes (`uvicorn --workers N`): each keeps its own latency histogram, so a scrape answered by
one process shows only its requests — unless `PROMETHEUS_MULTIPROC_DIR` names an empty directory shared by
the processes (set before they start, emptied at each start), in which case prometheus_client's multiprocess
mode sums them. The database gauges are the same from any process.
"""

from __future__ import annotations

import hmac
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from starlette.types import Scope

from app.api.middleware import RequestObserverMiddleware
from app.api.problems import Problem
from service.models import JOB_STATUSES, Job, utcnow
from service.settings import Settings

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
JOB_DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 3 * 3600, 12 * 3600, 24 * 3600, 7 * 24 * 3600)
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

router = APIRouter(tags=["operations"])


class HttpMetrics:
    """The in-process latency histogram (registered in this app's registry, or in the shared multiprocess
    files when PROMETHEUS_MULTIPROC_DIR is set)."""

    def __init__(self) -> None:
        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "parvis_http_request_duration_seconds",
            "HTTP request latency, from the request's arrival to the end of its response, by route template",
            ["route", "method", "status"], buckets=LATENCY_BUCKETS,
            registry=None if self.multiprocess else self.registry)

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        self.latency.labels(route, method if method in KNOWN_METHODS else "other", str(status)).observe(seconds)

    def observe_request(self, scope: Scope, status: int, seconds: float) -> None:
        """For RequestObserverMiddleware. The label is the matched route's template (`/v1/jobs/{job_id}`),
        never the raw path, so ids cannot blow up the number of series (`unmatched` for unknown paths)."""
        route = getattr(scope.get("route"), "path", None) or "unmatched"
        self.observe(route, scope["method"], status, seconds)


@dataclass
class JobSnapshot:
    """What the database says at one scrape."""

    by_state: dict[str, int]
    durations: dict[str, list[float]] = field(default_factory=dict)  # final status -> run seconds
    steps_per_second: dict[str, float] = field(default_factory=dict)  # method -> summed rate


def read_job_snapshot(session: Session, window_seconds: float) -> JobSnapshot:
    now = utcnow()
    counts = dict(session.execute(select(Job.status, func.count()).group_by(Job.status)).all())
    snapshot = JobSnapshot(by_state={state: int(counts.get(state, 0)) for state in JOB_STATUSES})
    finished = session.execute(select(Job.status, Job.started_at, Job.finished_at).where(
        Job.finished_at >= now - timedelta(seconds=window_seconds), Job.started_at.is_not(None)))
    for status, started_at, finished_at in finished:
        snapshot.durations.setdefault(status, []).append(max(0.0, (finished_at - started_at).total_seconds()))
    for method, progress in session.execute(select(Job.method, Job.progress).where(Job.status == "running")):
        rate = steps_per_second(progress)
        if rate is not None:
            snapshot.steps_per_second[method] = snapshot.steps_per_second.get(method, 0.0) + rate
    return snapshot


def steps_per_second(progress: dict[str, Any] | None) -> float | None:
    """The current attempt's mean rate, from the progress the worker reports: remaining steps / eta."""
    if not progress:
        return None
    eta, step, total = progress.get("eta_s"), progress.get("step"), progress.get("total_steps")
    if not eta or eta <= 0 or step is None or total is None or total <= step:
        return None
    return (total - step) / eta


class JobCollector(Collector):
    """Job families computed from the database, cached for `cache_seconds`; `parvis_database_up` is 0 (and
    the job families are absent) when the database cannot be read."""

    def __init__(self, session_factory: Callable[[], Session], settings: Settings):
        self.session_factory = session_factory
        self.settings = settings
        self.lock = threading.Lock()
        self.cached: JobSnapshot | None = None
        self.cached_at = 0.0

    def snapshot(self) -> JobSnapshot | None:
        with self.lock:  # one scrape reads the database; concurrent ones wait for its answer
            if self.cached is not None and time.monotonic() - self.cached_at < self.settings.metrics_cache_seconds:
                return self.cached
            try:
                with self.session_factory() as session:
                    self.cached = read_job_snapshot(session, self.settings.metrics_window_seconds)
            except SQLAlchemyError:
                self.cached = None
                return None
            self.cached_at = time.monotonic()
            return self.cached

    def collect(self) -> Iterator[Metric]:
        snapshot = self.snapshot()
        yield GaugeMetricFamily("parvis_database_up", "1 if the database answered this scrape's queries",
                                value=0 if snapshot is None else 1)
        if snapshot is None:
            return
        jobs = GaugeMetricFamily("parvis_jobs", "Jobs in the database by state (all tenants)", labels=["state"])
        for state, count in snapshot.by_state.items():
            jobs.add_metric([state], count)
        yield jobs
        yield GaugeMetricFamily("parvis_queue_depth", "Jobs queued and not yet claimed by a worker",
                                value=snapshot.by_state.get("queued", 0))
        durations = GaugeHistogramMetricFamily(
            "parvis_job_duration_seconds",
            f"Run time (finished_at - started_at) of the jobs that finished in the last "
            f"{self.settings.metrics_window_seconds:g} s, by final status; recomputed at each scrape",
            labels=["status"])
        for status in sorted(snapshot.durations):
            values = snapshot.durations[status]
            buckets = [(f"{bound:g}", float(sum(v <= bound for v in values))) for bound in JOB_DURATION_BUCKETS]
            durations.add_metric([status], [*buckets, ("+Inf", float(len(values)))], sum(values))
        yield durations
        rates = GaugeMetricFamily("parvis_training_steps_per_second",
                                  "Summed training rate of the running jobs (mean of each one's current attempt)",
                                  labels=["method"])
        for method in sorted(snapshot.steps_per_second):
            rates.add_metric([method], snapshot.steps_per_second[method])
        yield rates


class PrometheusMetrics:
    def __init__(self, app: FastAPI, settings: Settings):
        self.settings = settings
        self.http = HttpMetrics()
        # The session factory exists once the app's lifespan has started: looked up at each scrape.
        self.jobs = JobCollector(lambda: app.state.session_factory(), settings)
        if not self.http.multiprocess:
            self.http.registry.register(self.jobs)

    def render(self) -> bytes:
        if not self.http.multiprocess:
            return generate_latest(self.http.registry)
        from prometheus_client.multiprocess import MultiProcessCollector

        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # every process's latency histogram, from the shared directory
        registry.register(self.jobs)
        return generate_latest(registry)


def install_metrics(app: FastAPI, settings: Settings) -> None:
    """Add the latency middleware (outermost among those added so far) and the `/metrics` route."""
    metrics = PrometheusMetrics(app, settings)
    app.state.prometheus = metrics
    app.add_middleware(RequestObserverMiddleware, observe=metrics.http.observe_request)
    app.include_router(router)


@router.get("/metrics", response_class=Response, responses={
    200: {"content": {"text/plain": {"schema": {"type": "string"}}},
          "description": "Prometheus text exposition format (version 0.0.4)"}})
def prometheus_metrics(request: Request) -> Response:
    """Aggregate service metrics for Prometheus. If `PARVIS_METRICS_TOKEN` is set, the scraper must send
    `Authorization: Bearer <token>`."""
    metrics: PrometheusMetrics = request.app.state.prometheus
    token = metrics.settings.metrics_token
    if token:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            raise Problem(401, "unauthorized", "this metrics endpoint needs Authorization: Bearer <metrics token>",
                          headers={"WWW-Authenticate": "Bearer"})
    return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)
