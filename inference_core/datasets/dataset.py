"""The `Dataset` value every data target is built from, and the array checks shared by every way of making one.

Torch-free on purpose: the API parses uploads and validates specs with this module without loading torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Integer features are converted to float64; beyond 2^53 that conversion is no longer exact.
_MAX_EXACT_INT = 2**53


def _describe_dtype(dtype: np.dtype) -> str:
    if dtype.kind == "b":
        return "booleans (encode them as the numbers 0 and 1)"
    if dtype.kind == "c":
        return "complex numbers"
    if dtype.kind in "OUSV":
        return f"non-numeric values (dtype {dtype.str!r})"
    return f"values of dtype {dtype.str!r}"


def first_nonfinite(array: np.ndarray) -> tuple[int, ...] | None:
    """Index of the first NaN/inf entry (row-major), or None."""
    bad = ~np.isfinite(array)
    if not bad.any():
        return None
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), array.shape))


def check_features(value: object, name: str) -> np.ndarray:
    """A finite float64 matrix [N, p] with N, p >= 1, as a new read-only array; ValueError says what is wrong."""
    array = np.asarray(value)
    if array.dtype.kind not in "fiu":
        raise ValueError(f"{name} must hold real numbers, got {_describe_dtype(array.dtype)}")
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array [rows, features], got {array.ndim} dimension(s)")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {list(array.shape)}); it needs at least one row and one column")
    if array.dtype.kind in "iu" and array.size and int(np.abs(array.astype(np.float64)).max()) > _MAX_EXACT_INT:
        raise ValueError(f"{name} has integers beyond 2^53, which float64 cannot hold exactly")
    out = np.array(array, dtype=np.float64, order="C", copy=True)
    bad = first_nonfinite(out)
    if bad is not None:
        raise ValueError(f"{name} contains NaN or infinity (first at row {bad[0]}, column {bad[1]})")
    out.setflags(write=False)
    return out


def check_targets(value: object, n_rows: int, name: str) -> np.ndarray:
    """A finite 1-D array of length `n_rows`: int64 (labels) if given as integers, else float64; read-only."""
    array = np.asarray(value)
    if array.dtype.kind not in "fiu":
        raise ValueError(f"{name} must hold real numbers, got {_describe_dtype(array.dtype)}")
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got {array.ndim} dimension(s)")
    if array.shape[0] != n_rows:
        raise ValueError(f"{name} has {array.shape[0]} entries but there are {n_rows} rows")
    if array.dtype.kind == "u" and array.size and int(array.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"{name} has integers beyond the int64 range")
    dtype = np.int64 if array.dtype.kind in "iu" else np.float64
    out = np.array(array, dtype=dtype, copy=True)
    bad = first_nonfinite(out) if dtype == np.float64 else None
    if bad is not None:
        raise ValueError(f"{name} contains NaN or infinity (first at index {bad[0]})")
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class Dataset:
    """A supervised (or unlabelled) data set: training part `X` [N, p] and `y` [N], optional test part.

    `y` is int64 when the labels were given as integers (classification), float64 otherwise; models that
    need one or the other convert and check (`targets.models.data`). All arrays are validated copies and
    read-only, so a Dataset can be cached and shared. Compare with `same_arrays`, not `==`.
    """

    X: np.ndarray
    y: np.ndarray | None = None
    X_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    name: str = "dataset"

    def __post_init__(self) -> None:
        X = check_features(self.X, "X")
        object.__setattr__(self, "X", X)
        if self.y is not None:
            object.__setattr__(self, "y", check_targets(self.y, X.shape[0], "y"))
        if self.X_test is None:
            if self.y_test is not None:
                raise ValueError("y_test is given without X_test")
            return
        X_test = check_features(self.X_test, "X_test")
        if X_test.shape[1] != X.shape[1]:
            raise ValueError(f"X_test has {X_test.shape[1]} columns but X has {X.shape[1]}")
        object.__setattr__(self, "X_test", X_test)
        if (self.y is None) != (self.y_test is None):
            raise ValueError("give y_test exactly when y is given (the test part must be labelled like X)")
        if self.y_test is not None:
            object.__setattr__(self, "y_test", check_targets(self.y_test, X_test.shape[0], "y_test"))

    @property
    def n_rows(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])

    @property
    def n_test_rows(self) -> int:
        return 0 if self.X_test is None else int(self.X_test.shape[0])

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, features) of the training part."""
        return self.n_rows, self.n_features

    @property
    def has_test(self) -> bool:
        return self.X_test is not None

    @property
    def labels_are_integers(self) -> bool:
        return self.y is not None and self.y.dtype == np.int64

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays that are present, by name (X, y, X_test, y_test)."""
        named = {"X": self.X, "y": self.y, "X_test": self.X_test, "y_test": self.y_test}
        return {key: value for key, value in named.items() if value is not None}

    def same_arrays(self, other: Dataset) -> bool:
        """Bit-for-bit equality of every array (dtype, shape and values); the name is not compared."""
        mine, theirs = self.arrays(), other.arrays()
        return mine.keys() == theirs.keys() and all(
            mine[key].dtype == theirs[key].dtype
            and mine[key].shape == theirs[key].shape
            and mine[key].tobytes() == theirs[key].tobytes()
            for key in mine
        )
