"""Target-kind schemas (docs/api.md; `GET /v1/targets/kinds` lists them). Numeric checks use numpy so the API needs no torch."""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

from inference_core.expression.parser import (
    MAX_PARAM_ELEMENTS,
    MAX_PARAMS,
    MAX_SOURCE_LENGTH,
    check_param_name,
    parse_expression,
)
from inference_core.schemas.common import StrictModel


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


ParamValue = float | list[float] | list[list[float]]


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
        description=f"name → number, vector or matrix; at most {MAX_PARAMS} params, {MAX_PARAM_ELEMENTS} numbers",
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
        total = 0
        for name, item in value.items():
            check_param_name(name)
            total += math.prod(_check_param_value(name, item))
            if total > MAX_PARAM_ELEMENTS:
                raise ValueError(f"params hold more than {MAX_PARAM_ELEMENTS} numbers")
        return value

    @field_validator("log_prob")
    @classmethod
    def _check_log_prob(cls, value: str, info: ValidationInfo) -> str:
        # Only when dim and params are valid (otherwise their own error is reported).
        if "dim" in info.data and "params" in info.data:
            shapes = {name: _check_param_value(name, item) for name, item in info.data["params"].items()}
            parse_expression(value, info.data["dim"], shapes)
        return value

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: _check_param_value(name, value) for name, value in self.params.items()}
