"""`Datasets(session, tenant)`: a tenant's uploaded data sets — save, find, page, delete if unused — and the
shapes a job spec's admission checks against (inference_core.admission)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from inference_core.datasets import Dataset, dataset_to_npz
from inference_core.datasets.columns import DatasetShape
from service.errors import Conflict, Expired, NotFound, Rejected
from service.job_state import new_id
from service.models import Artifact, DatasetRecord, Job, JobDataset, utcnow
from service.repositories.pages import Cursor, Page, newest_first
from service.retention import delete_bytes, is_expired, not_expired
from service.store import ArtifactStore

DATASET_MEDIA_TYPE = "application/x-npz"
ACTIVE_STATUSES = ("queued", "running")


def dataset_key(dataset_id: str) -> str:
    return f"datasets/{dataset_id}/data.npz"


class Datasets:
    def __init__(self, session: Session, tenant: str):
        self.session = session
        self.tenant = tenant

    def _find(self, dataset_id: str) -> DatasetRecord | None:
        return self.session.execute(select(DatasetRecord).where(
            DatasetRecord.id == dataset_id, DatasetRecord.tenant_id == self.tenant)).scalar_one_or_none()

    def owned(self, dataset_id: str) -> DatasetRecord:
        record = self._find(dataset_id)
        if record is None:
            raise NotFound.of("dataset", dataset_id)
        if is_expired(record.expires_at):
            raise Expired.of("dataset", dataset_id, record.expires_at)
        return record

    def artifact(self, dataset_id: str) -> Artifact:
        """The stored .npz of a data set already found by `owned` (or `path`)."""
        return self.session.execute(select(Artifact).where(Artifact.dataset_id == dataset_id,
                                                           Artifact.role == "dataset")).scalar_one()

    def path(self, dataset_id: str) -> str | None:
        """Where the tenant's data set is stored, None when it has none by that id (expired ones included:
        a job admitted before the expiry still reads its data)."""
        return None if self._find(dataset_id) is None else self.artifact(dataset_id).path

    def page(self, size: int, after: Cursor | None = None) -> Page[tuple[DatasetRecord, Artifact]]:
        query = select(DatasetRecord, Artifact).join(Artifact, Artifact.dataset_id == DatasetRecord.id).where(
            DatasetRecord.tenant_id == self.tenant, not_expired(DatasetRecord.expires_at, utcnow()))
        return newest_first(self.session, query, DatasetRecord, size, after)

    def save(self, store: ArtifactStore, dataset: Dataset, *, name: str | None, source_media_type: str,
             expires_at: datetime | None = None) -> tuple[DatasetRecord, Artifact]:
        dataset_id = new_id("ds")
        blob = store.put(dataset_key(dataset_id), dataset_to_npz(dataset))
        y_kind = "none" if dataset.y is None else ("labels" if dataset.labels_are_integers else "float")
        n_classes = int(dataset.y.max()) + 1 if y_kind == "labels" and dataset.y.size else None
        record = DatasetRecord(id=dataset_id, tenant_id=self.tenant, name=name, n_rows=dataset.n_rows,
                               n_features=dataset.n_features, n_test_rows=dataset.n_test_rows, y_kind=y_kind,
                               n_classes=n_classes, source_media_type=source_media_type, expires_at=expires_at)
        artifact = Artifact(id=new_id("art"), tenant_id=self.tenant, dataset_id=dataset_id, role="dataset",
                            path=blob.key, sha256=blob.sha256, size_bytes=blob.size_bytes,
                            media_type=DATASET_MEDIA_TYPE)
        self.session.add(record)
        self.session.flush()
        self.session.add(artifact)
        self.session.commit()
        return record, artifact

    def delete(self, dataset_id: str, store: ArtifactStore) -> None:
        """409 `dataset_in_use` while a queued or running job reads it; the bytes go with the row (a failed
        deletion is retried by the sweeper)."""
        self.owned(dataset_id)
        live = self.session.execute(select(Job.id).join(JobDataset, JobDataset.job_id == Job.id).where(
            JobDataset.dataset_id == dataset_id, Job.status.in_(ACTIVE_STATUSES)).limit(1)).scalar_one_or_none()
        if live is not None:
            raise Conflict(f"job {live} is queued or running with this dataset", code="dataset_in_use")
        path = self.artifact(dataset_id).path
        self.session.execute(delete(DatasetRecord).where(DatasetRecord.id == dataset_id,
                                                         DatasetRecord.tenant_id == self.tenant))
        delete_bytes(self.session, store, [path.rsplit("/", 1)[0]])  # commits

    def shapes(self, dataset_ids: Iterable[str], *, live_only: bool = True) -> dict[str, DatasetShape]:
        """The shapes of data sets a job spec names, for its admission: each must be the tenant's own and, unless
        `live_only` is off (the worker's admission of a job submitted before the expiry), live (422
        `dataset_unknown` / `dataset_expired` at `target.dataset`)."""
        shapes = {}
        for dataset_id in dataset_ids:
            record = self._find(dataset_id)
            if record is None:
                raise Rejected(f"no dataset {dataset_id!r}", code="dataset_unknown", loc=("target", "dataset"))
            if live_only and is_expired(record.expires_at):
                raise Rejected(f"dataset {dataset_id!r} has expired", code="dataset_expired",
                               loc=("target", "dataset"))
            shapes[dataset_id] = DatasetShape(record.n_rows, record.n_features, record.y_kind != "none",
                                              record.n_classes)
        return shapes
