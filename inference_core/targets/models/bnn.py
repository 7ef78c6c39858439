"""Bayesian neural network in weight space: an MLP whose weights (one flat vector per particle, layout in
`schemas.models.mlp_layout`) are the parameters, evaluated for all particles in one batched pass.

Likelihood (f = network output):
* regression, y_i ~ N(f(x_i), noise): fixed std σ; or precision γ ~ Gamma(a0, rate b0) sampled as log γ
  (the SVGD BNN, Liu & Wang 2016 §5 / python/bayesian_nn.py, from PBP, Hernández-Lobato & Adams 2015);
  or σ ~ InverseGamma(α, β) on the std sampled as log σ (f-POVI, Wang et al. 2019, thu-ml/fpovi; there σ
  is fitted by MAP, here it is a sampled parameter);
* classification: softmax over K outputs, log p(y_i = k) = log_softmax(f(x_i))_k.

Weight prior on all weights and biases: fixed N(0, s_l²) (s_l from prior_std and its fan scaling), or the
SVGD BNN's hierarchical N(0, λ⁻¹), λ ~ Gamma(a0, rate b0), sampled as log λ.

Log-parameterised scales carry their log-Jacobian, so each extra scalar u = log s has the density of s
times s:   Gamma:  a0 log b0 − lgamma(a0) + a0·u − b0·e^u;   InverseGamma on σ = e^u:
α log β − lgamma(α) − α·u − β e^{−u}.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from inference_core import errors
from inference_core.datasets import Dataset, resolve_dataset
from inference_core.schemas.models import (
    BNNSpec,
    FixedNoise,
    GammaNoisePrecision,
    GammaPrior,
    InverseGammaNoiseStd,
    class_labels,
    regression_targets,
)
from inference_core.targets.base import BuildContext
from inference_core.targets.models.data import DataTarget, PreparedData, prepare_data
from inference_core.targets.models.network import MLP
from inference_core.targets.models.random import sample_gamma

_LOG_2PI = math.log(2 * math.pi)
_INIT_ROWS = 1000  # rows used to set the initial noise precision (as the SVGD BNN code)


def gamma_log_density_of_log(u: Tensor, a0: float, b0: float) -> Tensor:
    """log density of u = log s for s ~ Gamma(a0, rate b0), Jacobian included."""
    return a0 * math.log(b0) - math.lgamma(a0) + a0 * u - b0 * u.exp()


def inverse_gamma_log_density_of_log(u: Tensor, alpha: float, beta: float) -> Tensor:
    """log density of u = log σ for σ ~ InverseGamma(alpha, beta), Jacobian included."""
    return alpha * math.log(beta) - math.lgamma(alpha) - alpha * u - beta * torch.exp(-u)


def gaussian_log_likelihood_sum(residual: Tensor, log_std: Tensor | float) -> Tensor:
    """Σ_i log N(r_i; 0, σ²) over the last axis of residual [n, B], with log σ per particle [n] or fixed."""
    count = residual.shape[-1]
    if isinstance(log_std, Tensor):
        inverse_variance = torch.exp(-2 * log_std)
        return -0.5 * inverse_variance * residual.square().sum(-1) - count * (log_std + 0.5 * _LOG_2PI)
    return -0.5 * math.exp(-2 * log_std) * residual.square().sum(-1) - count * (log_std + 0.5 * _LOG_2PI)


class WeightPrior:
    """The weight prior of a network's first `n_weights` parameters: fixed N(0, diag s²) or hierarchical."""

    def __init__(self, network: MLP, prior_std: float | None, scaling: str, hierarchical: GammaPrior | None):
        self.network = network
        self.hierarchical = hierarchical
        if hierarchical is None:
            if prior_std is None:
                raise ValueError("a fixed weight prior needs prior_std")
            self.stds64 = network.weight_prior_std(prior_std, scaling)
            self.log_norm = float(-(torch.log(self.stds64).sum() + 0.5 * network.n_weights * _LOG_2PI))

    def log_prob(self, weights: Tensor, log_precision: Tensor | None, inverse_variance: Tensor | None) -> Tensor:
        if self.hierarchical is None:
            return -0.5 * (weights.square() * inverse_variance).sum(-1) + self.log_norm
        lam = log_precision.exp()
        d = self.network.n_weights
        return (0.5 * d * log_precision - 0.5 * lam * weights.square().sum(-1) - 0.5 * d * _LOG_2PI
                + gamma_log_density_of_log(log_precision, self.hierarchical.a0, self.hierarchical.b0))

    def sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor | None]:
        """Exact prior draws: weights [n, n_weights] and, for the hierarchical prior, log λ [n] (float64,
        on the generator's device)."""
        device = generator.device
        noise = torch.randn(n, self.network.n_weights, generator=generator, dtype=torch.float64, device=device)
        if self.hierarchical is None:
            return noise * self.stds64.to(device), None
        lam = sample_gamma(self.hierarchical.a0, n, generator) / self.hierarchical.b0
        return noise / lam.sqrt().unsqueeze(-1), lam.log()


