"""Stein variational gradient descent (Liu & Wang 2016).

φ(x_i) = (1/n) Σ_j [k(x_j, x_i) ∇log p(x_j) + ∇_{x_j} k(x_j, x_i)]   (SVGD eq. 8; GPVI paper eq. 13)
with the kernel of `options.kernel` (RBF exp(−||x − y||²/h) by default, or IMQ) and h from its bandwidth rule
(median heuristic by default). One `svgd_direction` pass (methods.directions), O(n²) pairs.
"""

from __future__ import annotations

import torch
from torch import Tensor

from inference_core.methods.base import KernelParticleMethod
from inference_core.methods.directions import reuses_sq_dists, svgd_direction, svgd_direction_rows
from inference_core.schemas.methods import SVGDOptions
from inference_core.targets.base import Target


class SVGD(KernelParticleMethod):
    name = "svgd"
    options: SVGDOptions
    rank_sharing = "particles"

    def __init__(self, target: Target, options: SVGDOptions, num_particles: int, seed: int,
                 device: torch.device):
        super().__init__(target, options, num_particles, seed, device)

    def direction(self, x: Tensor, batch: object | None) -> tuple[Tensor, dict[str, float]]:
        score = self.moved.score(x, batch)
        # The exact median's n×n distance matrix, reused for the kernel where the direction can take it (CPU):
        # one distance GEMM a step instead of two (benchmarks/svgd_step.py).
        sq = None
        if reuses_sq_dists(x, self.kernel_options.name, **self.pairwise):
            h, sq = self.bandwidth_rule.with_sq_dists(x)
        else:
            h = self.bandwidth_rule(x)
        phi = svgd_direction(x, score, self.kernel(h), sq=sq, **self.pairwise)
        return phi, {"bandwidth": float(h)}

    def direction_rows(self, x: Tensor, score: Tensor, start: int, stop: int) -> tuple[Tensor, dict[str, float]]:
        """Rows [start, stop) of `direction`'s φ (a ranked step): the bandwidth from all n particles, as on one rank
        (its distance matrix read for the rows' kernel where the direction can take it), then
        `svgd_direction_rows`."""
        sq = None
        if reuses_sq_dists(x, self.kernel_options.name, **self.pairwise):
            h, sq = self.bandwidth_rule.with_sq_dists(x)
        else:
            h = self.bandwidth_rule(x)
        phi = svgd_direction_rows(x, score, self.kernel(h), start, stop, sq=sq, **self.pairwise)
        return phi, {"bandwidth": float(h)}
