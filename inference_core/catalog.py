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
from inference_core.schemas.models import (
    BayesianLinearRegressionSpec,
    BayesianLogisticRegressionSpec,
    BNNSpec,
    FunctionPosteriorSpec,
)
from inference_core.schemas.targets import (
    BananaTargetSpec,
    EnergyTargetSpec,
    ExpressionTargetSpec,
    FunnelTargetSpec,
    GaussianMixtureTargetSpec,
    GaussianTargetSpec,
)


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
        TargetKind(
            name="gaussian_mixture",
            schema=GaussianMixtureTargetSpec,
            builder="inference_core.targets.mixture:build",
            summary="Mixture of Gaussians Σ w_k N(means[k], covs[k]) (weights normalised); exact reference.",
            has_reference=True,
        ),
        TargetKind(
            name="banana",
            schema=BananaTargetSpec,
            builder="inference_core.targets.banana:build",
            summary="Twisted Gaussian (Haario et al. 1999): x2 | x1 ~ N(curvature·(x1² − scale²), 1); exact reference.",
            has_reference=True,
        ),
        TargetKind(
            name="funnel",
            schema=FunnelTargetSpec,
            builder="inference_core.targets.funnel:build",
            summary="Neal's funnel: v ~ N(0, scale²), x_i | v ~ N(0, e^v); exact reference.",
            has_reference=True,
        ),
        TargetKind(
            name="energy",
            schema=EnergyTargetSpec,
            builder="inference_core.targets.energy:build",
            summary="2-D potentials U1..U4 of Rezende & Mohamed 2015, p ∝ exp(−U); reference on the box [−4, 4]².",
            has_reference=True,
        ),
        TargetKind(
            name="expression",
            schema=ExpressionTargetSpec,
            builder="inference_core.targets.expression:build",
            summary="Log-density written in the safe expression language, compiled to torch (never eval'd).",
            has_reference=False,
        ),
        TargetKind(
            name="bayesian_linear_regression",
            schema=BayesianLinearRegressionSpec,
            builder="inference_core.targets.models.linear_regression:build",
            summary="y = Xw + N(0, noise_std²), w ~ N(0, prior_std² I) or flat; closed-form Gaussian posterior.",
            has_reference=True,
        ),
        TargetKind(
            name="bayesian_logistic_regression",
            schema=BayesianLogisticRegressionSpec,
            builder="inference_core.targets.models.logistic_regression:build",
            summary="Logistic regression with the SVGD paper's Gamma prior on the weight precision (θ = [w, log α]) "
            "or a fixed prior_std; minibatch option.",
            has_reference=False,
        ),
        TargetKind(
            name="bnn",
            schema=BNNSpec,
            builder="inference_core.targets.models.bnn:build",
            summary="Bayesian MLP in weight space (regression or classification), one flat weight vector per "
            "particle; Gamma noise/weight-precision priors as in the SVGD BNN.",
            has_reference=False,
        ),
        TargetKind(
            name="function_posterior",
            schema=FunctionPosteriorSpec,
            builder="inference_core.targets.models.function_posterior:build",
            summary="Posterior over functions (prior: bnn, gp, piecewise_constant, piecewise_linear) with a "
            "Gaussian likelihood, for the function-space methods (f-POVI, FVI).",
            has_reference=False,
        ),
    ]
}

# Kinds whose parameters live in a fixed finite-dimensional space that particle methods move directly.
# function_posterior is a posterior over functions: only the function-space methods accept it.
WEIGHT_SPACE_KINDS = frozenset(TARGET_KINDS) - {"function_posterior"}

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
