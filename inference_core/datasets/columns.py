"""Columns of a data set as arrays: the shapes of an expression target's data-set params, and their values.

Torch-free: the API computes the shapes from a stored data set's record (rows, features, whether it has y)
without loading it, so the expression is checked at submit; the builder selects the values from the loaded
`Dataset`. A column is ``"y"`` (the targets) or the 0-based index of a feature column of X (for a CSV upload,
the file's columns left to right with the target column taken out). Only the training part is used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from inference_core.datasets.builtin import parse_builtin_ref
from inference_core.datasets.dataset import Dataset

Column = int | str  # a feature index or "y"
ALL_FEATURES = "X"  # `columns: "X"`: every feature column, in order


@dataclass(frozen=True)
class DatasetShape:
    """What the shapes of a data set's columns, and a model's dimension over it, depend on."""

    n_rows: int
    n_features: int
    has_y: bool
    n_classes: int | None = None  # integer labels 0..K-1: K (classification models size their output by it)

    @classmethod
    def of(cls, dataset: Dataset) -> DatasetShape:
        return cls(dataset.n_rows, dataset.n_features, dataset.y is not None)

    @classmethod
    def of_builtin(cls, ref: str) -> DatasetShape:
        """A built-in reference's training part, known without loading it (every built-in set has y)."""
        parsed = parse_builtin_ref(ref)
        return cls(parsed.n_rows, parsed.info.n_features, True)


def _check_column(column: Column, shape: DatasetShape) -> None:
    if column == "y":
        if not shape.has_y:
            raise ValueError("column 'y': the data set has no y")
        return
    if isinstance(column, bool) or not isinstance(column, int) or not 0 <= column < shape.n_features:
        raise ValueError(
            f"column {column!r} is not a column of the data set: use 'y' or a feature index "
            f"0..{shape.n_features - 1}"
        )


def columns_shape(
    column: Column | None, columns: Sequence[Column] | str | None, shape: DatasetShape
) -> tuple[int, ...]:
    """(n_rows,) for one `column`, (n_rows, k) for `columns` (a list, or "X" for all features); ValueError
    naming the first column the data set does not have."""
    if column is not None:
        _check_column(column, shape)
        return (shape.n_rows,)
    if columns == ALL_FEATURES:
        return (shape.n_rows, shape.n_features)
    assert columns is not None and not isinstance(columns, str)
    for item in columns:
        _check_column(item, shape)
    return (shape.n_rows, len(columns))


def select_columns(
    dataset: Dataset, column: Column | None, columns: Sequence[Column] | str | None
) -> np.ndarray:
    """The values, float64 (integer labels converted), as a new array of `columns_shape`'s shape."""
    shape = columns_shape(column, columns, DatasetShape.of(dataset))  # checks again against the loaded data
    if column is not None:
        return _one(dataset, column)
    if columns == ALL_FEATURES:
        return np.array(dataset.X, dtype=np.float64)
    assert columns is not None and not isinstance(columns, str)
    out = np.empty(shape, dtype=np.float64)
    for index, item in enumerate(columns):
        out[:, index] = _one(dataset, item)
    return out


def _one(dataset: Dataset, column: Column) -> np.ndarray:
    if column == "y":
        assert dataset.y is not None
        return dataset.y.astype(np.float64)
    return np.array(dataset.X[:, column], dtype=np.float64)
