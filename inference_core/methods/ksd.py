"""KSD ParVI with a learned critic ("minmax"): the Stein discrepancy maximised over a neural function class
instead of an RKHS ball (Hu et al. 2018, "Stein neural sampler"; Grathwohl et al. 2020; the GPVI paper's
"KSD" baseline, run with ALF's `ParVIAlgorithm(par_vi="minmax")`).

Each particle step, with the scores of this step's minibatch:
1. `critic.steps` Adam updates of the critic f on `stein_critic_loss`
   (maximise E[∇log p·f + tr ∇f] − l2_weight·E||f||², exact trace for d ≤ 16 or Hutchinson — `critic.trace`);
2. the particles move along φ(x_i) = f(x_i).
With the L2 penalty f* = (∇log p − ∇log q)/(2·l2_weight): the particle learning rate sees a 1/(2·l2_weight)
scale, which Adam removes. No kernel, so no `bandwidth` metric; `critic_stein` (the mean Stein term at the
last critic step) is reported instead. The critic's weights and its optimiser state are in the checkpoint;
its initial weights come from (seed, stream 3) and Hutchinson probes from the method's generator.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from inference_core.methods.base import ParticleMethod
from inference_core.methods.critic import EXACT_TRACE_MAX_DIM, CriticMLP, stein_critic_loss
from inference_core.schemas.methods import KSDOptions
from inference_core.seeding import derive_seed
from inference_core.targets.base import Target


class KSD(ParticleMethod):
    name = "ksd"
    options: KSDOptions

    def __init__(self, target: Target, options: KSDOptions, num_particles: int, seed: int,
                 device: torch.device):
        super().__init__(target, options, num_particles, seed, device)
        critic = options.critic
        init_generator = torch.Generator().manual_seed(derive_seed(seed, 3))
        self.critic = CriticMLP(target.dim, critic.hidden, critic.activation, init_generator, self.dtype, device)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=critic.lr)
        trace = critic.trace
        self.trace = ("exact" if target.dim <= EXACT_TRACE_MAX_DIM else "hutchinson") if trace == "auto" else trace

    def direction(self, x: Tensor, batch: object | None) -> tuple[Tensor, dict[str, float]]:
        opts = self.options.critic
        score = self.target.score(x, batch)
        stein = torch.zeros(())
        with torch.enable_grad():
            for _ in range(opts.steps):
                probe = None
                if self.trace == "hutchinson":
                    probe = torch.randn(x.shape, generator=self.generator, dtype=x.dtype).to(x.device)
                loss, stein = stein_critic_loss(self.critic, x, score, opts.l2_weight, self.trace, probe)
                self.critic_optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.critic_optimizer.step()
        with torch.no_grad():
            phi = self.critic(x)
        return phi, {"critic_stein": float(stein)}

    def extra_state(self) -> dict[str, Any]:
        return {"critic": dict(self.critic.state_dict()), "critic_optimizer": self.critic_optimizer.state_dict()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.critic.load_state_dict(state["critic"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
