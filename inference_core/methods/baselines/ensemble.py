"""`ensemble`: a deep ensemble (Lakshminarayanan, Pritzel & Blundell 2017, Algorithm 1 without the adversarial
term): n networks from independent initialisations, each trained to its own MAP, θ_i ← argmax log p(θ_i | D),
by the optimiser on the target's minibatch log density (N/B-scaled, so the full-data posterior's mode). The
members never interact: particle i's update is ∇ log p(θ_i | batch) alone, so with a unimodal target every
member ends at the same MAP.

Initialisation: `options.init` (default `auto`: the target's own, e.g. a BNN's fan-in-scaled weights, row i from
its own seeded stream). Minibatches: one per step shared by all members (default), or one per member
(`independent_batches`, n log-density calls per step), the paper's "random shuffling" per network.
"""

from __future__ import annotations

import torch
from torch import Tensor

from inference_core.methods.base import ParticleMethod
from inference_core.methods.baselines.common import require_log_density
from inference_core.schemas.baselines import EnsembleOptions
from inference_core.targets.base import Target


class Ensemble(ParticleMethod):
    """Independent MAP estimates (the surrogate-loss run loop of ParticleMethod with φ = ∇ log p)."""

    name = "ensemble"
    options: EnsembleOptions
    #: the members never interact: ranks split them, and gather [log p, score] rows (`scores_of_rows`)
    rank_sharing = "scores"

    def __init__(self, target: Target, options: EnsembleOptions, num_particles: int, seed: int,
                 device: torch.device):
        super().__init__(target, options, num_particles, seed, device)
        require_log_density(target, self.name, self.dtype, device)

    def direction(self, x: Tensor, batch: object | None) -> tuple[Tensor, dict[str, float]]:
        return self.direction_from_scores(x, self.scores_of_rows(x, 0, x.shape[0], batch))

    def scores_of_rows(self, x: Tensor, start: int, stop: int, batch: object | None) -> Tensor:
        """[stop − start, 1 + d]: log p(θ_i | batch_i) and its gradient for members [start, stop). With
        `independent_batches` member 0 uses the step's batch and members 1.. draw theirs from the method's generator,
        in order: every rank draws all of them (cheap: indices), so the generator advances as on one rank."""
        if not self.options.independent_batches:
            log_p, score = self.log_prob_and_score(x[start:stop], batch)
        else:
            batches = [batch] + [self.target.sample_batch(self.generator) for _ in range(1, x.shape[0])]
            rows = [self.log_prob_and_score(x[i : i + 1], batches[i]) for i in range(start, stop)]
            log_p, score = torch.cat([r[0] for r in rows]), torch.cat([r[1] for r in rows])
        return torch.cat([log_p[:, None], score], dim=1)

    def direction_from_scores(self, x: Tensor, score: Tensor) -> tuple[Tensor, dict[str, float]]:
        """φ = ∇ log p(θ_i | batch) from the [log p, score] rows of `scores_of_rows`."""
        return score[:, 1:], {"log_prob_mean": float(score[:, 0].mean())}

    def log_prob_and_score(self, x: Tensor, batch: object | None) -> tuple[Tensor, Tensor]:
        """log p(θ_i | batch) [n] and its gradient [n, d] from one forward pass (rows are independent)."""
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            log_p = self.moved.log_prob(x, batch)
            (score,) = torch.autograd.grad(log_p.sum(), x)
        return log_p.detach(), score
