"""All service settings in one pydantic-settings class, read from `PARVIS_*` environment variables.

Embedded default: everything lives under `data_dir` (SQLite file, filesystem broker, artifact folder).
Cluster: set `PARVIS_DATABASE_URL` (postgresql+psycopg://…), `PARVIS_BROKER_URL` (redis://…) and
`PARVIS_ARTIFACTS_URL` (a shared folder or s3://bucket/prefix).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from inference_core.spec import Limits


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PARVIS_", extra="ignore")

    data_dir: Path = Path("./parvis-data")
    database_url: str = ""
    broker_url: str = ""
    artifacts_url: str = ""
    # S3-compatible artifact store (PARVIS_ARTIFACTS_URL=s3://bucket/prefix): endpoint for MinIO & co. (empty:
    # AWS), region and keys; empty values fall back to boto3's chain (AWS_ACCESS_KEY_ID, ~/.aws, roles).
    s3_endpoint_url: str = ""
    s3_region: str = ""
    s3_access_key_id: str = ""
    s3_secret_access_key: SecretStr = SecretStr("")
    s3_max_attempts: int = 5  # botocore's retries (standard mode) for throttling, 5xx and dropped connections

    # Log lines: "text" for a terminal, "json" (one object a line: ts, level, logger, message, request_id,
    # job_id, tenant, exc, and an access line per request) for log collectors. docs/architecture.md, "Logs".
    log_format: Literal["text", "json"] = "text"

    auth_enabled: bool = False
    secret_key: str = Field(default="", description="signs page tokens; default: a file in data_dir")

    # Queues: one name for GPU training jobs (workers on GPU machines consume it).
    queue: str = "gpu"

    # Caps enforced at submit time.
    max_particles: int = 100_000
    max_steps: int = 1_000_000
    max_dim: int = 1_000_000
    max_job_memory_bytes: int = 8 * 1024**3  # a job's estimated working set (inference_core.memory), at submit
    max_metric_points_per_job: int = 100_000  # steps // metrics_every + 1, checked at submit
    max_request_bytes: int = 2 * 1024 * 1024
    body_read_timeout_seconds: float = 30.0  # a request body must arrive in full within this (else 408)
    max_active_jobs_per_tenant: int = 100
    # Open GET /v1/jobs/{id}/events streams per tenant (429 too_many_streams): shared by every API process via
    # Redis on the cluster shape, each slot leased for `stream_slot_ttl_seconds` and renewed while its stream is
    # open (a killed API process leaks its slots that long); counted per API process on the embedded shape.
    max_streams_per_tenant: int = 8
    stream_slot_ttl_seconds: float = Field(default=30.0, ge=1)
    max_dataset_bytes: int = 64 * 1024 * 1024
    max_dataset_rows: int = 2_000_000
    max_dataset_cols: int = 10_000
    # Memory an upload's parsed arrays may take (8 bytes a value at least); an .npz is checked from its headers
    # before anything is decompressed (413 dataset_too_large).
    max_dataset_decompressed_bytes: int = 256 * 1024 * 1024
    # Memory the uploads being decoded at once in one API process may reserve between them (app/api/
    # decode_budget.py: an .npz twice the cap above, a CSV three times its decoded values, JSON fifteen times
    # its size); past it 503 `overloaded`.
    upload_decode_budget_bytes: int = Field(default=1024 * 1024 * 1024, ge=1024 * 1024)
    max_validate_points: int = 1000
    max_density_grid: int = 200  # points per axis of GET /v1/jobs/{id}/density (grid² evaluations)
    max_sample_n: int = 100_000
    max_sample_values: int = 10_000_000  # n·len(x) per /sample call of a function-space sampler
    # Estimated answer size of one /sample call (n × values per draw × 4 bytes as .npy, × 20 as JSON).
    max_sample_bytes: int = 256 * 1024 * 1024
    # /sample draws and /predict answers computed at once per API process (the rest queue, holding no thread);
    # 0: 2 × cores.
    sample_concurrency: int = 0
    max_predict_values: int = 2_000_000  # posterior draws × inputs of one /predict request
    # One request's target evaluations (density grid, /targets/validate, /sample's log weights and corrections):
    # the intermediate values it holds at once are kept under `request_memory_bytes` by working through the
    # points and data rows in chunks (inference_core.targets.bounded), so an API process holds at most
    # `sample_concurrency` × this for them; and its work, points × data rows × values a row, is capped by
    # `max_evaluation_values` (413 limit_exceeded up front; 2³² is a few seconds of one core). /predict works
    # through its inputs in chunks and refuses a sampler's draws over half of it (app.api.routes.predict).
    request_memory_bytes: int = Field(default=256 * 1024 * 1024, ge=1024 * 1024)
    # Overload is shed, not queued (503 `overloaded` + Retry-After at once): requests in flight per API process
    # (probes and event streams not counted), how far behind its event loop may run (seconds; 0: no bound),
    # calls waiting for a compute-pool thread (0: 16 × the pool's threads), and the seconds a request may wait
    # for one of the database pool's connections.
    max_in_flight_requests: int = Field(default=256, ge=1)
    # FastAPI's built-in OpenTelemetry spans, metrics and logs per request (app.main.fastapi_telemetry): off by
    # default, as its per-request provider lookup costs CPU that overload needs; on for a deployment that exports them.
    otel_telemetry: bool = False
    # Time bounds (0: off, the default), armed 2 s after the compute warm-up and only with 8 or more requests in
    # flight (InFlightLimitMiddleware). Measured on (0.25 / 0.25, docs/benchmarks.md "Service under load"): they
    # refused 2% of the requests at the target rate on a quiet machine and left the 2x median at 10-11 s.
    max_loop_lag_seconds: float = Field(default=0.0, ge=0)
    max_queue_wait_seconds: float = Field(default=0.0, ge=0)  # the quickest answer of the last 0.1 s; 0: no bound
    # Handlers run at once per API process (0: no bound; the compute pool's routes and probes take none); the
    # admitted rest wait for one, FIFO, and once the process is warm a request that waited `max_slot_wait_seconds`
    # for one is refused (503 `overloaded`). Fewer at once serve more (less contention for the GIL): 15 s at 2x the
    # target rate, client on its own core, a training job on the service's (2026-11-29): no bound (256 in flight)
    # served 3,976 of 6,750 with a median answer of 1.1 s and p99 2.6 s; 16 at once 6,265 (p99 370 / 415 ms);
    # 8 at once 6,537 (p99 197 / 247 ms, every answer within 0.4 s).
    max_running_requests: int = Field(default=8, ge=0)
    max_slot_wait_seconds: float = Field(default=0.1, ge=0)
    compute_queue_limit: int = Field(default=0, ge=0)
    # Seconds a /sample, /predict, density or validate call submitted once the compute pool has been warm 2 s may
    # wait for one of its threads; past it the call is refused (503 `overloaded`) instead of run. 0 (the default):
    # no bound. At 0.25 s it refused no /sample at 2x the target rate on either shape (docs/benchmarks.md): the pool
    # never queued that long there, while slow /predict or density calls in a burst would be refused by it.
    max_compute_wait_seconds: float = Field(default=0.0, ge=0)
    db_wait_seconds: float = Field(default=5.0, gt=0)
    max_evaluation_values: int = Field(default=2**32, ge=1)
    sampler_cache_size: int = 16
    max_page_size: int = 1000
    default_page_size: int = 50

    # Job lifecycle (docs/architecture.md, "Job lifecycle"; docs/implementation-notes.md, "Celery for long jobs").
    max_attempts: int = 3
    lease_seconds: float = 30.0
    heartbeat_seconds: float = 2.0
    reaper_interval_seconds: float = 5.0
    requeue_stale_queued_seconds: float = 600.0
    progress_interval_seconds: float = 0.5
    job_time_limit_seconds: int = 7 * 24 * 3600
    worker_shutdown_grace_seconds: float = 20.0
    # Database outages while a job runs (docs/architecture.md, "Database outages"): failed writes are kept and
    # retried every `db_retry_seconds`; the worker stops writing `lease_safety_margin_seconds` (at most a
    # quarter of the lease) before its lease, as last renewed, would expire by its own clock.
    db_retry_seconds: float = Field(default=1.0, gt=0)
    lease_safety_margin_seconds: float = Field(default=5.0, ge=0)
    # torch intra-op threads in each worker process (PARVIS_WORKER_TORCH_THREADS); 0: max(1, (cores - 1) //
    # worker concurrency), one core left for the API and the other processes: more threads than free cores make
    # torch's spinning threads wait on each other (300 GPVI steps: 10.1 s with 2 threads on 2 busy cores, 2.8 s
    # with 1; 2.5 s either way on idle ones): the small particle systems gain little from more.
    worker_torch_threads: int = Field(default=0, ge=0)
    # Multi-process jobs (docs/architecture.md, "Multi-process jobs"): the most ranks one job may ask for
    # (resources.processes; more: 422 processes_over_cap); how many of a job's ranks the worker that claims it runs
    # on its own machine (0: one per CUDA device, else one per CPU core); the rest are claimed by other workers
    # through rank messages. `worker_address`: where other machines reach this one's rendezvous store (empty: the
    # host's name). `rank_timeout_seconds`: the longest a rank waits for the others (rendezvous, any collective)
    # before the attempt fails as `rank_failed`, and is retried from its last checkpoint.
    max_processes_per_job: int = Field(default=8, ge=1)
    worker_local_ranks: int = Field(default=0, ge=0)
    worker_address: str = ""
    rank_timeout_seconds: float = Field(default=60.0, gt=0)

    # Retention (docs/architecture.md, "Retention"): jobs, samplers and data sets get `expires_at` = creation +
    # `retention_days` (fractions allowed; 0 = keep forever), or the tenant's own value from
    # `PARVIS_RETENTION_DAYS_BY_TENANT='{"acme": 7}'`; each worker's sweeper deletes expired rows and their bytes
    # every `sweep_interval_seconds`.
    retention_days: float = Field(default=30.0, ge=0)
    # The longest `retention_seconds` a client may ask for at creation; 0: the tenant's retention (clients may
    # only shorten it; no bound when that is forever).
    max_retention_days: float = Field(default=0.0, ge=0)
    retention_days_by_tenant: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)
    sweep_interval_seconds: float = Field(default=300.0, gt=0)

    # Prometheus scrape endpoint `GET /metrics` (aggregates only): a bearer token if set; DB-derived gauges are
    # cached `metrics_cache_seconds`; job durations cover jobs finished in the last `metrics_window_seconds`.
    metrics_token: str = ""
    metrics_cache_seconds: float = Field(default=5.0, ge=0)
    metrics_window_seconds: float = Field(default=3600.0, gt=0)

    @model_validator(mode="after")
    def _fill_embedded_defaults(self) -> Settings:
        data_dir = self.data_dir.expanduser().resolve()
        self.data_dir = data_dir
        if not self.database_url:
            self.database_url = f"sqlite:///{data_dir / 'parvis.db'}"
        if not self.broker_url:
            self.broker_url = "filesystem://"
        if not self.artifacts_url:
            self.artifacts_url = str(data_dir / "artifacts")
        return self

    @property
    def embedded_broker(self) -> bool:
        return self.broker_url.startswith("filesystem://")

    @property
    def redis_broker(self) -> bool:
        """A Redis broker: shared state between processes (stream slots) and a `run_id` to watch."""
        return self.broker_url.startswith(("redis://", "rediss://", "unix://"))

    @property
    def broker_dir(self) -> Path:
        return self.data_dir / "broker"

    @property
    def visibility_timeout_seconds(self) -> int:
        # Above the longest job, so Redis never redelivers a running job's message (celery#5935).
        return int(self.job_time_limit_seconds + 3600)

    def resolved_secret_key(self) -> str:
        if self.secret_key:
            return self.secret_key
        path = self.data_dir / "secret_key"
        if not path.exists():
            import os
            import secrets

            self.data_dir.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"secret_key.{os.getpid()}.tmp")
            tmp.write_text(secrets.token_hex(32))
            try:
                os.link(tmp, path)  # atomic create-if-absent: concurrent first starts agree on one key
            except FileExistsError:
                pass
            finally:
                tmp.unlink()
        return path.read_text().strip()

    def limits(self) -> Limits:
        """The caps a job spec is admitted under (inference_core.spec.admit), in the API and the worker alike."""
        return Limits(max_particles=self.max_particles, max_steps=self.max_steps, max_dim=self.max_dim,
                      max_job_memory_bytes=self.max_job_memory_bytes,
                      max_metric_points=self.max_metric_points_per_job, max_processes=self.max_processes_per_job)


@lru_cache
def get_settings() -> Settings:
    return Settings()
