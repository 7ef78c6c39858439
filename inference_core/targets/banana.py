"""Banana ("twisted Gaussian") target: closed-form log-density and score, exact moments and sampler.

Haario, Saksman & Tamminen 1999 (Adaptive proposal distribution for random walk Metropolis, §3) twist
a Gaussian N(0, diag(σ², 1, ..., 1)) by φ_b(x) = (x1, x2 + b x1² − 100 b, x3, ...) with σ² = 100. We use the
inference-gym `Banana` sign convention with a general scale σ:

    x1 ~ N(0, σ²),   x2 | x1 ~ N(b (x1² − σ²), 1),   x_i ~ N(0, 1) for i = 3..dim,

i.e. p(x) = N(ψ(x); 0, diag(σ², 1, ..., 1)) with ψ(x) = (x1, x2 − b (x1² − σ²), x3, ...); ψ has unit
Jacobian, so log p is normalised. (Haario's convention is the same density with b → −b.)
Defaults σ = 10, b = 0.03 are Haario's and inference-gym's.

Exact moments: E[x] = 0 (E[x1²] = σ²), var(x1) = σ², var(x2) = 1 + b² var(x1²) = 1 + 2 b² σ⁴,
cov(x1, x2) = b E[x1³] = 0, the remaining coordinates standard normal.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from inference_core.schemas.targets import BananaTargetSpec
from inference_core.targets.base import BuildContext, Reference, Target

_LOG_2PI = math.log(2 * math.pi)


class BananaTarget(Target):
    kind = "banana"

    def __init__(
        self, dim: int, curvature: float, scale: float, dtype: torch.dtype, device: torch.device | str
    ):
        if dim < 2 or not scale > 0:
            raise ValueError("banana needs dim >= 2 and scale > 0")
        self.dim = dim
        self.curvature = torch.tensor(curvature, dtype=dtype, device=device)
        self.scale = torch.tensor(scale, dtype=dtype, device=device)

    def _untwist(self, x: Tensor) -> Tensor:
        """x2 − b (x1² − σ²): standard normal under the target."""
        return x[:, 1] - self.curvature * (x[:, 0] ** 2 - self.scale**2)

    def log_prob(self, x: Tensor, batch: object | None = None) -> Tensor:
        """log N(x1; 0, σ²) + log N(x2 − b(x1² − σ²); 0, 1) + Σ_{i≥3} log N(x_i; 0, 1) (normalised)."""
        standardised = x[:, 0] / self.scale
        residual = self._untwist(x)
        rest = (x[:, 2:] ** 2).sum(-1)
        return (
            -0.5 * (standardised**2 + residual**2 + rest) - torch.log(self.scale) - 0.5 * self.dim * _LOG_2PI
        )

    def score(self, x: Tensor, batch: object | None = None) -> Tensor:
        """∂/∂x1 = −x1/σ² + 2 b x1 r, ∂/∂x2 = −r with r = x2 − b(x1² − σ²); ∂/∂x_i = −x_i for i ≥ 3."""
        residual = self._untwist(x)
        grad = -x.clone()
        grad[:, 0] = -x[:, 0] / self.scale**2 + 2 * self.curvature * x[:, 0] * residual
        grad[:, 1] = -residual
        return grad

    def reference(self) -> Reference:
        mean = torch.zeros(self.dim, dtype=self.scale.dtype, device=self.scale.device)
        variances = torch.ones(self.dim, dtype=self.scale.dtype, device=self.scale.device)
        variances[0] = self.scale**2
        variances[1] = 1 + 2 * self.curvature**2 * self.scale**4

        def sample(n: int, generator: torch.Generator) -> Tensor:
            """Exact: draw the Gaussian z, then apply the inverse twist x2 = z2 + b (z1² − σ²)."""
            z = torch.randn(
                n, self.dim, generator=generator, dtype=self.scale.dtype, device=self.scale.device
            )
            z[:, 0] = z[:, 0] * self.scale
            z[:, 1] = z[:, 1] + self.curvature * (z[:, 0] ** 2 - self.scale**2)
            return z

        return Reference(mean=mean, cov=torch.diag(variances), sample=sample)


def build(spec: BananaTargetSpec, context: BuildContext) -> BananaTarget:
    return BananaTarget(spec.dim, spec.curvature, spec.scale, context.dtype, context.device)
