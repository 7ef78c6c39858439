"""Target-kind schemas (docs/api.md; `GET /v1/targets/kinds` lists them). Numeric checks use numpy so the API needs no torch."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from inference_core import errors
from inference_core.datasets import is_builtin_ref, is_dataset_id, parse_builtin_ref
from inference_core.datasets.columns import DatasetShape, columns_shape
from inference_core.expression.parser import (
    MAX_PARAM_ELEMENTS,
    MAX_PARAMS,
    MAX_SOURCE_LENGTH,
    Expression,
    check_param_name,
    parse_expression,
)
from inference_core.schemas.common import StrictModel

#: Numbers in all of a target's data-set params together (copies of data-set columns, held once per job;
#: 256 MiB in float64, the default cap on an upload's parsed size).
MAX_DATASET_PARAM_ELEMENTS = 2**25


def float_array(value: Any, name: str) -> np.ndarray:
    """Nested lists → float64 array, with a clear message for ragged rows."""
    try:
        return np.asarray(value, dtype=np.float64)
    except ValueError:
        raise ValueError(f"{name} has rows of different lengths") from None


def _check_spd(matrix: np.ndarray, name: str) -> None:
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {list(matrix.shape)}")
    scale = max(float(np.abs(matrix).max()), 1e-300)
    if not np.allclose(matrix, matrix.T, rtol=1e-8, atol=1e-10 * scale):
        raise ValueError(f"{name} must be symmetric")
    try:
        np.linalg.cholesky(matrix)
    except np.linalg.LinAlgError:
        raise ValueError(f"{name} is not positive definite") from None


class GaussianTargetSpec(StrictModel):
    """Multivariate normal N(mean, cov); give exactly one of `cov` or `precision`."""

    kind: Literal["gaussian"] = "gaussian"
    mean: list[float] = Field(min_length=1)
    cov: list[list[float]] | None = None
    precision: list[list[float]] | None = None

    @model_validator(mode="after")
    def _check(self) -> GaussianTargetSpec:
        if (self.cov is None) == (self.precision is None):
            raise ValueError("give exactly one of 'cov' or 'precision'")
        name = "cov" if self.cov is not None else "precision"
        matrix = float_array(self.cov if self.cov is not None else self.precision, name)
        if matrix.ndim != 2 or matrix.shape != (len(self.mean), len(self.mean)):
            raise ValueError(f"{name} must have shape [{len(self.mean)}, {len(self.mean)}] to match 'mean'")
        _check_spd(matrix, name)
        return self

    @property
    def dim(self) -> int:
        return len(self.mean)


class GaussianMixtureTargetSpec(StrictModel):
    """Mixture Σ_k w_k N(means[k], covs[k]). Weights must be positive; they are normalised by their sum
    (so [1, 3] means [0.25, 0.75])."""

    kind: Literal["gaussian_mixture"] = "gaussian_mixture"
    weights: list[float] = Field(min_length=1, description="positive; normalised by their sum")
    means: list[list[float]] = Field(min_length=1, description="[k, d] component means")
    covs: list[list[list[float]]] = Field(min_length=1, description="[k, d, d] component covariances (SPD)")

    @model_validator(mode="after")
    def _check(self) -> GaussianMixtureTargetSpec:
        k = len(self.weights)
        if len(self.means) != k or len(self.covs) != k:
            raise ValueError(
                f"weights, means and covs must have the same length k (got {k}, {len(self.means)}, "
                f"{len(self.covs)})"
            )
        weights = np.asarray(self.weights, dtype=np.float64)
        if not (weights > 0).all():
            raise ValueError("weights must all be positive")
        with np.errstate(over="ignore"):
            total = weights.sum()
        if not np.isfinite(total):
            raise ValueError("the sum of the weights must be finite")
        d = len(self.means[0])
        if d < 1 or any(len(mean) != d for mean in self.means):
            raise ValueError("means must be a [k, d] array with d >= 1 (all rows the same length)")
        for index, cov in enumerate(self.covs):
            if len(cov) != d or any(len(row) != d for row in cov):
                raise ValueError(f"covs[{index}] must have shape [{d}, {d}] to match 'means'")
            _check_spd(np.asarray(cov, dtype=np.float64), f"covs[{index}]")
        return self

    @property
    def dim(self) -> int:
        return len(self.means[0])


class BananaTargetSpec(StrictModel):
    """Twisted Gaussian (Haario et al. 1999; inference-gym `Banana`): x1 ~ N(0, scale²),
    x2 | x1 ~ N(curvature·(x1² − scale²), 1), x3..x_dim ~ N(0, 1). Defaults are Haario's (scale² = 100)."""

    kind: Literal["banana"] = "banana"
    dim: int = Field(default=2, ge=2)
    curvature: float = Field(default=0.03, ge=-100, le=100, description="b: how strongly x2 bends with x1")
    scale: float = Field(default=10.0, gt=0, le=1000, description="standard deviation of x1")


