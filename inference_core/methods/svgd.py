"""Stein variational gradient descent (Liu & Wang 2016).

φ(x_i) = (1/n) Σ_j [k(x_j, x_i) ∇log p(x_j) + ∇_{x_j} k(x_j, x_i)]   (SVGD eq. 8; GPVI paper eq. 13)
with the RBF kernel k(x, y) = exp(−||x − y||²/h) and h from a bandwidth rule (median heuristic by default).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from inference_core.kernels import bandwidth_rule_from_options, svgd_direction
from inference_core.methods.base import ParticleMethod
from inference_core.schemas.methods import SVGDOptions
from inference_core.targets.base import Target


class SVGD(ParticleMethod):
    name = "svgd"
    options: SVGDOptions

    def __init__(self, target: Target, options: SVGDOptions, num_particles: int, seed: int,
                 device: torch.device):
        super().__init__(target, options, num_particles, seed, device)
        self.bandwidth = bandwidth_rule_from_options(options.kernel.bandwidth)

    def direction(self, x: Tensor, batch: object | None) -> tuple[Tensor, dict[str, float]]:
        score = self.target.score(x, batch)
        h = self.bandwidth(x)
        phi = svgd_direction(x, score, h, backend=self.options.kernel.backend)
        return phi, {"bandwidth": float(h)}

    def extra_state(self) -> dict[str, Any]:
        return {"bandwidth_rule": self.bandwidth.state_dict()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.bandwidth.load_state_dict(state.get("bandwidth_rule", {}))
