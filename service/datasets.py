"""Reading a tenant's uploaded data sets back: `dataset_loader`, what a target over `ds_…` loads its data with
(in the worker, and in the API's compute pool for /targets/validate and /density)."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.orm import Session

from inference_core.datasets import Dataset, dataset_from_npz
from inference_core.errors import TargetInvalid
from service.repositories.datasets import Datasets
from service.store import ArtifactStore


def dataset_loader(session_factory: Callable[[], Session], store: ArtifactStore,
                   tenant_id: str) -> Callable[[str], Dataset]:
    """`BuildContext.load_dataset` for one tenant: an id of another tenant is as missing as an unknown one."""

    def load(dataset_id: str) -> Dataset:
        with session_factory() as session:
            path = Datasets(session, tenant_id).path(dataset_id)
        if path is None:
            raise TargetInvalid(f"no dataset {dataset_id!r}", loc=("target", "dataset"))
        return dataset_from_npz(store.get(path))

    return load