class BNNTarget(DataTarget):
    kind = "bnn"

    def __init__(self, data: PreparedData, spec: BNNSpec, dtype: torch.dtype, device: torch.device):
        super().__init__(data, spec.batch_size, dtype, device)
        self.task = spec.task
        self.n_classes = data.n_classes
        n_outputs = spec.n_outputs(data.n_classes)
        self.extra_names = spec.extras()
        self.network = MLP(int(data.X.shape[1]), spec.hidden, n_outputs, spec.activation, self.extra_names)
        self.dim = self.network.dim
        self.layout = self.network.layout
        self.noise = spec.noise
        self.weight_prior = WeightPrior(self.network, spec.prior_std, spec.prior_std_scaling,
                                        spec.weight_precision_prior)
        # Moved by `to()` with the data; None for the hierarchical prior.
        self.prior_inverse_variance = (None if spec.weight_precision_prior is not None else
                                       (1 / self.weight_prior.stds64**2).to(device=device, dtype=dtype))

    # ---- model ------------------------------------------------------------------------------------

    def forward(self, x: Tensor, inputs: Tensor) -> Tensor:
        """Network outputs [n, B, out] for particles x [n, dim] at inputs [B, p] (model units)."""
        return self.network.forward(x, inputs)

    @property
    def values_per_row(self) -> int:
        """Every hidden layer's activations (before and after the nonlinearity) and the outputs, per row."""
        return 2 * sum(self.network.sizes[1:]) + 2

    def describe_layout(self) -> list[dict]:
        return self.network.describe_layout()

    def log_prior(self, x: Tensor) -> Tensor:
        weights = x[:, : self.network.n_weights]
        log_precision = (self.network.extra(x, "log_weight_precision")
                         if self.weight_prior.hierarchical is not None else None)
        total = self.weight_prior.log_prob(weights, log_precision, self.prior_inverse_variance)
        if isinstance(self.noise, GammaNoisePrecision):
            total = total + gamma_log_density_of_log(self.network.extra(x, "log_noise_precision"),
                                                     self.noise.a0, self.noise.b0)
        elif isinstance(self.noise, InverseGammaNoiseStd):
            total = total + inverse_gamma_log_density_of_log(self.network.extra(x, "log_noise_std"),
                                                             self.noise.alpha, self.noise.beta)
        return total

    def log_noise_std(self, x: Tensor) -> Tensor | float:
        """log σ of the regression noise per particle [n] (or the fixed float)."""
        if isinstance(self.noise, FixedNoise):
            return math.log(self.noise.std)
        if isinstance(self.noise, GammaNoisePrecision):
            return -0.5 * self.network.extra(x, "log_noise_precision")
        return self.network.extra(x, "log_noise_std")

    def log_likelihood_sum(self, x: Tensor, batch: Tensor | None) -> Tensor:
        X, y = self.rows(batch)
        outputs = self.network.forward(x, X)
        if self.task == "regression":
            return gaussian_log_likelihood_sum(y - outputs[..., 0], self.log_noise_std(x))
        log_probs = torch.log_softmax(outputs, dim=-1)  # [n, B, K]
        return log_probs.gather(-1, y.expand(x.shape[0], -1).unsqueeze(-1)).squeeze(-1).sum(-1)

    # ---- initialisation ---------------------------------------------------------------------------

    def initial_particles(self, n: int, generator: torch.Generator) -> Tensor:
        """[n, dim] starting weights (the SVGD BNN init, Liu & Wang 2016 python/bayesian_nn.py):
        weights ~ N(0, 1/(fan_in + 1)), biases 0; log λ = log Gamma(shape a0, SCALE b0) (the original code
        draws with numpy's scale argument); log γ = −log(MSE of the initial network on up to 1000 random
        training rows); f-POVI's noise std starts at σ = 0.5 (thu-ml/fpovi)."""
        theta = self.network.initial_weights(n, generator, torch.float64, generator.device)
        extras: dict[str, Tensor] = {}
        if isinstance(self.noise, GammaNoisePrecision):
            rows = torch.randperm(self.n_data, generator=generator, device=generator.device)[:_INIT_ROWS]
            X, y = self.rows(rows)
            padded = torch.cat([theta, torch.zeros(n, self.dim - self.network.n_weights, dtype=torch.float64,
                                                   device=theta.device)], dim=-1)
            outputs = self.network.forward(padded.to(device=self.device, dtype=torch.float64),
                                           X.to(torch.float64))[..., 0]
            mse = (outputs - y.to(torch.float64)).square().mean(-1).clamp_min(1e-8)
            extras["log_noise_precision"] = -mse.log().to(theta.device)
        elif isinstance(self.noise, InverseGammaNoiseStd):
            extras["log_noise_std"] = torch.full((n,), math.log(0.5), dtype=torch.float64, device=theta.device)
        prior = self.weight_prior.hierarchical
        if prior is not None:
            extras["log_weight_precision"] = (sample_gamma(prior.a0, n, generator) * prior.b0).log()
        return self._assemble(theta, extras)

    def sample_prior(self, n: int, generator: torch.Generator) -> Tensor:
        """Exact draws from the prior over all parameters [n, dim] (extras from their own priors)."""
        theta, log_weight_precision = self.weight_prior.sample(n, generator)
        extras: dict[str, Tensor] = {}
        if isinstance(self.noise, GammaNoisePrecision):
            extras["log_noise_precision"] = (sample_gamma(self.noise.a0, n, generator) / self.noise.b0).log()
        elif isinstance(self.noise, InverseGammaNoiseStd):
            # σ ~ InverseGamma(α, β) ⇔ 1/σ ~ Gamma(α, rate β).
            extras["log_noise_std"] = -(sample_gamma(self.noise.alpha, n, generator) / self.noise.beta).log()
        if log_weight_precision is not None:
            extras["log_weight_precision"] = log_weight_precision
        return self._assemble(theta, extras)

    def _assemble(self, weights: Tensor, extras: dict[str, Tensor]) -> Tensor:
        columns = [weights] + [extras[name].unsqueeze(-1) for name in self.extra_names]
        return torch.cat(columns, dim=-1).to(device=self.device, dtype=self.dtype)


def build(spec: BNNSpec, context: BuildContext) -> BNNTarget:
    dataset = resolve_dataset(spec.dataset, context)
    if spec.task == "regression":
        data = prepare_data(dataset, targets=regression_targets, standardize=spec.standardize, standardize_y=True)
    else:
        n_classes = classes_of(dataset, spec.n_classes)
        data = prepare_data(dataset, targets=lambda y: class_labels(y, n_classes)[0], standardize=spec.standardize,
                            standardize_y=False, n_classes=n_classes)
    return BNNTarget(data, spec, context.dtype, context.device)


def classes_of(dataset: Dataset, n_classes: int | None) -> int:
    """K from the spec, or the largest label in the training and test parts + 1."""
    parts = [part for part in (dataset.y, dataset.y_test) if part is not None]
    try:
        return class_labels(np.concatenate(parts) if parts else None, n_classes)[1]
    except ValueError as exc:
        raise errors.TargetInvalid(f"{dataset.name}: {exc}", loc=("target", "dataset")) from None