class FunnelTargetSpec(StrictModel):
    """Neal's funnel (Neal 2003, "Slice sampling", §8): v = x1 ~ N(0, scale²), x_i | v ~ N(0, e^v) for
    i = 2..dim. The cap on `scale` keeps var(x_i) = e^{scale²/2} finite in float32."""

    kind: Literal["funnel"] = "funnel"
    dim: int = Field(default=10, ge=2)
    scale: float = Field(default=3.0, gt=0, le=10, description="standard deviation of v = x1")


class EnergyTargetSpec(StrictModel):
    """One of the four 2-D potentials U1..U4 of Rezende & Mohamed 2015 (Table 1), p(z) ∝ exp(−U(z))."""

    kind: Literal["energy"] = "energy"
    name: Literal["U1", "U2", "U3", "U4"]

    @property
    def dim(self) -> int:
        return 2


class DatasetColumns(StrictModel):
    """An expression param taken from a data set: `column` gives a vector [n_rows], `columns` a matrix
    [n_rows, k] (docs/api.md, "The expression target"). Only the training part is used."""

    dataset: str = Field(
        max_length=100,  # ids and built-in references are short; a long string is never echoed back
        description="an uploaded data set id ('ds_…') or a built-in reference ('uci:…', 'sklearn:…')",
    )
    column: int | Literal["y"] | None = Field(
        default=None, description="one column, a vector [n_rows]: 'y' or a feature index (0-based, as in X)"
    )
    columns: list[int | Literal["y"]] | Literal["X"] | None = Field(
        default=None, description="columns in this order, a matrix [n_rows, k]; 'X' for every feature column"
    )

    @model_validator(mode="after")
    def _check(self) -> DatasetColumns:
        if not is_dataset_id(self.dataset):
            if not is_builtin_ref(self.dataset):
                raise ValueError(
                    f"dataset {self.dataset[:80]!r} is neither an uploaded data set id ('ds_' + 32 lowercase hex "
                    "characters) nor a built-in reference ('uci:<name>[:split=K]', 'sklearn:<name>')"
                )
            parse_builtin_ref(self.dataset)
        if (self.column is None) == (self.columns is None):
            raise ValueError("give exactly one of 'column' (a vector) or 'columns' (a matrix)")
        picked = [self.column] if self.column is not None else self.columns
        if isinstance(picked, list):
            if not picked:
                raise ValueError("'columns' is empty")
            if any(isinstance(item, int) and item < 0 for item in picked):
                raise ValueError("feature indices count from 0 and must not be negative")
        if not self.uploaded:  # a built-in set's shape is known now
            self.shape()
        return self

    @property
    def uploaded(self) -> bool:
        return is_dataset_id(self.dataset)

    def shape(self, datasets: Mapping[str, DatasetShape] | None = None) -> tuple[int, ...]:
        """Its shape; an uploaded data set's own shape must be in `datasets` (ValueError when a column is not
        the data set's)."""
        if self.uploaded:
            if datasets is None or self.dataset not in datasets:
                raise ValueError(f"the shape of dataset {self.dataset!r} is needed (it is read at submit)")
            known = datasets[self.dataset]
        else:
            known = DatasetShape.of_builtin(self.dataset)
        try:
            return columns_shape(self.column, self.columns, known)
        except ValueError as exc:
            raise ValueError(f"dataset {self.dataset!r}: {exc}") from None


ParamValue = float | list[float] | list[list[float]] | DatasetColumns


def _check_param_value(name: str, value: Any) -> tuple[int, ...]:
    """Shape of a param value (a number, a non-empty vector or a non-empty rectangular matrix)."""

    def is_number(item: Any) -> bool:
        return isinstance(item, int | float) and not isinstance(item, bool)

    def is_finite(item: int | float) -> bool:
        try:
            return math.isfinite(item)
        except OverflowError:  # an int beyond the float range
            return False

    if is_number(value):
        if not is_finite(value):
            raise ValueError(f"{name!r}: must be finite")
        return ()
    if not isinstance(value, list) or not value:
        raise ValueError(f"{name!r}: must be a number or a non-empty (nested) list of numbers")
    if all(is_number(item) for item in value):
        shape: tuple[int, ...] = (len(value),)
        flat = value
    elif all(isinstance(row, list) for row in value):
        columns = len(value[0])
        if columns == 0 or any(len(row) != columns for row in value):
            raise ValueError(f"{name!r}: a matrix needs non-empty rows of equal length")
        flat = [item for row in value for item in row]
        if not all(is_number(item) for item in flat):
            raise ValueError(f"{name!r}: only numbers are allowed (at most 2 levels of nesting)")
        shape = (len(value), columns)
    else:
        raise ValueError(f"{name!r}: must be a number, a list of numbers or a list of lists of numbers")
    if not all(is_finite(item) for item in flat):
        raise ValueError(f"{name!r}: must be finite")
    return shape


