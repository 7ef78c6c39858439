"""Datasets: upload (JSON, .npz, CSV — raw body or multipart), inspect, list, delete if unused.

An upload's body is streamed into an anonymous temporary file (under `data_dir/uploads`, the system temp dir if
that cannot be made) a chunk at a time, never held in memory whole, and parsed from that file; the file has no
name, so it is gone once closed, whatever happens (a parse error, a 413, a client that goes away, a killed
process). A body over `PARVIS_MAX_DATASET_BYTES` is refused as soon as it passes the limit (413
`payload_too_large`, from the body-limit middleware or here), the rest of it unread."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from contextlib import aclosing
from typing import IO, Annotated

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from app.api.deps import CurrentTenant, SessionDep, SettingsDep, StoreDep
from app.api.pagination import PageSize, PageToken, clamp_page_size, cursor_of, next_token
from app.api.problems import Problem
from app.api.retention import RetentionSeconds, requested_expiry
from app.api.schemas import DatasetList, DatasetOut
from app.api.views import dataset_out
from inference_core.datasets import DatasetTooLarge, UnsupportedMediaType, parse_dataset_upload, uploads
from service.repositories import Datasets
from service.settings import Settings

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
    limit = settings.max_dataset_bytes
    spool = await run_in_threadpool(_spool_file, settings)
    try:
        if media_type == "multipart/form-data":
            async with request.form() as form:  # closing the form deletes Starlette's own spooled copy
                upload = form.get("file")
                if upload is None or isinstance(upload, str):
                    raise Problem(422, "dataset_invalid", "multipart upload needs a file field named 'file'")
                filename = (upload.filename or "").lower()
                media_type = ("text/csv" if filename.endswith(".csv") else "application/x-npz"
                              if filename.endswith(".npz") else "application/json" if filename.endswith(".json")
                              else (upload.content_type or "application/octet-stream"))
                name = name or (str(form.get("name")) if form.get("name") else upload.filename)
                if form.get("target_column") is not None:
                    target_column = str(form.get("target_column"))
                size, separators = await run_in_threadpool(_copy_upload, upload, spool, limit, _counter(media_type))
        else:
            size, separators = await _receive_body(request, spool, limit, _counter(media_type))
        budget = request.app.state.decode_budget
        cost = budget.cost(size, media_type, settings.max_dataset_decompressed_bytes, fields=separators + 1)

        def parse_and_store() -> DatasetOut:
            if media_type in uploads.NPZ_MEDIA_TYPES:  # refused by its zip directory alone: no budget reserved, no wait
                try:
                    uploads.check_npz_declared_size(spool, settings.max_dataset_decompressed_bytes)
                except DatasetTooLarge as exc:
                    raise Problem(413, "dataset_too_large", str(exc)) from None
            # The reservation covers the save too: the stored .npz is made while the parsed arrays are held.
            with budget.reserve(cost):
                try:
                    dataset = parse_dataset_upload(spool, media_type, max_rows=settings.max_dataset_rows,
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
                spool.truncate(0)  # the body is no longer needed: give its disk space back now
                record, artifact = Datasets(session, tenant).save(store, dataset, name=name,
                                                                  source_media_type=media_type, expires_at=expires_at)
            return dataset_out(record, artifact)

        # Not cancellable once started (run_in_threadpool waits for the thread), so the file outlives its use.
        return await run_in_threadpool(parse_and_store)
    finally:
        spool.close()


UPLOAD_CHUNK_BYTES = 1 << 20
"""Bytes of a body gathered in memory before they are written to its temporary file (and read back at a time)."""


def _spool_file(settings: Settings) -> IO[bytes]:
    """An anonymous temporary file for an upload's body, in `data_dir/uploads`, else in the system temp dir."""
    directory = settings.data_dir / "uploads"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        return tempfile.TemporaryFile(prefix="upload-", dir=directory)
    except OSError:
        return tempfile.TemporaryFile(prefix="parvis-upload-")


def _counter(media_type: str) -> Callable[[bytes], int] | None:
    """What a body is measured by as it arrives, beside its size: a CSV's separators (its parse's cost)."""
    return uploads.csv_separators if media_type in uploads.CSV_MEDIA_TYPES else None


def _too_large(limit: int) -> Problem:
    # The body-limit middleware answers the same (it counts the whole body; this counts the file's bytes).
    return Problem(413, "payload_too_large", f"request body is over the limit of {limit} bytes")


async def _receive_body(request: Request, spool: IO[bytes], limit: int,
                        count: Callable[[bytes], int] | None) -> tuple[int, int]:
    """Stream the request body into `spool`, a chunk at a time; 413 as soon as it passes `limit` bytes, the rest
    unread. Returns (bytes, what `count` found in them)."""
    size = counted = 0
    pending = bytearray()
    async with aclosing(request.stream()) as chunks:
        async for chunk in chunks:
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            if count is not None:
                counted += count(chunk)
            pending += chunk
            if len(pending) >= UPLOAD_CHUNK_BYTES:
                await run_in_threadpool(spool.write, pending)
                pending.clear()
    if pending:
        await run_in_threadpool(spool.write, pending)
    return size, counted


def _copy_upload(upload: UploadFile, spool: IO[bytes], limit: int,
                 count: Callable[[bytes], int] | None) -> tuple[int, int]:
    """A multipart file (already spooled by Starlette) into `spool`, a chunk at a time, as `_receive_body`."""
    size = counted = 0
    upload.file.seek(0)
    while chunk := upload.file.read(UPLOAD_CHUNK_BYTES):
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        if count is not None:
            counted += count(chunk)
        spool.write(chunk)
    return size, counted


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
