"""Method option schemas (the `options` object of a JobSpec), one per method family."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from inference_core.schemas.common import StrictModel
from inference_core.schemas.kernels import KernelOptions


class OptimizerOptions(StrictModel):
    """`adagrad_momentum` is the rule of the original SVGD code (Liu & Wang 2016, python/svgd.py)."""

    name: Literal["adam", "sgd", "adagrad_momentum"] = "adam"
    lr: float = Field(default=0.05, gt=0, le=100)
    betas: tuple[float, float] = (0.9, 0.999)
    momentum: float = Field(default=0.0, ge=0, lt=1)
    alpha: float = Field(default=0.9, gt=0, lt=1, description="adagrad_momentum history decay")
    eps: float = Field(default=1e-6, gt=0)


class InitOptions(StrictModel):
    """Initial particles, particle i drawn from its own seeded stream (so it does not depend on n).

    `auto`: the target's own initialisation when it has one (e.g. a BNN's fan-in-scaled weights), else
    `normal`: loc + scale · N(0, I).
    """

    method: Literal["auto", "normal", "target"] = "auto"
    loc: float | list[float] = 0.0
    scale: float = Field(default=1.0, gt=0)


class ParticleMethodOptions(StrictModel):
    optimizer: OptimizerOptions = Field(default_factory=OptimizerOptions)
    init: InitOptions = Field(default_factory=InitOptions)
    dtype: Literal["float32", "float64"] = "float32"


class SVGDOptions(ParticleMethodOptions):
    kernel: KernelOptions = Field(default_factory=KernelOptions)
