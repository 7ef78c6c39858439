"""Gaussian mixture target p(x) = Σ_k w_k N(x; μ_k, Σ_k) with closed-form log-density, score and reference."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from inference_core.schemas.targets import GaussianMixtureTargetSpec
from inference_core.targets.base import BuildContext, Reference, Target


class GaussianMixtureTarget(Target):
    """Normalised mixture density; `weights` must already sum to one (the builder normalises them)."""

    kind = "gaussian_mixture"

    def __init__(self, weights: Tensor, means: Tensor, covs: Tensor):
        if weights.dim() != 1 or means.dim() != 2 or covs.dim() != 3:
            raise ValueError("weights [k], means [k, d] and covs [k, d, d] are required")
        self.dim = means.shape[1]
        self.weights = weights
        self.means = means
        self.covs = covs
        self.cov_cholesky = torch.linalg.cholesky(covs)
        self.precisions = torch.cholesky_inverse(self.cov_cholesky)
        # log w_k + log of the N(μ_k, Σ_k) normaliser, per component.
        self.log_coefficients = (
            torch.log(weights)
            - 0.5 * self.dim * math.log(2 * math.pi)
            - torch.log(torch.diagonal(self.cov_cholesky, dim1=-2, dim2=-1)).sum(-1)
        )

    def _component_terms(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Per-component log(w_k N(x; μ_k, Σ_k)) [n, k] and Σ_k⁻¹(x − μ_k) [n, k, d]."""
        centred = x.unsqueeze(1) - self.means  # [n, k, d]
        whitened = torch.einsum("nkd,kde->nke", centred, self.precisions)
        return self.log_coefficients - 0.5 * (whitened * centred).sum(-1), whitened

    def log_prob(self, x: Tensor, batch: object | None = None) -> Tensor:
        """log Σ_k w_k N(x; μ_k, Σ_k), by logsumexp over components."""
        log_terms, _ = self._component_terms(x)
        return torch.logsumexp(log_terms, dim=-1)

    def score(self, x: Tensor, batch: object | None = None) -> Tensor:
        """∇ log p(x) = −Σ_k r_k(x) Σ_k⁻¹(x − μ_k), r_k the posterior component responsibilities."""
        log_terms, whitened = self._component_terms(x)
        responsibilities = torch.softmax(log_terms, dim=-1)
        return -(responsibilities.unsqueeze(-1) * whitened).sum(1)

    def reference(self) -> Reference:
        """Exact moments: mean Σ w_k μ_k; covariance by the law of total covariance,
        Σ w_k Σ_k + Σ w_k (μ_k − m)(μ_k − m)ᵀ. Exact sampler: component by weight, then its Gaussian."""
        mean = self.weights @ self.means
        spread = self.means - mean
        cov = torch.einsum("k,kde->de", self.weights, self.covs) + torch.einsum(
            "k,kd,ke->de", self.weights, spread, spread
        )

        def sample(n: int, generator: torch.Generator) -> Tensor:
            device, dtype = self.means.device, self.means.dtype
            components = torch.multinomial(self.weights, n, replacement=True, generator=generator)
            noise = torch.randn(n, self.dim, 1, generator=generator, dtype=dtype, device=device)
            return self.means[components] + (self.cov_cholesky[components] @ noise).squeeze(-1)

        return Reference(mean=mean, cov=0.5 * (cov + cov.T), sample=sample)


def build(spec: GaussianMixtureTargetSpec, context: BuildContext) -> GaussianMixtureTarget:
    weights = torch.tensor(spec.weights, dtype=torch.float64)
    covs = torch.tensor(spec.covs, dtype=torch.float64)
    target = GaussianMixtureTarget(
        weights / weights.sum(), torch.tensor(spec.means, dtype=torch.float64), 0.5 * (covs + covs.mT)
    )
    return target.to(device=context.device, dtype=context.dtype)
