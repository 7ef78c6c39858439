"""The registries: target kinds and methods by name, with their schemas and (lazily imported) builders.

Torch-free on purpose: the API lists and validates from this module without loading the training code.
Builders are "module:function" strings resolved only where training or evaluation happens.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from inference_core.schemas.methods import SVGDOptions
from inference_core.schemas.targets import GaussianTargetSpec


@dataclass(frozen=True)
class TargetKind:
    name: str
    schema: type[BaseModel]
    builder: str
    summary: str
    has_reference: bool = False


@dataclass(frozen=True)
class Method:
    name: str
    family: str  # particle | generative | function_space | baseline
    schema: type[BaseModel]
    builder: str
    summary: str
    paper: str
    target_kinds: frozenset[str] = field(default_factory=frozenset)


TARGET_KINDS: dict[str, TargetKind] = {
    kind.name: kind
    for kind in [
        TargetKind(
            name="gaussian",
            schema=GaussianTargetSpec,
            builder="inference_core.targets.gaussian:build",
            summary="Multivariate normal N(mean, cov) (or given by its precision); exact reference.",
            has_reference=True,
        ),
    ]
}

WEIGHT_SPACE_KINDS = frozenset(TARGET_KINDS)

METHODS: dict[str, Method] = {
    method.name: method
    for method in [
        Method(
            name="svgd",
            family="particle",
            schema=SVGDOptions,
            builder="inference_core.methods.svgd:SVGD",
            summary="Stein variational gradient descent: kernel-weighted scores plus a repulsive term.",
            paper="Liu & Wang 2016, eq. 8; GPVI paper eq. 13",
            target_kinds=WEIGHT_SPACE_KINDS,
        ),
    ]
}


def resolve(path: str) -> Any:
    """Import "package.module:attribute"."""
    module_name, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module_name), attribute)
