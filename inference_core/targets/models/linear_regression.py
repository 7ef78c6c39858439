"""Bayesian linear regression with a closed-form Gaussian posterior (the GPVI paper's BLR benchmark,
Ratzlaff et al. 2021 §5.1; ALF hypernetwork_algorithm_test.py).

    y_i = x_iᵀw + ε_i,  ε_i ~ N(0, σ²),   w ~ N(0, τ² I)  (or a flat prior, τ = ∞)

Posterior (Bishop 2006, eqs. 3.53–3.54):  w | D ~ N(μ, Σ),  Σ⁻¹ = XᵀX/σ² + I/τ²,  μ = Σ Xᵀy/σ².
Erratum: for σ = 1 and a flat prior Σ = (XᵀX)⁻¹ (the GPVI paper prints XᵀX).
`log_prob` is the unnormalised log posterior log N(w; 0, τ²I) + (N/B) Σ_batch log N(y_i; x_iᵀw, σ²)
(flat prior: no prior term), so differences of log_prob equal differences of log N(w; μ, Σ) with full data.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from inference_core import errors
from inference_core.datasets import resolve_dataset
from inference_core.schemas.models import BayesianLinearRegressionSpec, regression_targets
from inference_core.targets.base import BuildContext, Reference
from inference_core.targets.models.data import DataTarget, PreparedData, prepare_data

_LOG_2PI = math.log(2 * math.pi)


class BayesianLinearRegressionTarget(DataTarget):
    kind = "bayesian_linear_regression"

    def __init__(self, data: PreparedData, noise_std: float, prior_std: float | None, batch_size: int | None,
                 dtype: torch.dtype, device: torch.device):
        super().__init__(data, batch_size, dtype, device)
        self.dim = int(data.X.shape[1])
        self.noise_std = float(noise_std)
        self.prior_std = None if prior_std is None else float(prior_std)
        # The exact posterior in float64 numpy (kept out of `to()`, which would round it to float32).
        self.posterior_mean, self.posterior_cov = posterior_moments(data.X, data.y, noise_std, prior_std)

    def log_prior(self, x: Tensor) -> Tensor:
        if self.prior_std is None:
            return torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
        tau = self.prior_std
        return -0.5 * x.square().sum(-1) / tau**2 - self.dim * (math.log(tau) + 0.5 * _LOG_2PI)

    def log_likelihood_sum(self, x: Tensor, batch: Tensor | None) -> Tensor:
        X, y = self.rows(batch)
        residual = y - x @ X.T  # [n, B]
        sigma = self.noise_std
        return -0.5 * residual.square().sum(-1) / sigma**2 - X.shape[0] * (math.log(sigma) + 0.5 * _LOG_2PI)

    def grad_log_prior(self, x: Tensor) -> Tensor:
        if self.prior_std is None:
            return torch.zeros_like(x)
        return -x / self.prior_std**2

    def grad_log_likelihood_sum(self, x: Tensor, batch: Tensor | None) -> Tensor:
        X, y = self.rows(batch)
        return (y - x @ X.T) @ X / self.noise_std**2

    def reference(self) -> Reference:
        mean = torch.as_tensor(self.posterior_mean, dtype=self.dtype, device=self.device)
        cov = torch.as_tensor(self.posterior_cov, dtype=self.dtype, device=self.device)
        cholesky = torch.as_tensor(np.linalg.cholesky(self.posterior_cov), dtype=self.dtype, device=self.device)

        def sample(n: int, generator: torch.Generator) -> Tensor:
            noise = torch.randn(n, self.dim, generator=generator, dtype=torch.float64, device=generator.device)
            return mean + noise.to(device=self.device, dtype=self.dtype) @ cholesky.T

        return Reference(mean=mean, cov=cov, sample=sample)


def posterior_moments(X: np.ndarray, y: np.ndarray, noise_std: float,
                      prior_std: float | None) -> tuple[np.ndarray, np.ndarray]:
    """(μ, Σ) of the Gaussian posterior, float64, via a Cholesky factor of the precision."""
    precision = X.T @ X / noise_std**2
    if prior_std is not None:
        precision = precision + np.eye(X.shape[1]) / prior_std**2
    try:
        factor = np.linalg.cholesky(precision)
    except np.linalg.LinAlgError:
        raise errors.TargetInvalid(
            "XᵀX is singular, so the flat-prior posterior is improper; give prior_std", loc=("target",)
        ) from None
    identity = np.eye(X.shape[1])
    factor_inverse = np.linalg.solve(factor, identity)  # L⁻¹, with precision = L Lᵀ
    cov = factor_inverse.T @ factor_inverse
    cov = 0.5 * (cov + cov.T)
    mean = cov @ (X.T @ y) / noise_std**2
    return mean, cov


def build(spec: BayesianLinearRegressionSpec, context: BuildContext) -> BayesianLinearRegressionTarget:
    dataset = resolve_dataset(spec.dataset, context)
    data = prepare_data(dataset, targets=regression_targets, standardize=spec.standardize, standardize_y=True,
                        bias=spec.bias)
    return BayesianLinearRegressionTarget(data, spec.noise_std, spec.prior_std, spec.batch_size, context.dtype,
                                          context.device)
