"""GFSF: the Wasserstein gradient flow with the "smoothed function" score estimate (Liu et al. 2019,
"Understanding and accelerating particle-based variational inference", §3.3; GPVI paper §2 / ALF
`ParVIAlgorithm._gfsf_grad`). The direction is `methods.directions.gfsf_direction` (re-exported here).

The score of the particle distribution is estimated as

    ∇log q(x_i) ≈ −[(K + εI)⁻¹ R]_i,    R_i = Σ_j ∇_{x_j} k(x_j, x_i)  (= `kernel_grad_sum`),

and the particles move along the Wasserstein gradient of −KL(q‖p):

    φ(x_i) = ∇log p(x_i) − ∇log q(x_i) = ∇log p(x_i) + [(K + εI)⁻¹ R]_i.

No 1/n factor (ALF's non-amortised ParVI, which produced the GPVI paper's GFSF numbers; the f-POVI code
divides both terms by n, which Adam does not see). ε regularises the solve (ALF: 1e-5, "crucial for
convergence"); the solve is float64 Cholesky (never an fp32 inverse) up to 8192 particles, CG beyond.
"""

from __future__ import annotations

import torch
from torch import Tensor

from inference_core.methods.base import KernelParticleMethod
from inference_core.methods.directions import gfsf_direction
from inference_core.schemas.methods import GFSFOptions
from inference_core.targets.base import Target

__all__ = ["GFSF", "gfsf_direction"]


class GFSF(KernelParticleMethod):
    name = "gfsf"
    options: GFSFOptions
    rank_sharing = "scores"

    def __init__(self, target: Target, options: GFSFOptions, num_particles: int, seed: int,
                 device: torch.device):
        super().__init__(target, options, num_particles, seed, device)

    def direction(self, x: Tensor, batch: object | None) -> tuple[Tensor, dict[str, float]]:
        return self.direction_from_scores(x, self.moved.score(x, batch))

    def direction_from_scores(self, x: Tensor, score: Tensor) -> tuple[Tensor, dict[str, float]]:
        """The solve couples every particle, so ranks share the scores only (`rank_sharing` "scores")."""
        h = self.bandwidth_rule(x)
        phi, residual = gfsf_direction(x, score, self.kernel(h), self.options.eps,
                                       solve_method=self.options.solve_method, **self.pairwise)
        return phi, {"bandwidth": float(h), "solve_residual": residual}
