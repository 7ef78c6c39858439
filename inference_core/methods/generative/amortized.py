"""Amortised particle VI: a generator trained by back-propagating a particle direction computed on a
generated batch (Wang & Liu 2016; GPVI paper eq. 14). Directions are the pure functions below; the methods
only order the draws (noise, then the expectation batch, then the minibatch, then any probes).

* `amortized_svgd`: φ = the SVGD direction (eq. 13). `expectation="independent"` (default, ALF's svgd3):
  the expectation runs over a second batch x' = f(z') of size n':
      φ(x_i) = (1/n') Σ_j [k(x'_j, x_i) ∇log p(x'_j) + ∇_{x'_j} k(x'_j, x_i)];
  `expectation="same"`: the one-batch form over the updated batch itself (x' = x, self term included).
* `amortized_gfsf`: φ = ∇log p(x_i) − ∇log q(x_i), ∇log q ≈ −(K + εI)⁻¹ Σ_j ∇_{x_j} k(x_j, ·) on the batch
  (Liu et al. 2019; ALF's gfsf).
* `amortized_ksd`: φ = f_ψ(x), a critic trained to maximise E[∇log p·f + tr ∇f] − l2·E||f||² (Hu et al.
  2018; ALF's minmax, without BatchNorm), `critic.steps` updates per generator step on fresh batches.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from inference_core.kernels import kernel_grad_sum, kernel_matmul, kernel_solve
from inference_core.methods.generative import gpvi_math
from inference_core.methods.generative.base import GenerativeMethod, expectation_size
from inference_core.methods.generative.networks import MLP
from inference_core.methods.generative.optimizers import make_optimizer, optimizer_step, zero_grads
from inference_core.schemas.generative import (
    AmortizedGFSFOptions,
    AmortizedKSDOptions,
    AmortizedSVGDOptions,
    KernelGenerativeOptions,
)
from inference_core.targets.base import Target

#: `trace="auto"` takes the exact Jacobian trace up to this dimension, Hutchinson above.
EXACT_TRACE_MAX_DIM = 32


def svgd_direction_two_batch(x: Tensor, x_expect: Tensor, score_expect: Tensor, h: float,
                             entropy_weight: float = 1.0, backend: str = "auto", sq: Tensor | None = None) -> Tensor:
    """SVGD's φ (GPVI eq. 13) at x [n, d] with the expectation over an independent batch x' [n', d]:
    (1/n') Σ_j [k(x'_j, x_i) s(x'_j) + ent · (2/h) k(x'_j, x_i)(x_i − x'_j)], one kernel matmul
    K(x, x')·[s', x', 1] (reusing the distances `sq` [n', n] of the bandwidth rule when given)."""
    n_expect, d = x_expect.shape
    ones = torch.ones(n_expect, 1, dtype=x.dtype, device=x.device)
    V = torch.cat([score_expect, x_expect, ones], dim=1)
    KV = gpvi_math.cross_kernel_matmul(x, x_expect, V, h, sq, backend) / n_expect
    drive, k_x, k_sum = KV[:, :d], KV[:, d: 2 * d], KV[:, 2 * d:]
    return drive + entropy_weight * (2.0 / h) * (k_sum * x - k_x)


def svgd_direction_one_batch(x: Tensor, score: Tensor, h: float, entropy_weight: float = 1.0,
                             backend: str = "auto") -> Tensor:
    """SVGD's φ (eq. 13) with the expectation over the batch itself: (1/n)[K s + ent · Σ_j ∇_{x_j}k(x_j, ·)]."""
    n = x.shape[0]
    drive = kernel_matmul(x, None, score, h, backend=backend) / n
    return drive + entropy_weight * kernel_grad_sum(x, h, backend=backend) / n


def gfsf_direction(x: Tensor, score: Tensor, h: float, eps: float, entropy_weight: float = 1.0) -> Tensor:
    """GFSF's φ = s − ent·∇log q with ∇log q(x_i) ≈ −[(K + εI)⁻¹ Σ_j ∇_{x_j} k(x_j, ·)]_i (Liu et al. 2019;
    the Cholesky solve is float64, kernels.kernel_solve)."""
    repulsion = kernel_solve(x, kernel_grad_sum(x, h), h, eps)
    return score + entropy_weight * repulsion


def ksd_critic_loss(critic_out: Tensor, trace: Tensor, score: Tensor, l2_weight: float,
                    entropy_weight: float = 1.0) -> Tensor:
    """Critic loss (minimised): mean_i[−s(x_i)·f(x_i) − ent·tr ∇f(x_i)] + l2·mean_i ||f(x_i)||² — the negated
    Stein discrepancy E_q[s·f + ∇·f] with an L2 penalty, whose maximiser is f* = (s − ∇log q)/(2·l2)."""
    stein = (score * critic_out).sum(-1) + entropy_weight * trace
    return -stein.mean() + l2_weight * critic_out.square().sum(-1).mean()


def jacobian_trace(out: Tensor, x: Tensor, probe: Tensor | None) -> Tensor:
    """tr ∂out/∂x per row [n] with a graph (create_graph): exact (d backward passes) when `probe` is None,
    else Hutchinson's εᵀ(∂out/∂x)ε with the given probe ε [n, d]."""
    if probe is not None:
        (vjp,) = torch.autograd.grad((out * probe).sum(), x, create_graph=True)
        return (vjp * probe).sum(-1)
    columns = []
    for c in range(x.shape[1]):
        (grad,) = torch.autograd.grad(out[:, c].sum(), x, create_graph=True)
        columns.append(grad[:, c])
    return torch.stack(columns, dim=-1).sum(-1)


class _KernelAmortized(GenerativeMethod):
    options: KernelGenerativeOptions

    def __init__(self, target: Target, options: KernelGenerativeOptions, num_particles: int, seed: int,
                 device: torch.device):
        super().__init__(target, options, num_particles, seed, device)
        self.expectation_particles = expectation_size(options, num_particles)

    def bandwidth(self, sq: Tensor, distinct_pairs: bool) -> float:
        """h from the squared distances sq (the batch's own, or [n', n] between the two batches)."""
        rule = self.options.bandwidth
        if rule.rule == "fixed":
            return float(rule.value)
        return gpvi_math.median_bandwidth(sq, rule.divisor, self.num_particles, distinct_pairs=distinct_pairs)


class AmortizedSVGD(_KernelAmortized):
    name = "amortized_svgd"
    options: AmortizedSVGDOptions

    def train_step(self) -> dict[str, float]:
        independent = self.options.expectation == "independent"
        z = self.noise(self.num_particles)
        z_expect = self.noise(self.expectation_particles) if independent else None
        batch = self.target.sample_batch(self.rng)
        x = self.network(z)
        xd = x.detach()
        ent, backend = self.options.entropy_weight, self.options.backend
        if independent:
            with torch.no_grad():
                x_expect = self.network(z_expect)
            score_expect = self.target.score(x_expect, batch)
            sq = gpvi_math.squared_distances(x_expect, xd)
            h = self.bandwidth(sq, distinct_pairs=False)
            phi = svgd_direction_two_batch(xd, x_expect, score_expect, h, ent, backend, sq=sq)
        else:
            h = self.bandwidth(gpvi_math.squared_distances(xd, xd), distinct_pairs=True)
            phi = svgd_direction_one_batch(xd, self.target.score(xd, batch), h, ent, backend)
        self.apply_direction(x, phi)
        return {"bandwidth": h, "direction_norm": float(phi.square().sum(-1).mean().sqrt())}


class AmortizedGFSF(_KernelAmortized):
    name = "amortized_gfsf"
    options: AmortizedGFSFOptions

    def train_step(self) -> dict[str, float]:
        z = self.noise(self.num_particles)
        batch = self.target.sample_batch(self.rng)
        x = self.network(z)
        xd = x.detach()
        h = self.bandwidth(gpvi_math.squared_distances(xd, xd), distinct_pairs=True)
        phi = gfsf_direction(xd, self.target.score(xd, batch), h, self.options.gfsf_eps, self.options.entropy_weight)
        self.apply_direction(x, phi)
        return {"bandwidth": h, "direction_norm": float(phi.square().sum(-1).mean().sqrt())}


class AmortizedKSD(GenerativeMethod):
    name = "amortized_ksd"
    options: AmortizedKSDOptions

    def build_auxiliary(self, generator: torch.Generator) -> None:
        opts = self.options.critic
        d = self.network.output_dim
        self.critic = MLP([d, *opts.hidden, d], opts.activation, generator).to(device=self.device, dtype=self.dtype)
        self.critic_optimizer = make_optimizer(self.critic.parameters(), opts.optimizer)

    def _exact_trace(self) -> bool:
        mode = self.options.critic.trace
        return mode == "exact" or (mode == "auto" and self.network.output_dim <= EXACT_TRACE_MAX_DIM)

    def train_step(self) -> dict[str, float]:
        opts = self.options.critic
        exact = self._exact_trace()
        for _ in range(opts.steps):
            z = self.noise(self.num_particles)
            batch = self.target.sample_batch(self.rng)
            probe = None if exact else torch.randn(self.num_particles, self.network.output_dim, generator=self.rng,
                                                   dtype=self.dtype).to(self.device)
            with torch.no_grad():
                x_critic = self.network(z)
            score = self.target.score(x_critic, batch)
            x_critic.requires_grad_(True)
            out = self.critic(x_critic)
            loss = ksd_critic_loss(out, jacobian_trace(out, x_critic, probe), score, opts.l2_weight,
                                   self.options.entropy_weight)
            zero_grads(self.critic_optimizer)
            loss.backward()
            optimizer_step(self.critic_optimizer)
        z = self.noise(self.num_particles)
        x = self.network(z)
        with torch.no_grad():
            phi = self.critic(x.detach())
        self.apply_direction(x, phi)
        return {"critic_loss": float(loss.detach()), "direction_norm": float(phi.square().sum(-1).mean().sqrt())}

    def extra_state(self) -> dict[str, Any]:
        return {"critic": self.critic.state_dict(), "critic_optimizer": self.critic_optimizer.state_dict()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.critic.load_state_dict(state["critic"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
