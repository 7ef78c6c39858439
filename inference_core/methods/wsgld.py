"""w-SGLD-B: the blob approximation of Wasserstein SGLD (Chen et al. 2018, "A unified particle-optimization
framework for scalable Bayesian sampling"), as in Table 1 of the f-POVI paper (Wang et al. 2019) and the
thu-ml/fpovi code (docs/implementation-notes.md, "w-SGLD-B and pi-SGLD"):

    φ(x_i) = ∇log p(x_i) + Σ_j ∇_{x_j} k(x_j, x_i) / Σ_l k(x_j, x_l) + Σ_j ∇_{x_j} k(x_j, x_i) / Σ_l k(x_i, x_l)
           = s_i + Σ_j g_ij (x_i − x_j) / S_j + Σ_j g_ij (x_i − x_j) / S_i,      S_i = Σ_l k(x_i, x_l),

g = −2f'(r²) (RBF: (2/h) k). The row sums S include k(x_i, x_i) and are constants of the step (the code's
stop-gradient); no 1/n. The "B" (blob) variant replaces the Brownian motion of SGLD by this deterministic
repulsion: there is no injected noise. The direction is `methods.directions.wsgld_direction` (re-exported
here).
"""

from __future__ import annotations

import torch
from torch import Tensor

from inference_core.methods.base import KernelParticleMethod
from inference_core.methods.directions import wsgld_direction, wsgld_direction_rows
from inference_core.schemas.methods import WSGLDOptions
from inference_core.targets.base import Target

__all__ = ["WSGLD", "wsgld_direction"]


class WSGLD(KernelParticleMethod):
    name = "wsgld"
    options: WSGLDOptions
    rank_sharing = "particles"

    def __init__(self, target: Target, options: WSGLDOptions, num_particles: int, seed: int,
                 device: torch.device):
        super().__init__(target, options, num_particles, seed, device)

    def direction(self, x: Tensor, batch: object | None) -> tuple[Tensor, dict[str, float]]:
        score = self.moved.score(x, batch)
        h = self.bandwidth_rule(x)
        return wsgld_direction(x, score, self.kernel(h), **self.pairwise), {"bandwidth": float(h)}

    def direction_rows(self, x: Tensor, score: Tensor, start: int, stop: int) -> tuple[Tensor, dict[str, float]]:
        """Rows [start, stop) of `direction`'s φ (a ranked step; its row sums gathered from the ranks)."""
        return self.gathered_direction_rows(wsgld_direction_rows, x, score, start, stop)
