"""pi-SGLD (Chen et al. 2018), as the f-POVI paper's Table 1 and the thu-ml/fpovi code use it:

    φ_pi-SGLD = (φ_w-SGLD-B + φ_SVGD) / 2

literally, with one kernel and one bandwidth, so the two terms keep their own scales: w-SGLD-B has no 1/n,
SVGD carries its 1/n (docs/implementation-notes.md, "w-SGLD-B and pi-SGLD"). Deterministic, no injected
noise. The direction is `methods.directions.pisgld_direction` (re-exported here).
"""

from __future__ import annotations

import torch
from torch import Tensor

from inference_core.methods.base import KernelParticleMethod
from inference_core.methods.directions import pisgld_direction, pisgld_direction_rows
from inference_core.schemas.methods import PiSGLDOptions
from inference_core.targets.base import Target

__all__ = ["PiSGLD", "pisgld_direction"]


class PiSGLD(KernelParticleMethod):
    name = "pisgld"
    options: PiSGLDOptions
    rank_sharing = "particles"

    def __init__(self, target: Target, options: PiSGLDOptions, num_particles: int, seed: int,
                 device: torch.device):
        super().__init__(target, options, num_particles, seed, device)

    def direction(self, x: Tensor, batch: object | None) -> tuple[Tensor, dict[str, float]]:
        score = self.moved.score(x, batch)
        h = self.bandwidth_rule(x)
        return pisgld_direction(x, score, self.kernel(h), **self.pairwise), {"bandwidth": float(h)}

    def direction_rows(self, x: Tensor, score: Tensor, start: int, stop: int) -> tuple[Tensor, dict[str, float]]:
        """Rows [start, stop) of `direction`'s φ (a ranked step; its row sums gathered from the ranks)."""
        return self.gathered_direction_rows(pisgld_direction_rows, x, score, start, stop)
