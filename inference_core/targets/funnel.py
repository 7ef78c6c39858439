"""Neal's funnel (Neal 2003, "Slice sampling", Ann. Statist. 31(3), §8; inference-gym `NealsFunnel`).

    v = x1 ~ N(0, σ²),   x_i | v ~ N(0, e^v) for i = 2..dim      (σ = 3 in Neal's paper)

log p(x) = log N(v; 0, σ²) − (dim−1)/2 · (log 2π + v) − ½ e^{−v} Σ_{i≥2} x_i²  (normalised).
Exact moments: E[x] = 0; cov is diagonal with var(v) = σ² and var(x_i) = E[e^v] = e^{σ²/2}
(the log-normal mean); cov(v, x_i) = E[v E[x_i | v]] = 0 and cov(x_i, x_j) = 0 for i ≠ j.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from inference_core.schemas.targets import FunnelTargetSpec
from inference_core.targets.base import BuildContext, Reference, Target

_LOG_2PI = math.log(2 * math.pi)


class FunnelTarget(Target):
    kind = "funnel"

    def __init__(self, dim: int, scale: float, dtype: torch.dtype, device: torch.device | str):
        if dim < 2 or not scale > 0:
            raise ValueError("funnel needs dim >= 2 and scale > 0")
        self.dim = dim
        self.scale = torch.tensor(scale, dtype=dtype, device=device)

    def log_prob(self, x: Tensor, batch: object | None = None) -> Tensor:
        v, rest = x[:, 0], x[:, 1:]
        log_p_v = -0.5 * (v / self.scale) ** 2 - torch.log(self.scale) - 0.5 * _LOG_2PI
        squares = (rest**2).sum(-1)
        return log_p_v - 0.5 * (self.dim - 1) * (_LOG_2PI + v) - 0.5 * squares * torch.exp(-v)

    def score(self, x: Tensor, batch: object | None = None) -> Tensor:
        """∂/∂v = −v/σ² − (dim−1)/2 + ½ e^{−v} Σ x_i²;  ∂/∂x_i = −x_i e^{−v}."""
        v, rest = x[:, 0], x[:, 1:]
        inverse_variance = torch.exp(-v)
        grad_v = -v / self.scale**2 - 0.5 * (self.dim - 1) + 0.5 * inverse_variance * (rest**2).sum(-1)
        return torch.cat([grad_v.unsqueeze(-1), -rest * inverse_variance.unsqueeze(-1)], dim=-1)

    def reference(self) -> Reference:
        dtype, device = self.scale.dtype, self.scale.device
        variances = torch.exp(0.5 * self.scale**2).expand(self.dim).clone()
        variances[0] = self.scale**2

        def sample(n: int, generator: torch.Generator) -> Tensor:
            """Exact ancestral sampling: v, then x_i = e^{v/2} ε_i."""
            noise = torch.randn(n, self.dim, generator=generator, dtype=dtype, device=device)
            v = noise[:, :1] * self.scale
            return torch.cat([v, noise[:, 1:] * torch.exp(0.5 * v)], dim=-1)

        return Reference(
            mean=torch.zeros(self.dim, dtype=dtype, device=device), cov=torch.diag(variances), sample=sample
        )


def build(spec: FunnelTargetSpec, context: BuildContext) -> FunnelTarget:
    return FunnelTarget(spec.dim, spec.scale, context.dtype, context.device)
