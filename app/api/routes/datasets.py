"""Datasets: upload (JSON, .npz, CSV — raw body or multipart), inspect, list, delete if unused."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from app.api.deps import CurrentTenant, SessionDep, SettingsDep, StoreDep
from app.api.pagination import PageSize, PageToken, clamp_page_size, cursor_of, next_token
from app.api.problems import Problem
from app.api.retention import RetentionSeconds, requested_expiry
from app.api.schemas import DatasetList, DatasetOut
from app.api.views import dataset_out
from inference_core.datasets import DatasetTooLarge, UnsupportedMediaType, parse_dataset_upload
from service.repositories import Datasets

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])

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
        "X": {"type": "array", "minItems": 1, "items": {"type": "array", "minItems": 1, "items": {"type": "number"}}},
        "y": {"type": "array", "items": {"type": "number"}},
        "X_test": {"type": "array", "minItems": 1, "items": {"type": "array", "minItems": 1, "items": {"type": "number"}}},
        "y_test": {"type": "array", "items": {"type": "number"}}}, "required": ["X"],
        "additionalProperties": False}},
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
    retention_seconds: RetentionSeconds = None,
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

    budget = request.app.state.decode_budget
    cost = budget.cost(len(data), media_type, settings.max_dataset_decompressed_bytes)

    def parse_and_store() -> DatasetOut:
        try:
            with budget.reserve(cost):
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
        record, artifact = Datasets(session, tenant).save(store, dataset, name=name, source_media_type=media_type,
                                                          expires_at=expires_at)
        return dataset_out(record, artifact)

    return await run_in_threadpool(parse_and_store)


@router.get("", response_model=DatasetList)
def list_datasets(
    session: SessionDep,
    tenant: CurrentTenant,
    settings: SettingsDep,
    page_size: PageSize = None,
    page_token: PageToken = None,
) -> DatasetList:
    size = clamp_page_size(page_size, settings.default_page_size, settings.max_page_size)
    filters, secret = {"kind": "datasets"}, settings.resolved_secret_key()
    page = Datasets(session, tenant).page(size, cursor_of(secret, page_token, filters))
    return DatasetList(datasets=[dataset_out(r, a) for r, a in page.items],
                       next_page_token=next_token(secret, page, filters))


@router.get("/{dataset_id}", response_model=DatasetOut)
def get_dataset(dataset_id: str, session: SessionDep, tenant: CurrentTenant) -> DatasetOut:
    datasets = Datasets(session, tenant)
    return dataset_out(datasets.owned(dataset_id), datasets.artifact(dataset_id))


@router.delete("/{dataset_id}", status_code=204)
def delete_dataset(dataset_id: str, session: SessionDep, tenant: CurrentTenant, store: StoreDep) -> Response:
    Datasets(session, tenant).delete(dataset_id, store)
    return Response(status_code=204)
