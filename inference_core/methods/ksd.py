"""KSD ParVI with a learned critic ("minmax"): the Stein discrepancy maximised over a neural function class
instead of an RKHS ball (Hu et al. 2018, "Stein neural sampler"; Grathwohl et al. 2020; the GPVI paper's
"KSD" baseline, run with ALF's `ParVIAlgorithm(par_vi="minmax")`).

Each particle step, with the scores of this step's minibatch:
1. `critic.steps` Adam updates of the critic f on `directions.stein_critic_loss`
   (maximise E[∇log p·f + tr ∇f] − l2_weight·E||f||², exact trace for d ≤ 16 or Hutchinson — `critic.trace`,
   `directions.jacobian_trace`);
2. the particles move along φ(x_i) = f(x_i).
With the L2 penalty f* = (∇log p − ∇log q)/(2·l2_weight): the particle learning rate sees a 1/(2·l2_weight)
scale, which Adam removes. No kernel, so no `bandwidth` metric; `critic_stein` (the mean Stein term at the
last critic step) is reported instead. The critic's weights and its optimiser state are in the checkpoint;
its initial weights come from (seed, stream 3) and Hutchinson probes from the method's generator.

The critic is `inference_core.networks.MLP` d → hidden... → d without BatchNorm (ALF's default has it: it
couples the particles of a batch, so f(x_i) would depend on the other particles, the trace of ∇f would no
longer be per-particle and Hutchinson's estimate would be biased; docs/implementation-notes.md, "KSD critic").
Its weights are drawn in float32 (`draw="float32"`), as the recorded runs were.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from inference_core.methods.base import ParticleMethod
from inference_core.methods.directions import jacobian_trace, stein_critic_loss, trace_method
from inference_core.networks import MLP
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
        d = target.dim
        self.critic = MLP([d, *critic.hidden, d], critic.activation, init_generator, draw="float32").to(
            device=device, dtype=self.dtype)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=critic.lr)
        self.trace = trace_method(critic.trace, d)

    def direction(self, x: Tensor, batch: object | None) -> tuple[Tensor, dict[str, float]]:
        opts = self.options.critic
        score = self.moved.score(x, batch)
        stein = torch.zeros(())
        with torch.enable_grad():
            for _ in range(opts.steps):
                probe = None
                if self.trace == "hutchinson":
                    probe = torch.randn(x.shape, generator=self.generator, dtype=x.dtype).to(x.device)
                xg = x.detach().requires_grad_(True)
                fx = self.critic(xg)
                loss, stein = stein_critic_loss(fx, jacobian_trace(fx, xg, probe), score, opts.l2_weight)
                self.critic_optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.critic_optimizer.step()
        with torch.no_grad():
            phi = self.critic(x)
        return phi, {"critic_stein": float(stein)}

    def extra_state(self) -> dict[str, Any]:
        return {"critic": dict(self.critic.state_dict()), "critic_optimizer": self.critic_optimizer.state_dict()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.critic.load_state_dict(legacy_critic_keys(state["critic"]))
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])


def legacy_critic_keys(weights: dict[str, Any]) -> dict[str, Any]:
    """Checkpoints written before the critic became `networks.MLP` name its tensors `net.{2l}.weight/bias`
    (an nn.Sequential with the activations in between); `networks.MLP` names them `layers.{l}.…`."""
    if not any(key.startswith("net.") for key in weights):
        return weights
    renamed = {}
    for key, value in weights.items():
        _, index, leaf = key.split(".")
        renamed[f"layers.{int(index) // 2}.{leaf}"] = value
    return renamed
