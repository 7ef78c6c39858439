"""KSD ParVI with a learned critic ("minmax"): the Stein discrepancy maximised over a neural function class
instead of an RKHS ball (Hu et al. 2018, "Stein neural sampler"; Grathwohl et al. 2020; the GPVI paper's
"KSD" baseline, run with ALF's `ParVIAlgorithm(par_vi="minmax")`).

Each particle step, with the scores of this step's minibatch:
1. `critic.steps` updates of the critic f (`methods.critic.KSDCritic`, shared with `amortized_ksd`) at the
   particles (maximise E[∇log p·f + tr ∇f] − l2_weight·E||f||², exact trace for d ≤ 16 or Hutchinson);
2. the particles move along φ(x_i) = f(x_i).
With the L2 penalty f* = (∇log p − ∇log q)/(2·l2_weight): the particle learning rate sees a 1/(2·l2_weight)
scale, which Adam removes. No kernel, so no `bandwidth` metric; `critic_stein` (the mean Stein term at the
last critic step) is reported instead. The critic's weights and its optimiser state are in the checkpoint;
its initial weights come from (seed, stream 3) and Hutchinson probes from the method's generator.

The critic's weights are drawn in float32 (`draw="float32"`) and trained by torch's plain Adam, as the recorded
runs were.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from inference_core.methods.base import ParticleMethod
from inference_core.methods.critic import KSDCritic, legacy_critic_keys
from inference_core.schemas.methods import KSDOptions
from inference_core.seeding import derive_seed
from inference_core.targets.base import Target

__all__ = ["KSD", "legacy_critic_keys"]


class KSD(ParticleMethod):
    name = "ksd"
    options: KSDOptions
    rank_sharing = "scores"

    def __init__(self, target: Target, options: KSDOptions, num_particles: int, seed: int,
                 device: torch.device):
        super().__init__(target, options, num_particles, seed, device)
        init_generator = torch.Generator().manual_seed(derive_seed(seed, 3))
        self.critic = KSDCritic(target.dim, options.critic, init_generator, device, self.dtype, draw="float32",
                                fused=False)

    def direction(self, x: Tensor, batch: object | None) -> tuple[Tensor, dict[str, float]]:
        return self.direction_from_scores(x, self.moved.score(x, batch))

    def direction_from_scores(self, x: Tensor, score: Tensor) -> tuple[Tensor, dict[str, float]]:
        """The critic trains on every particle, so ranks share the scores only (`rank_sharing` "scores"); every
        rank trains the same critic from the same state and probes (the method's generator), identically."""
        _, stein = self.critic.train(
            lambda: (x, score, self.critic.probe(x.shape[0], self.generator, x.dtype, x.device)))
        return self.critic(x), {"critic_stein": stein}

    def extra_state(self) -> dict[str, Any]:
        return self.critic.state_dict()

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.critic.load_state_dict(state)
