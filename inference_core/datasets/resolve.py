"""The `dataset` field of a data target: one resolver for every builder, and the ids a spec references.

The field is one of
* a built-in reference string: `uci:<name>[:split=K]`, `sklearn:<name>` (see `builtin`);
* an uploaded data set id `ds_` + 32 lowercase hex characters, resolved at build time through the
  caller's `BuildContext.load_dataset(id) -> Dataset` (the worker reads the artifact store; a notebook
  passes any function);
* inline data `{"X": [[..]], "y": [..]}` (at most MAX_INLINE_NUMBERS numbers; `schemas.models.InlineDataset`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from inference_core import errors
from inference_core.datasets.builtin import is_builtin_ref, load_builtin
from inference_core.datasets.dataset import Dataset

DATASET_ID = re.compile(r"ds_[0-9a-f]{32}")
MAX_INLINE_NUMBERS = 100_000
_LOC = ("target", "dataset")


def is_dataset_id(value: object) -> bool:
    return isinstance(value, str) and DATASET_ID.fullmatch(value) is not None


def resolve_dataset(field: Any, context: Any) -> Dataset:
    """The Dataset a validated `dataset` field stands for.

    `context` is a `targets.base.BuildContext` (only its `load_dataset` is used). Data problems found here
    (an id with no loader, a loader returning something unusable) raise `errors.TargetInvalid`; errors of
    the loader itself (not found, storage down) propagate unchanged.
    """
    if isinstance(field, str):
        if is_dataset_id(field):
            return _load_uploaded(field, getattr(context, "load_dataset", None))
        if is_builtin_ref(field):
            try:
                return load_builtin(field)
            except ValueError as exc:
                raise errors.TargetInvalid(str(exc), loc=_LOC) from None
        raise errors.TargetInvalid(f"dataset {field!r} is neither a built-in reference nor a 'ds_…' id", loc=_LOC)
    inline = field.model_dump() if hasattr(field, "model_dump") else field
    if not isinstance(inline, Mapping) or "X" not in inline:
        raise errors.TargetInvalid("an inline dataset must be an object {\"X\": [[..]], \"y\": [..]}", loc=_LOC)
    try:
        return Dataset(
            X=np.asarray(inline["X"], dtype=np.float64),
            y=None if inline.get("y") is None else _inline_targets(inline["y"]),
            name="inline",
        )
    except ValueError as exc:
        raise errors.TargetInvalid(f"inline dataset: {exc}", loc=_LOC) from None


def _inline_targets(values: Any) -> np.ndarray:
    """Inline y arrives as floats after pydantic; integral values stay float64 (models convert labels)."""
    return np.asarray(values, dtype=np.float64)


def _load_uploaded(dataset_id: str, load_dataset: Any) -> Dataset:
    if load_dataset is None:
        raise errors.TargetInvalid(
            f"dataset {dataset_id!r} is an uploaded data set, but no dataset loader was given "
            "(BuildContext(load_dataset=...))",
            loc=_LOC,
        )
    loaded = load_dataset(dataset_id)
    if isinstance(loaded, Dataset):
        return loaded
    if isinstance(loaded, Mapping) and "X" in loaded:
        try:
            return Dataset(name=dataset_id, **{key: loaded[key] for key in ("X", "y", "X_test", "y_test")
                                               if loaded.get(key) is not None})
        except ValueError as exc:
            raise errors.TargetInvalid(f"dataset {dataset_id!r}: {exc}", loc=_LOC) from None
    raise errors.TargetInvalid(f"the dataset loader returned no data for {dataset_id!r}", loc=_LOC)


def dataset_ref_ids(target_spec: Mapping[str, Any]) -> list[str]:
    """Sorted, distinct `ds_…` ids referenced by a (validated) target spec, wherever a `dataset` key sits.

    Torch-free: the API uses it to check that a job's data sets belong to the tenant and to refuse deleting
    a data set a live job uses.
    """
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                if key == "dataset" and is_dataset_id(item):
                    found.add(item)
                else:
                    walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    walk(target_spec)
    return sorted(found)
