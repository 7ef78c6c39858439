"""Multivariate normal target N(μ, Σ) with closed-form log-density, score and exact reference."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from inference_core.schemas.targets import GaussianTargetSpec
from inference_core.targets.base import BuildContext, Reference, Target


class GaussianTarget(Target):
    kind = "gaussian"

    def __init__(self, mean: Tensor, cov: Tensor):
        self.dim = mean.shape[0]
        self.mean = mean
        self.cov = cov
        self.precision = torch.cholesky_inverse(torch.linalg.cholesky(cov))
        self.cov_cholesky = torch.linalg.cholesky(cov)
        self.log_norm = -0.5 * self.dim * math.log(2 * math.pi) - torch.log(torch.diagonal(self.cov_cholesky)).sum()

    def log_prob(self, x: Tensor, batch: object | None = None) -> Tensor:
        centred = x - self.mean
        return -0.5 * ((centred @ self.precision) * centred).sum(-1) + self.log_norm

    def score(self, x: Tensor, batch: object | None = None) -> Tensor:
        """∇ log N(x; μ, Σ) = -Σ⁻¹(x - μ) (precision is symmetric)."""
        return -(x - self.mean) @ self.precision

    def reference(self) -> Reference:
        def sample(n: int, generator: torch.Generator) -> Tensor:
            noise = torch.randn(n, self.dim, generator=generator, dtype=self.mean.dtype, device=self.mean.device)
            return self.mean + noise @ self.cov_cholesky.T

        return Reference(mean=self.mean, cov=self.cov, sample=sample)


def build(spec: GaussianTargetSpec, context: BuildContext) -> GaussianTarget:
    mean = torch.tensor(spec.mean, dtype=torch.float64)
    if spec.cov is not None:
        cov = torch.tensor(spec.cov, dtype=torch.float64)
    else:
        precision = torch.tensor(spec.precision, dtype=torch.float64)
        cov = torch.cholesky_inverse(torch.linalg.cholesky(precision))
    cov = 0.5 * (cov + cov.T)
    return GaussianTarget(mean, cov).to(device=context.device, dtype=context.dtype)