class ExpressionTargetSpec(StrictModel):
    """A log-density written in the safe expression language (inference_core.expression; issue #4).

    `log_prob` is the log-density of one particle `x` (a vector of length `dim`), up to a constant; it is
    parsed into an allow-listed tree here (so errors are a 422 before any work) and compiled to torch ops
    by the builder. Nothing is ever evaluated by Python.
    """

    kind: Literal["expression"] = "expression"
    dim: int = Field(ge=1, description="length of the particle x")
    # params come before log_prob so that log_prob's validator sees them (fields validate in order).
    params: dict[str, ParamValue] = Field(
        default_factory=dict,
        description=f"name → number, vector, matrix, or {{'dataset', 'column' | 'columns'}} (columns of a data "
        f"set); at most {MAX_PARAMS} params, {MAX_PARAM_ELEMENTS} numbers written inline, "
        f"{MAX_DATASET_PARAM_ELEMENTS} taken from data sets",
    )
    log_prob: str = Field(
        min_length=1, max_length=MAX_SOURCE_LENGTH, description="log-density of x in the expression language"
    )

    @field_validator("params", mode="before")
    @classmethod
    def _check_params(cls, value: Any) -> Any:
        # Before pydantic's own union validation, so a bad value gets one clear message.
        if not isinstance(value, dict):
            raise ValueError("params must be an object mapping names to numbers or arrays")
        if len(value) > MAX_PARAMS:
            raise ValueError(f"at most {MAX_PARAMS} params are allowed, got {len(value)}")
        total, checked = 0, {}
        for name, item in value.items():
            check_param_name(name)
            if isinstance(item, dict | DatasetColumns):
                # A data set's columns: the data set's own upload caps bound them, not the inline cap.
                checked[name] = _dataset_columns(name, item)
                continue
            total += math.prod(_check_param_value(name, item))
            if total > MAX_PARAM_ELEMENTS:
                raise ValueError(f"params hold more than {MAX_PARAM_ELEMENTS} numbers")
            checked[name] = item
        if not any(isinstance(item, DatasetColumns) and item.uploaded for item in checked.values()):
            _shapes(checked, None)  # built-in data sets: their sizes are known now
        return checked

    @field_validator("log_prob")
    @classmethod
    def _check_log_prob(cls, value: str, info: ValidationInfo) -> str:
        # Only when dim and params are valid (otherwise their own error is reported). With an uploaded data
        # set the shapes are known only once its record is read: `check_dataset_shapes` parses at submit.
        params = info.data.get("params")
        if "dim" in info.data and params is not None and not _uploaded_ids(params):
            parse_expression(value, info.data["dim"], _shapes(params, None))
        return value

    def uploaded_datasets(self) -> list[str]:
        """The uploaded data set ids the params take columns from."""
        return _uploaded_ids(self.params)

    def param_shapes(self, datasets: Mapping[str, DatasetShape] | None = None) -> dict[str, tuple[int, ...]]:
        """Every param's shape; `datasets` gives the shapes of the uploaded data sets named (ValueError if one
        is missing or lacks a column)."""
        return _shapes(self.params, datasets)

    def parse(self, datasets: Mapping[str, DatasetShape] | None = None) -> Expression:
        """The checked expression, given the uploaded data sets' shapes; `errors.TargetInvalid` (422) with the
        param or `log_prob` as its loc when a column or the expression does not fit them."""
        try:
            shapes = _shapes(self.params, datasets)
        except _ParamError as exc:
            raise errors.TargetInvalid(f"target.params: {exc}", loc=("target", "params", exc.name)) from None
        try:
            return parse_expression(self.log_prob, self.dim, shapes)
        except ValueError as exc:
            raise errors.TargetInvalid(f"target.log_prob: {exc}", loc=("target", "log_prob")) from None

    def check_dataset_shapes(self, datasets: Mapping[str, DatasetShape]) -> None:
        """At submit, once the uploaded data sets are known to be the caller's: the same checks as `parse`."""
        self.parse(datasets)


class _ParamError(ValueError):
    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name = name


def _dataset_columns(name: str, value: Any) -> DatasetColumns:
    if isinstance(value, DatasetColumns):
        return value
    try:
        return DatasetColumns.model_validate(value)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        raise ValueError(f"{name!r}: {where + ': ' if where else ''}{message}") from None


def _uploaded_ids(params: Mapping[str, Any]) -> list[str]:
    return sorted({item.dataset for item in params.values()
                   if isinstance(item, DatasetColumns) and item.uploaded})


def _shapes(params: Mapping[str, Any], datasets: Mapping[str, DatasetShape] | None) -> dict[str, tuple]:
    """Shapes of validated params; data-set params capped together at MAX_DATASET_PARAM_ELEMENTS numbers."""
    shapes, from_data = {}, 0
    for name, item in params.items():
        if not isinstance(item, DatasetColumns):
            shapes[name] = _check_param_value(name, item)
            continue
        try:
            shapes[name] = item.shape(datasets)
        except ValueError as exc:
            raise _ParamError(name, f"{name!r}: {exc}") from None
        from_data += math.prod(shapes[name])
        if from_data > MAX_DATASET_PARAM_ELEMENTS:
            raise _ParamError(name, f"{name!r}: the params taken from data sets hold more than "
                                    f"{MAX_DATASET_PARAM_ELEMENTS:,} numbers together")
    return shapes
