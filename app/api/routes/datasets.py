"""Datasets: upload (JSON, .npz, CSV — raw body or multipart), inspect, list, delete if unused."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel
from sqlalchemy import and_, delete, or_, select
from starlette.concurrency import run_in_threadpool

from app.api.deps import CurrentTenant, SessionDep, SettingsDep, StoreDep
from app.api.pagination import clamp_page_size, decode_token, encode_token
from app.api.problems import Problem, not_found
from app.api.retention import RETENTION_QUERY_DESCRIPTION, expired, requested_expiry
from inference_core.datasets import DatasetTooLarge, UnsupportedMediaType, parse_dataset_upload
from service.datasets import owned_dataset, save_dataset
from service.models import Artifact, DatasetRecord, Job, JobDataset, utcnow
from service.retention import delete_bytes, is_expired, not_expired

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])

ACTIVE = ("queued", "running")


class DatasetOut(BaseModel):
    id: str
    name: str | None
    n_rows: int
    n_features: int
    n_test_rows: int
    y: str  # none | float | labels
    n_classes: int | None
    dtype: str
    sha256: str
    size_bytes: int
    created_at: datetime
    expires_at: datetime | None = None  # retention: 410 `expired` once past; null: kept forever


class DatasetList(BaseModel):
    datasets: list[DatasetOut]
    next_page_token: str | None


def dataset_out(record: DatasetRecord, artifact: Artifact) -> DatasetOut:
    return DatasetOut(id=record.id, name=record.name, n_rows=record.n_rows, n_features=record.n_features,
                      n_test_rows=record.n_test_rows, y=record.y_kind, n_classes=record.n_classes,
                      dtype="float64", sha256=artifact.sha256, size_bytes=artifact.size_bytes,
                      created_at=record.created_at, expires_at=record.expires_at)


def _artifact(session, dataset_id: str) -> Artifact:  # noqa: ANN001
    return session.execute(select(Artifact).where(Artifact.dataset_id == dataset_id,
                                                  Artifact.role == "dataset")).scalar_one()


def _parse_target_column(value: str | None) -> int | str | None:
    if value is None:
        return -1
    if value.lower() == "none":
        return None
    try:
        return int(value)
    except ValueError:
        return value


@router.post("", status_code=201, response_model=DatasetOut, openapi_extra={"requestBody": {"content": {
    "application/json": {"schema": {"type": "object", "properties": {
        "X": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
        "y": {"type": "array", "items": {"type": "number"}}}, "required": ["X"]}},
    "application/x-npz": {"schema": {"type": "string", "format": "binary"}},
    "text/csv": {"schema": {"type": "string"}},
    "multipart/form-data": {"schema": {"type": "object", "properties": {
        "file": {"type": "string", "format": "binary"}}}}}}})
async def upload_dataset(
    request: Request,
    session: SessionDep,
    tenant: CurrentTenant,
    settings: SettingsDep,
    store: StoreDep,
    name: Annotated[str | None, Query(max_length=200)] = None,
    target_column: Annotated[str | None, Query(description="CSV: y column (index, header name, or 'none')")]
    = None,
    header: Annotated[bool | None, Query(description="CSV: first line is a header (default: detect)")] = None,
    retention_seconds: Annotated[int | None, Query(ge=1, description=RETENTION_QUERY_DESCRIPTION)] = None,
) -> DatasetOut:
    """Body: JSON `{"X": [[..]], "y": [..]}`, a `.npz` (arrays X, y), or CSV (last column is y unless
    `target_column` says otherwise) — sent raw with its Content-Type, or as multipart field `file`."""
    expires_at = requested_expiry(settings, tenant, retention_seconds)  # 422 before the body is read
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type == "multipart/form-data":
        form = await request.form()
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise Problem(422, "dataset_invalid", "multipart upload needs a file field named 'file'")
        data = await upload.read()
        filename = (upload.filename or "").lower()
        media_type = ("text/csv" if filename.endswith(".csv") else "application/x-npz"
                      if filename.endswith(".npz") else "application/json" if filename.endswith(".json")
                      else (upload.content_type or "application/octet-stream"))
        name = name or (str(form.get("name")) if form.get("name") else upload.filename)
        if form.get("target_column") is not None:
            target_column = str(form.get("target_column"))
    else:
        data = await request.body()

    def parse_and_store() -> DatasetOut:
        try:
            dataset = parse_dataset_upload(data, media_type, max_rows=settings.max_dataset_rows,
                                           max_cols=settings.max_dataset_cols,
                                           target_column=_parse_target_column(target_column), header=header,
                                           name=name or "upload",
                                           max_bytes=settings.max_dataset_decompressed_bytes)
        except UnsupportedMediaType as exc:
            raise Problem(415, "unsupported_media_type", str(exc)) from None
        except DatasetTooLarge as exc:
            raise Problem(413, "dataset_too_large", str(exc)) from None
        except ValueError as exc:
            raise Problem(422, "dataset_invalid", str(exc)) from None
        record, artifact = save_dataset(session, store, tenant, dataset, name=name,
                                        source_media_type=media_type, expires_at=expires_at)
        return dataset_out(record, artifact)

    return await run_in_threadpool(parse_and_store)


@router.get("", response_model=DatasetList)
def list_datasets(
    session: SessionDep,
    tenant: CurrentTenant,
    settings: SettingsDep,
    page_size: Annotated[int | None, Query()] = None,
    page_token: Annotated[str | None, Query()] = None,
) -> DatasetList:
    size = clamp_page_size(page_size, settings.default_page_size, settings.max_page_size)
    query = select(DatasetRecord, Artifact).join(Artifact, Artifact.dataset_id == DatasetRecord.id).where(
        DatasetRecord.tenant_id == tenant, not_expired(DatasetRecord.expires_at, utcnow()))
    if page_token:
        created, last_id = decode_token(settings.resolved_secret_key(), page_token, {"kind": "datasets"})
        query = query.where(or_(DatasetRecord.created_at < created,
                                and_(DatasetRecord.created_at == created, DatasetRecord.id < last_id)))
    rows = session.execute(query.order_by(DatasetRecord.created_at.desc(), DatasetRecord.id.desc())
                           .limit(size + 1)).all()
    page = rows[:size]
    token = (encode_token(settings.resolved_secret_key(), page[-1][0].created_at, page[-1][0].id,
                          {"kind": "datasets"}) if len(rows) > size else None)
    return DatasetList(datasets=[dataset_out(r, a) for r, a in page], next_page_token=token)


@router.get("/{dataset_id}", response_model=DatasetOut)
def get_dataset(dataset_id: str, session: SessionDep, tenant: CurrentTenant) -> DatasetOut:
    record = owned_dataset(session, tenant, dataset_id)
    if record is None:
        raise not_found("dataset", dataset_id)
    if is_expired(record.expires_at):
        raise expired("dataset", dataset_id, record.expires_at)
    return dataset_out(record, _artifact(session, dataset_id))


@router.delete("/{dataset_id}", status_code=204)
def delete_dataset(dataset_id: str, session: SessionDep, tenant: CurrentTenant, store: StoreDep) -> Response:
    record = owned_dataset(session, tenant, dataset_id)
    if record is None:
        raise not_found("dataset", dataset_id)
    if is_expired(record.expires_at):
        raise expired("dataset", dataset_id, record.expires_at)
    live = session.execute(select(Job.id).join(JobDataset, JobDataset.job_id == Job.id).where(
        JobDataset.dataset_id == dataset_id, Job.status.in_(ACTIVE)).limit(1)).scalar_one_or_none()
    if live is not None:
        raise Problem(409, "dataset_in_use", f"job {live} is queued or running with this dataset")
    path = _artifact(session, dataset_id).path
    session.execute(delete(DatasetRecord).where(DatasetRecord.id == dataset_id, DatasetRecord.tenant_id == tenant))
    delete_bytes(session, store, [path.rsplit("/", 1)[0]])  # commits; a failed deletion is retried by the sweeper
    return Response(status_code=204)
