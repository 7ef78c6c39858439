"""Kernel and bandwidth options shared by every kernel-based method (see inference_core.kernels)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from inference_core.schemas.common import StrictModel


class BandwidthOptions(StrictModel):
    """How the RBF bandwidth h in k(x, y) = exp(-||x - y||² / h) is chosen each step.

    `median`: h = median of squared pairwise distances / divisor(n).
    """

    rule: Literal["median"] = "median"
    divisor: Literal["log_n", "log_n_plus_1", "log_n_squared", "none"] = "log_n"
    include_diagonal: bool = False


class KernelOptions(StrictModel):
    name: Literal["rbf"] = "rbf"
    bandwidth: BandwidthOptions = Field(default_factory=BandwidthOptions)
    backend: Literal["auto", "dense"] = "auto"
