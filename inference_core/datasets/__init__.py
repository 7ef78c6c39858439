"""Data sets for Bayesian model targets (torch-free: the API parses uploads and validates specs with it).

* `Dataset`: validated, read-only X [N, p], y [N] (int64 labels or float64), optional test part.
* Built-in sets by reference string (`uci:concrete:split=3`, `uci:concrete`, `sklearn:iris`; see `builtin`),
  bundled as .npz in `datasets/data/` (written once by scripts/bundle_datasets.py).
* Uploads: `parse_dataset_upload` (JSON, .npz, CSV), storage `dataset_to_npz`/`dataset_from_npz`,
  `dataset_digest` (see `uploads`).
* `resolve_dataset(field, context)`, the one resolver every data target builder uses, and
  `dataset_ref_ids(target_spec)` (see `resolve`).
* Columns as arrays, for the expression target's data-set params: `DatasetShape`, `columns_shape`,
  `select_columns` (see `columns`).
"""

from __future__ import annotations

from inference_core.datasets.builtin import (
    ALIASES,
    BUILTIN_DATASETS,
    BuiltinInfo,
    BuiltinRef,
    is_builtin_ref,
    load_builtin,
    parse_builtin_ref,
)
from inference_core.datasets.dataset import Dataset
from inference_core.datasets.resolve import (
    DATASET_ID,
    MAX_INLINE_NUMBERS,
    dataset_ref_ids,
    is_dataset_id,
    resolve_dataset,
)
from inference_core.datasets.uploads import (
    DatasetTooLarge,
    UnsupportedMediaType,
    dataset_digest,
    dataset_from_npz,
    dataset_to_npz,
    parse_dataset_upload,
)

__all__ = [
    "ALIASES",
    "BUILTIN_DATASETS",
    "DATASET_ID",
    "MAX_INLINE_NUMBERS",
    "BuiltinInfo",
    "BuiltinRef",
    "Dataset",
    "DatasetTooLarge",
    "UnsupportedMediaType",
    "dataset_digest",
    "dataset_from_npz",
    "dataset_ref_ids",
    "dataset_to_npz",
    "is_builtin_ref",
    "is_dataset_id",
    "load_builtin",
    "parse_builtin_ref",
    "parse_dataset_upload",
    "resolve_dataset",
]
