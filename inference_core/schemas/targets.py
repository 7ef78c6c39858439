"""Target-kind schemas (API.md, "Target kinds"). Numeric checks use numpy so the API needs no torch."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from inference_core.schemas.common import StrictModel


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
        matrix = np.asarray(self.cov if self.cov is not None else self.precision, dtype=np.float64)
        if matrix.ndim != 2 or matrix.shape != (len(self.mean), len(self.mean)):
            raise ValueError(f"{name} must have shape [{len(self.mean)}, {len(self.mean)}] to match 'mean'")
        _check_spd(matrix, name)
        return self

    @property
    def dim(self) -> int:
        return len(self.mean)
