"""SQLAlchemy 2.x models. Every object row carries its owning `tenant_id` (the embedded user is `local`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

JOB_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled"})

JSONType = JSON().with_variant(JSONB(), "postgresql")
BigId = BigInteger().with_variant(Integer(), "sqlite")  # SQLite autoincrements INTEGER PRIMARY KEY only


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator):
    """Timezone-aware UTC timestamps on every backend (SQLite stores naive text; we re-attach UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Job(Base):
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), default="queued")
    method: Mapped[str] = mapped_column(String(64))
    name: Mapped[str | None] = mapped_column(String(200))
    spec: Mapped[dict[str, Any]] = mapped_column(JSONType)
    spec_sha256: Mapped[str] = mapped_column(String(64))
    idempotency_key: Mapped[str | None] = mapped_column(String(255))

    attempt: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)

    progress: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    metrics: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    quality: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    checkpoint_step: Mapped[int | None] = mapped_column(Integer)
    resumed_from_step: Mapped[int | None] = mapped_column(Integer)
    # Multi-process jobs: where the ranks of the current attempt meet (workers.ranks.Rendezvous); null otherwise.
    rendezvous: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_detail: Mapped[str | None] = mapped_column(Text)

    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)
    enqueued_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # Retention: past this instant a finished job answers 410 and the sweeper deletes it (null: kept forever).
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (
        CheckConstraint(f"status IN {JOB_STATUSES}", name="status_valid"),
        UniqueConstraint("tenant_id", "idempotency_key"),
        Index("ix_jobs_tenant_created", "tenant_id", "created_at", "id"),
        Index("ix_jobs_status_lease", "status", "lease_expires_at"),
        Index("ix_jobs_expires_at", "expires_at"),
    )


class MetricPoint(Base):
    __tablename__ = "metric_points"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    tenant_id: Mapped[str] = mapped_column(String(64))
    step: Mapped[int] = mapped_column(Integer)
    wall_time_s: Mapped[float] = mapped_column(Float)
    values: Mapped[dict[str, Any]] = mapped_column(JSONType)

    __table_args__ = (Index("ix_metric_points_job_step", "job_id", "step"),)


class Sampler(Base):
    __tablename__ = "samplers"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    method: Mapped[str] = mapped_column(String(64))
    config: Mapped[dict[str, Any]] = mapped_column(JSONType)
    quality: Mapped[dict[str, Any] | None] = mapped_column(JSONType)  # certificate (issue 16); null: none
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())  # its job's (it is deleted with the job)

    __table_args__ = (
        Index("ix_samplers_tenant_created", "tenant_id", "created_at", "id"),
        Index("ix_samplers_expires_at", "expires_at"),
    )


class DatasetRecord(Base):
    """An uploaded data set (stored as .npz in the artifact store); jobs reference it by id."""

    __tablename__ = "datasets"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    name: Mapped[str | None] = mapped_column(String(200))
    n_rows: Mapped[int] = mapped_column(Integer)
    n_features: Mapped[int] = mapped_column(Integer)
    n_test_rows: Mapped[int] = mapped_column(Integer, default=0)
    y_kind: Mapped[str] = mapped_column(String(16))  # none | float | labels
    n_classes: Mapped[int | None] = mapped_column(Integer)
    source_media_type: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())  # kept past it while an active job uses it

    __table_args__ = (
        Index("ix_datasets_tenant_created", "tenant_id", "created_at", "id"),
        Index("ix_datasets_expires_at", "expires_at"),
    )


class JobDataset(Base):
    """Which uploaded data sets a job uses (a data set a live job uses cannot be deleted)."""

    __tablename__ = "job_datasets"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), primary_key=True)

    __table_args__ = (Index("ix_job_datasets_dataset", "dataset_id"),)


class Artifact(Base):
    """A stored blob (particles, checkpoint, weights, ...): where it is, its digest, size and media type."""

    __tablename__ = "artifacts"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[str | None] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    sampler_id: Mapped[str | None] = mapped_column(ForeignKey("samplers.id", ondelete="CASCADE"))
    dataset_id: Mapped[str | None] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"))
    role: Mapped[str] = mapped_column(String(32))
    path: Mapped[str] = mapped_column(String(512))
    sha256: Mapped[str] = mapped_column(String(64))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    media_type: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    __table_args__ = (
        UniqueConstraint("job_id", "role"),
        Index("ix_artifacts_tenant", "tenant_id"),
        Index("ix_artifacts_sampler", "sampler_id"),
        Index("ix_artifacts_dataset", "dataset_id"),
    )


class ApiKey(Base):
    """A tenant's API key: only a lookup prefix and the sha256 of the whole key are stored."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(64))
    prefix: Mapped[str] = mapped_column(String(32), unique=True)
    key_sha256: Mapped[str] = mapped_column(String(64))
    name: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (Index("ix_api_keys_tenant", "tenant_id"),)


class WorkerHeartbeat(Base):
    """Live workers, so readiness can tell whether anything will run a job (transport-independent)."""

    __tablename__ = "workers"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    queues: Mapped[str] = mapped_column(String(255))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class PendingDeletion(Base):
    """Artifact bytes (a store key or key prefix) whose rows are deleted but whose deletion from the store has
    not succeeded yet. Recorded in the transaction that deletes the rows, removed once the bytes are gone;
    the retention sweeper retries what is left (service/retention.py), so no bytes are orphaned for good."""

    __tablename__ = "pending_deletions"

    prefix: Mapped[str] = mapped_column(String(512), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
