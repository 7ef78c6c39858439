"""Uploaded data sets in the store: save, load (always scoped to the owning tenant), delete."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from inference_core.datasets import Dataset, dataset_from_npz, dataset_to_npz
from service.jobs import new_id
from service.models import Artifact, DatasetRecord
from service.store import ArtifactStore

DATASET_MEDIA_TYPE = "application/x-npz"


def dataset_key(dataset_id: str) -> str:
    return f"datasets/{dataset_id}/data.npz"


def save_dataset(session: Session, store: ArtifactStore, tenant_id: str, dataset: Dataset, *,
                 name: str | None, source_media_type: str,
                 expires_at: datetime | None = None) -> tuple[DatasetRecord, Artifact]:
    dataset_id = new_id("ds")
    blob = store.put(dataset_key(dataset_id), dataset_to_npz(dataset))
    y_kind = "none" if dataset.y is None else ("labels" if dataset.labels_are_integers else "float")
    n_classes = int(dataset.y.max()) + 1 if y_kind == "labels" and dataset.y.size else None
    record = DatasetRecord(id=dataset_id, tenant_id=tenant_id, name=name, n_rows=dataset.n_rows,
                           n_features=dataset.n_features, n_test_rows=dataset.n_test_rows, y_kind=y_kind,
                           n_classes=n_classes, source_media_type=source_media_type, expires_at=expires_at)
    artifact = Artifact(id=new_id("art"), tenant_id=tenant_id, dataset_id=dataset_id, role="dataset",
                        path=blob.key, sha256=blob.sha256, size_bytes=blob.size_bytes,
                        media_type=DATASET_MEDIA_TYPE)
    session.add(record)
    session.flush()
    session.add(artifact)
    session.commit()
    return record, artifact


def owned_dataset(session: Session, tenant_id: str, dataset_id: str) -> DatasetRecord | None:
    return session.execute(
        select(DatasetRecord).where(DatasetRecord.id == dataset_id, DatasetRecord.tenant_id == tenant_id)
    ).scalar_one_or_none()


def dataset_loader(session_factory: Callable[[], Session], store: ArtifactStore,
                   tenant_id: str) -> Callable[[str], Dataset]:
    """`BuildContext.load_dataset` for one tenant: an id of another tenant is as missing as an unknown one."""

    def load(dataset_id: str) -> Dataset:
        with session_factory() as session:
            record = owned_dataset(session, tenant_id, dataset_id)
            path = None
            if record is not None:
                path = session.execute(select(Artifact.path).where(Artifact.dataset_id == dataset_id,
                                                                   Artifact.role == "dataset")).scalar_one()
        if path is None:
            from inference_core.errors import TargetInvalid

            raise TargetInvalid(f"no dataset {dataset_id!r}", loc=("target", "dataset"))
        return dataset_from_npz(store.get(path))

    return load
