"""The KSD critic of `ksd` (particles) and `amortized_ksd` (a generator): f_ψ: R^d → R^d maximising the Stein
discrepancy over a neural function class instead of an RKHS ball (Hu et al. 2018, "Stein neural sampler";
Grathwohl et al. 2020; ALF's `ParVIAlgorithm(par_vi="minmax")`, the GPVI paper's "KSD" baseline).

One training loop (`KSDCritic.train`): `options.steps` Adam updates on `directions.stein_critic_loss`,
    loss = −E[∇log p·f + ent·tr ∇f] + l2_weight·E||f||²,
each on the points, scores and Hutchinson probe the caller draws for it (the particles with this step's scores,
or a fresh generated batch); tr ∇f exact for d ≤ 16 or Hutchinson (`trace`, `directions.jacobian_trace`). With the
L2 penalty the maximiser is f* = (∇log p − ent·∇log q)/(2·l2_weight), the direction the draws then follow.

The network is `networks.MLP` d → hidden... → d without BatchNorm (ALF's default has it: it couples the draws of a
batch, so f(x_i) would depend on the others, the trace of ∇f would no longer be per-draw and Hutchinson's estimate
would be biased; docs/implementation-notes.md, "KSD critic").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from inference_core.methods.directions import jacobian_trace, stein_critic_loss, trace_method
from inference_core.methods.optim import build_optimizer, make_optimizer, optimizer_step, zero_grads
from inference_core.networks import MLP, InitDraw
from inference_core.schemas.methods import CriticOptions

#: What one critic update trains on: (points [n, d], their scores [n, d], a Hutchinson probe [n, d] or None).
CriticBatch = tuple[Tensor, Tensor, Tensor | None]


class KSDCritic:
    """The critic network, its optimiser and its training loop; `state_dict` holds both (checkpoint keys
    `critic`, `critic_optimizer`).

    `draw`: how `MLP` draws the initial weights (`ksd` draws them in float32, as its recorded runs did);
    `fused`: torch's fused Adam (`methods.optim.make_optimizer`, the generative methods') or the plain one
    (`build_optimizer`, the particle method's): the same rule with its own rounding, kept per method."""

    def __init__(self, dim: int, options: CriticOptions, generator: torch.Generator, device: torch.device,
                 dtype: torch.dtype, *, draw: InitDraw = "float64", fused: bool = True):
        if options.hidden is None:
            raise ValueError("the critic's hidden widths must be resolved (CriticOptions.with_hidden)")
        self.options = options
        self.dim = dim
        self.network = MLP([dim, *options.hidden, dim], options.activation, generator, draw=draw).to(
            device=device, dtype=dtype)
        make = make_optimizer if fused else build_optimizer
        self.optimizer = make(self.network.parameters(), options.optimizer)
        #: "exact" or "hutchinson" (`options.trace` at this dimension)
        self.trace = trace_method(options.trace, dim)

    def __call__(self, x: Tensor) -> Tensor:
        """φ = f_ψ(x), without a graph."""
        with torch.no_grad():
            return self.network(x)

    def probe(self, n: int, generator: torch.Generator, dtype: torch.dtype, device: torch.device) -> Tensor | None:
        """Hutchinson's Gaussian probe [n, d] drawn from `generator` on the CPU, or None where the trace is exact."""
        if self.trace == "exact":
            return None
        return torch.randn(n, self.dim, generator=generator, dtype=dtype).to(device)

    def update(self, x: Tensor, score: Tensor, probe: Tensor | None, entropy_weight: float = 1.0
               ) -> tuple[Tensor, Tensor]:
        """One optimiser step on the critic loss at the points x (graph-free) → (loss, mean Stein term), detached."""
        with torch.enable_grad():
            xg = x.detach().requires_grad_(True)
            fx = self.network(xg)
            loss, stein = stein_critic_loss(fx, jacobian_trace(fx, xg, probe), score, self.options.l2_weight,
                                            entropy_weight)
            zero_grads(self.optimizer)
            loss.backward()
            optimizer_step(self.optimizer)
        return loss.detach(), stein

    def train(self, batch: Callable[[], CriticBatch], entropy_weight: float = 1.0) -> tuple[float, float]:
        """The training loop: `options.steps` updates, each on `batch()` → (loss, mean Stein term) of the last."""
        loss = stein = torch.zeros(())
        for _ in range(self.options.steps):
            x, score, probe = batch()
            loss, stein = self.update(x, score, probe, entropy_weight)
        return float(loss), float(stein)

    def state_dict(self) -> dict[str, Any]:
        return {"critic": dict(self.network.state_dict()), "critic_optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.network.load_state_dict(legacy_critic_keys(state["critic"]))
        self.optimizer.load_state_dict(state["critic_optimizer"])


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
