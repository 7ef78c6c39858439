"""The registries: target kinds and methods by name, with their schemas and (lazily imported) builders.

Torch-free on purpose: the API lists and validates from this module without loading the training code.
Builders are "module:function" strings resolved only where training or evaluation happens.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from inference_core.schemas.auto import AutoOptions
from inference_core.schemas.baselines import EnsembleOptions, HMCOptions, MFVIOptions, NUTSOptions
from inference_core.schemas.function_space import FPiSGLDOptions, FSVGDOptions, FWSGLDOptions
from inference_core.schemas.fvi import FVIOptions
from inference_core.schemas.generative import (
    AmortizedFSVGDOptions,
    AmortizedGFSFOptions,
    AmortizedKSDOptions,
    AmortizedSVGDOptions,
    GPVIExactOptions,
    GPVIOptions,
)
from inference_core.schemas.methods import (
    GFSFOptions,
    InducedAdversarialOptions,
    InducedOptions,
    KSDOptions,
    PiSGLDOptions,
    SubsetCFOptions,
    SubsetOptions,
    SVGDOptions,
    WSGLDOptions,
)
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
    family: str  # auto | particle | generative | function_space | baseline
    schema: type[BaseModel]
    builder: str
    summary: str
    paper: str
    target_kinds: frozenset[str] = field(default_factory=frozenset)
    #: How the ranks of a `resources.processes` > 1 job share the work (docs/architecture.md, "Multi-process jobs";
    #: inference_core.distributed.RANKED_METHODS, which a test holds equal): "particles" (each rank the direction of
    #: its share of the particles against all of them), "scores" (each rank the scores of its share, the direction
    #: whole on every rank), "networks" (f-POVI: the same with networks as particles),
    #: "batch" (each rank its rows of the noise batch, gradients summed), "data" (each rank its share of a data
    #: target's minibatch rows, gradients summed), or None (one process only).
    shares: str | None = None

    @property
    def max_processes(self) -> int | None:
        """1 for a method that runs as one process; None: as many ranks as the service allows."""
        return None if self.shares else 1


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
# f-POVI moves network weights through their function values: BNNs, and function posteriors with a bnn
# prior (the method refuses other priors with method_unsupported_for_target when it is built).
NETWORK_KINDS = frozenset({"bnn", "function_posterior"})
# Kinds whose targets bring an initialisation of their own (`initial_particles`: fan-in-scaled network weights, the
# logistic regression's prior draws); `precondition: "pathfinder"` of the particle methods refuses them at submit.
OWN_INIT_KINDS = frozenset({"bnn", "function_posterior", "bayesian_logistic_regression"})
# The baselines need only a log density over a finite parameter vector: a function_posterior has one with a
# `bnn` prior (the network weights) or a `gp` prior (f at the training inputs); with a piecewise prior the
# method refuses at build time (method_unsupported_for_target).
BASELINE_KINDS = WEIGHT_SPACE_KINDS | {"function_posterior"}
#: Targets over data rows (`targets.models.data.DataTarget`): what a method sharing "data" splits among ranks.
DATA_TARGET_KINDS = frozenset({"bayesian_linear_regression", "bayesian_logistic_regression", "bnn",
                               "function_posterior"})

METHODS: dict[str, Method] = {
    method.name: method
    for method in [
        Method(
            name="auto",
            family="auto",
            schema=AutoOptions,
            builder="inference_core.methods.auto.method:Auto",
            summary="No tuning: Pathfinder finds the mode region and scale, then SVGD runs in the whitened space "
            "until the moments stop moving (steps is an upper bound); diagnostics in the job's quality.",
            paper="Zhang et al. 2022 (Pathfinder, Alg. 1); Liu & Wang 2016, eq. 8; docs/method-choice.md",
            target_kinds=WEIGHT_SPACE_KINDS,
        ),
        Method(
            name="svgd",
            family="particle",
            schema=SVGDOptions,
            builder="inference_core.methods.svgd:SVGD",
            summary="Stein variational gradient descent: kernel-weighted scores plus a repulsive term.",
            paper="Liu & Wang 2016, eq. 8; GPVI paper eq. 13",
            target_kinds=WEIGHT_SPACE_KINDS,
            shares="particles",
        ),
        Method(
            name="gfsf",
            family="particle",
            schema=GFSFOptions,
            builder="inference_core.methods.gfsf:GFSF",
            summary="Wasserstein gradient flow with the smoothed-function score estimate "
            "∇log q ≈ −(K + εI)⁻¹ Σ_j ∇k(x_j, ·).",
            paper="Liu et al. 2019 (ICML), §3.3; GPVI paper §2",
            target_kinds=WEIGHT_SPACE_KINDS,
            shares="scores",
        ),
        Method(
            name="ksd",
            family="particle",
            schema=KSDOptions,
            builder="inference_core.methods.ksd:KSD",
            summary="Stein discrepancy with a learned MLP critic f (no BatchNorm); particles move along f.",
            paper="Hu et al. 2018; Grathwohl et al. 2020; GPVI paper Table 2 (KSD)",
            target_kinds=WEIGHT_SPACE_KINDS,
            shares="scores",
        ),
        Method(
            name="wsgld",
            family="particle",
            schema=WSGLDOptions,
            builder="inference_core.methods.wsgld:WSGLD",
            summary="w-SGLD-B: deterministic blob approximation of Wasserstein SGLD (no injected noise).",
            paper="Chen et al. 2018; f-POVI paper (Wang et al. 2019) Table 1",
            target_kinds=WEIGHT_SPACE_KINDS,
            shares="particles",
        ),
        Method(
            name="pisgld",
            family="particle",
            schema=PiSGLDOptions,
            builder="inference_core.methods.pisgld:PiSGLD",
            summary="pi-SGLD: (w-SGLD-B + SVGD) / 2 with one kernel.",
            paper="Chen et al. 2018; f-POVI paper (Wang et al. 2019) Table 1",
            target_kinds=WEIGHT_SPACE_KINDS,
            shares="particles",
        ),
        Method(
            name="svgd_subset",
            family="particle",
            schema=SubsetOptions,
            builder="inference_core.methods.speedups:SubsetSVGD",
            summary="SVGD against a fresh random subset of m particles each step: O(nm), m scores.",
            paper="Kang, Speedup Methods for SVGD, Alg. 2",
            target_kinds=WEIGHT_SPACE_KINDS,
        ),
        Method(
            name="svgd_subset_cf",
            family="particle",
            schema=SubsetCFOptions,
            builder="inference_core.methods.speedups:SubsetCFSVGD",
            summary="Random-subset SVGD with control-functional (Stein-kernel) weights on the subset.",
            paper="Kang, Speedup Methods for SVGD, Alg. 3 / eq. 12; Oates et al. 2017",
            target_kinds=WEIGHT_SPACE_KINDS,
        ),
        Method(
            name="svgd_induced",
            family="particle",
            schema=InducedOptions,
            builder="inference_core.methods.speedups:InducedSVGD",
            summary="SVGD with the induced kernel (1/m) Σ_j k(x, y_j) k(x', y_j) on m random points: O(nm).",
            paper="Kang, Speedup Methods for SVGD, Alg. 4, eq. 13",
            target_kinds=WEIGHT_SPACE_KINDS,
        ),
        Method(
            name="svgd_induced_adversarial",
            family="particle",
            schema=InducedAdversarialOptions,
            builder="inference_core.methods.speedups:InducedAdversarialSVGD",
            summary="Induced-points SVGD whose points and bandwidth ascend the induced KSD each step.",
            paper="Kang, Speedup Methods for SVGD, Alg. 5, eqs. 14-18",
            target_kinds=WEIGHT_SPACE_KINDS,
        ),
        Method(
            name="gpvi",
            family="generative",
            schema=GPVIOptions,
            builder="inference_core.methods.generative.gpvi:GPVI",
            summary="Generative particle VI: a generator f(z) = g(z[:k]) + λz trained with the functional gradient "
            "of KL in noise space; J⁻ᵀ∇k learned by a helper network (pairwise, or a k×k matrix helper).",
            paper="Ratzlaff et al. 2021 (GPVI), eqs. 5-11, Algorithm 1",
            target_kinds=WEIGHT_SPACE_KINDS,
            shares="batch",
        ),
        Method(
            name="gpvi_exact",
            family="generative",
            schema=GPVIExactOptions,
            builder="inference_core.methods.generative.gpvi:GPVIExact",
            summary="GPVI with the k×k Jacobian block formed (torch.func) and solved exactly (torch.linalg.solve).",
            paper="Ratzlaff et al. 2021 (GPVI), §4.2 and Table 5 (Exact Jac)",
            target_kinds=WEIGHT_SPACE_KINDS,
            shares="batch",
        ),
        Method(
            name="amortized_svgd",
            family="generative",
            schema=AmortizedSVGDOptions,
            builder="inference_core.methods.generative.amortized:AmortizedSVGD",
            summary="Amortised SVGD: the SVGD direction on a generated batch back-propagated into the generator.",
            paper="Wang & Liu 2016; GPVI paper eq. 14",
            target_kinds=WEIGHT_SPACE_KINDS,
            shares="batch",
        ),
        Method(
            name="amortized_gfsf",
            family="generative",
            schema=AmortizedGFSFOptions,
            builder="inference_core.methods.generative.amortized:AmortizedGFSF",
            summary="Amortised GFSF: s − ∇log q with ∇log q ≈ −(K + εI)⁻¹ Σ_j ∇k(x_j, ·) on a generated batch.",
            paper="Liu et al. 2019; GPVI paper §4 (amortized GFSF)",
            target_kinds=WEIGHT_SPACE_KINDS,
            shares="batch",
        ),
        Method(
            name="amortized_ksd",
            family="generative",
            schema=AmortizedKSDOptions,
            builder="inference_core.methods.generative.amortized:AmortizedKSD",
            summary="Amortised KSD: a generator moved along a learned Stein critic f(x) (MLP, no BatchNorm).",
            paper="Hu et al. 2018; GPVI paper §4 (amortized KSD)",
            target_kinds=WEIGHT_SPACE_KINDS,
            shares="batch",
        ),
        Method(
            name="amortized_fsvgd",
            family="generative",
            schema=AmortizedFSVGDOptions,
            builder="inference_core.methods.generative.amortized_fsvgd:AmortizedFSVGD",
            summary="Amortised f-SVGD: a hypernetwork of BNN weights trained with f-SVGD's function-space direction, "
            "pulled back through the network and the generator; a downloadable sampler.",
            paper="Wang, Ren, Zhu & Zhang 2019 (f-POVI), eq. 4, Algorithm 1; GPVI paper (Ratzlaff et al. 2021) eq. 14",
            target_kinds=NETWORK_KINDS,
            shares="batch",
        ),
        Method(
            name="fsvgd",
            family="function_space",
            schema=FSVGDOptions,
            builder="inference_core.methods.function_space.fpovi:FSVGD",
            summary="Function-space SVGD (f-POVI): SVGD on network outputs at a mixed batch, with a Gaussian "
            "prior fitted to fresh prior functions, pulled back to the weights.",
            paper="Wang, Ren, Zhu & Zhang 2019 (f-POVI), eq. 4, Algorithm 1, Table 1",
            target_kinds=NETWORK_KINDS,
            shares="networks",
        ),
        Method(
            name="fwsgld",
            family="function_space",
            schema=FWSGLDOptions,
            builder="inference_core.methods.function_space.fpovi:FWSGLD",
            summary="Function-space w-SGLD-B (f-POVI): the blob w-SGLD direction on network outputs, pulled "
            "back to the weights.",
            paper="Wang, Ren, Zhu & Zhang 2019 (f-POVI), eq. 4, Table 1; Chen et al. 2018",
            target_kinds=NETWORK_KINDS,
            shares="networks",
        ),
        Method(
            name="fpisgld",
            family="function_space",
            schema=FPiSGLDOptions,
            builder="inference_core.methods.function_space.fpovi:FPiSGLD",
            summary="Function-space pi-SGLD (f-POVI): (w-SGLD-B + SVGD)/2 on network outputs, pulled back to "
            "the weights.",
            paper="Wang, Ren, Zhu & Zhang 2019 (f-POVI), eq. 4, Table 1; Chen et al. 2018",
            target_kinds=NETWORK_KINDS,
            shares="networks",
        ),
        Method(
            name="fvi",
            family="function_space",
            schema=FVIOptions,
            builder="inference_core.methods.fvi.method:FVI",
            summary="Functional VI with a stochastic process generator f = Σ_s a_s φ_s + ν: prior distillation "
            "(PoE encoder), then q(h) and the noise by the grid-functional KL with Russian-roulette debiasing; "
            "a trained model is a function-space sampler.",
            paper="Ma & Hernández-Lobato 2021 (FVI), eqs. 10-20, Algorithm 1",
            target_kinds=frozenset({"function_posterior", "bnn"}),
        ),
        Method(
            name="mfvi",
            family="baseline",
            schema=MFVIOptions,
            builder="inference_core.methods.baselines.mfvi:MFVI",
            summary="Bayes by Backprop: mean-field Gaussian q = N(μ, diag softplus(ρ)²) fitted by the "
            "reparameterised minibatch ELBO; a sampler f(z) = μ + σ⊙z for d ≤ 4096.",
            paper="Blundell et al. 2015, eqs. 1-4, §3.2",
            target_kinds=BASELINE_KINDS,
            shares="data",
        ),
        Method(
            name="ensemble",
            family="baseline",
            schema=EnsembleOptions,
            builder="inference_core.methods.baselines.ensemble:Ensemble",
            summary="Deep ensemble: n independently initialised networks, each trained to its own MAP; no "
            "interaction.",
            paper="Lakshminarayanan et al. 2017, Algorithm 1 (without adversarial training)",
            target_kinds=BASELINE_KINDS,
            shares="scores",
        ),
        Method(
            name="nuts",
            family="baseline",
            schema=NUTSOptions,
            builder="inference_core.methods.baselines.mcmc:NUTSMethod",
            summary="Reference sampling with Pyro's NUTS (full data, adapted step size and mass matrix), "
            "several chains; bulk ESS and split R-hat in the metrics.",
            paper="Hoffman & Gelman 2014, Algorithm 6; Pyro (Bingham et al. 2019)",
            target_kinds=BASELINE_KINDS,
        ),
        Method(
            name="hmc",
            family="baseline",
            schema=HMCOptions,
            builder="inference_core.methods.baselines.mcmc:HMCMethod",
            summary="Reference sampling with Pyro's HMC (fixed trajectory length, adapted step size and mass "
            "matrix), several chains; bulk ESS and split R-hat in the metrics.",
            paper="Neal 2011 (MCMC using Hamiltonian dynamics), §5.3; Pyro (Bingham et al. 2019)",
            target_kinds=BASELINE_KINDS,
        ),
    ]
}


def resolve(path: str) -> Any:
    """Import "package.module:attribute"."""
    module_name, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module_name), attribute)
