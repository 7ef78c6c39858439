"""Amortised particle VI: a generator trained by back-propagating a particle direction computed on a
generated batch (Wang & Liu 2016; GPVI paper eq. 14). The directions are those of the particle methods
(`methods.directions`, RBF kernel with the generative bandwidth rule) and the generator update is
`GenerativeMethod.pullback`; the methods here only order the draws (noise, then the expectation batch, then
the minibatch, then any probes).

* `amortized_svgd`: φ = the SVGD direction (eq. 13). `expectation="independent"` (default, ALF's svgd3):
  the expectation runs over a second batch x' = f(z') of size n':
      φ(x_i) = (1/n') Σ_j [k(x'_j, x_i) ∇log p(x'_j) + ∇_{x'_j} k(x'_j, x_i)];
  `expectation="same"`: the one-batch form over the updated batch itself (x' = x, self term included).
* `amortized_gfsf`: φ = ∇log p(x_i) − ∇log q(x_i), ∇log q ≈ −(K + εI)⁻¹ Σ_j ∇_{x_j} k(x_j, ·) on the batch
  (Liu et al. 2019; ALF's gfsf).
* `amortized_ksd`: φ = f_ψ(x), a critic trained to maximise E[∇log p·f + tr ∇f] − l2·E||f||² (Hu et al.
  2018; ALF's minmax, without BatchNorm), `critic.steps` updates per generator step on fresh batches
  (`methods.critic.KSDCritic`, the particle `ksd`'s critic).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from inference_core.kernels import RBF
from inference_core.methods.critic import CriticBatch, KSDCritic
from inference_core.methods.directions import (
    gfsf_direction,
    svgd_direction,
    svgd_direction_rows,
    svgd_direction_two_batch,
)
from inference_core.methods.generative import gpvi_math
from inference_core.methods.generative.base import GenerativeMethod, expectation_size
from inference_core.schemas.generative import (
    AmortizedGFSFOptions,
    AmortizedKSDOptions,
    AmortizedSVGDOptions,
    KernelGenerativeOptions,
)
from inference_core.targets.base import Target


class _KernelAmortized(GenerativeMethod):
    options: KernelGenerativeOptions

    def __init__(self, target: Target, options: KernelGenerativeOptions, num_particles: int, seed: int,
                 device: torch.device):
        super().__init__(target, options, num_particles, seed, device)
        self.expectation_particles = expectation_size(options, num_particles)

    def bandwidth(self, sq: Tensor, distinct_pairs: bool) -> float:
        """h from the squared distances sq (the batch's own, or [n', n] between the two batches)."""
        rule = self.options.kernel.bandwidth
        if rule.rule == "fixed":
            return float(rule.value)
        return gpvi_math.median_bandwidth(sq, rule.divisor, self.num_particles, distinct_pairs=distinct_pairs)


class AmortizedSVGD(_KernelAmortized):
    name = "amortized_svgd"
    options: AmortizedSVGDOptions
    rank_sharing = "batch"

    def ranked_rows(self) -> tuple[int, ...]:
        if self.options.expectation == "independent":
            return (self.num_particles, self.expectation_particles)
        return (self.num_particles,)

    def train_step(self) -> dict[str, float]:
        if self.ranks.world_size > 1:
            return self._ranked_train_step()
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
            score_expect = self.view.score(x_expect, batch)
            sq = gpvi_math.squared_distances(x_expect, xd)
            h = self.bandwidth(sq, distinct_pairs=False)
            phi = svgd_direction_two_batch(xd, x_expect, score_expect, RBF(h), entropy_weight=ent, sq=sq,
                                           backend=backend)
        else:
            h = self.bandwidth(gpvi_math.squared_distances(xd, xd), distinct_pairs=True)
            phi = svgd_direction(xd, self.view.score(xd, batch), RBF(h), entropy_weight=ent, backend=backend)
        self.pullback(x, phi)
        return {"bandwidth": h, "direction_norm": float(phi.square().sum(-1).mean().sqrt())}


    def _ranked_train_step(self) -> dict[str, float]:
        """`train_step` with the batch shared by the ranks (`inference_core.distributed`): the whole noise batches
        and minibatch drawn on every rank (the same RNG state: the same draws as one rank); each rank forms f_θ(z_i)
        for its rows i (with a graph) and, independent, f(z'_j) and its score for its rows j; batch, expectation
        points and scores are all-gathered; the bandwidth from the whole distances (as one rank); φ for own rows i
        against the whole expectation (`svgd_direction_two_batch` on the rows, or `svgd_direction_rows`), then
        `ranked_pullback` (the generator's gradients all-reduced)."""
        group = self.ranks
        n = self.num_particles
        lo, hi = group.bounds(n)
        independent = self.options.expectation == "independent"
        z = self.noise(n)
        z_expect = self.noise(self.expectation_particles) if independent else None
        batch = self.target.sample_batch(self.rng)
        x = self.network(z[lo:hi])
        x_rows = x.detach()
        xd = group.all_gather_rows(x_rows, n)
        ent, backend = self.options.entropy_weight, self.options.backend
        if independent:
            n_expect = self.expectation_particles
            elo, ehi = group.bounds(n_expect)
            with torch.no_grad():
                x_own = self.network(z_expect[elo:ehi])
            d = x_own.shape[1]
            joined = group.all_gather_rows(torch.cat([x_own, self.view.score(x_own, batch)], dim=1), n_expect)
            x_expect, score_expect = joined[:, :d].contiguous(), joined[:, d:].contiguous()
            sq = gpvi_math.squared_distances(x_expect, xd)
            h = self.bandwidth(sq, distinct_pairs=False)
            phi = svgd_direction_two_batch(x_rows, x_expect, score_expect, RBF(h), entropy_weight=ent,
                                           sq=sq[:, lo:hi], backend=backend)
        else:
            h = self.bandwidth(gpvi_math.squared_distances(xd, xd), distinct_pairs=True)
            score = group.all_gather_rows(self.view.score(x_rows, batch), n)
            phi = svgd_direction_rows(xd, score, RBF(h), lo, hi, entropy_weight=ent, backend=backend)
        (phi2,) = self.ranked_pullback(x, phi, [phi.square().sum()], batch=xd)
        return {"bandwidth": h, "direction_norm": (phi2 / n) ** 0.5}


class AmortizedGFSF(_KernelAmortized):
    name = "amortized_gfsf"
    options: AmortizedGFSFOptions
    rank_sharing = "batch"

    def ranked_rows(self) -> tuple[int, ...]:
        return (self.num_particles,)

    def train_step(self) -> dict[str, float]:
        if self.ranks.world_size > 1:
            return self._ranked_train_step()
        z = self.noise(self.num_particles)
        batch = self.target.sample_batch(self.rng)
        x = self.network(z)
        xd = x.detach()
        h = self.bandwidth(gpvi_math.squared_distances(xd, xd), distinct_pairs=True)
        phi, _ = gfsf_direction(xd, self.view.score(xd, batch), RBF(h), self.options.gfsf_eps,
                                entropy_weight=self.options.entropy_weight)
        self.pullback(x, phi)
        return {"bandwidth": h, "direction_norm": float(phi.square().sum(-1).mean().sqrt())}

    def _ranked_train_step(self) -> dict[str, float]:
        """`train_step` with the batch shared by the ranks: the noise batch and minibatch drawn whole on every rank
        (the same draws as one rank); each rank forms f_θ(z_i) and its score for its rows i, both all-gathered; the
        (K + εI)⁻¹ solve couples every row, so every rank computes the whole φ from the same inputs and pulls back
        its own rows (`ranked_pullback`: the generator's gradients all-reduced)."""
        group = self.ranks
        n = self.num_particles
        lo, hi = group.bounds(n)
        z = self.noise(n)
        batch = self.target.sample_batch(self.rng)
        x = self.network(z[lo:hi])
        rows = x.detach()
        joined = group.all_gather_rows(torch.cat([rows, self.view.score(rows, batch)], dim=1), n)
        d = rows.shape[1]
        xd, score = joined[:, :d].contiguous(), joined[:, d:].contiguous()
        h = self.bandwidth(gpvi_math.squared_distances(xd, xd), distinct_pairs=True)
        phi, _ = gfsf_direction(xd, score, RBF(h), self.options.gfsf_eps, entropy_weight=self.options.entropy_weight)
        own = phi[lo:hi]
        (phi2,) = self.ranked_pullback(x, own, [own.square().sum()], batch=xd)
        return {"bandwidth": h, "direction_norm": (phi2 / n) ** 0.5}


class AmortizedKSD(GenerativeMethod):
    name = "amortized_ksd"
    options: AmortizedKSDOptions
    #: ranks: the critic's batches' scores split and gathered, the critic trained whole on every rank (identically),
    #: the generator's rows split with its gradients all-reduced (`ranked_pullback`)
    rank_sharing = "batch"

    def ranked_rows(self) -> tuple[int, ...]:
        return (self.num_particles,)

    def build_auxiliary(self, generator: torch.Generator) -> None:
        self.critic = KSDCritic(self.network.output_dim, self.options.critic, generator, self.device, self.dtype)

    def critic_batch(self) -> CriticBatch:
        """A fresh generated batch for one critic update: noise, minibatch, probe (in that order from the RNG)."""
        z = self.noise(self.num_particles)
        batch = self.target.sample_batch(self.rng)
        probe = self.critic.probe(self.num_particles, self.rng, self.dtype, self.device)
        with torch.no_grad():
            x = self.network(z)
        if self.ranks.world_size == 1:
            return x, self.view.score(x, batch), probe
        lo, hi = self.ranks.bounds(self.num_particles)  # each rank its rows' scores, gathered
        return x, self.ranks.all_gather_rows(self.view.score(x[lo:hi], batch), self.num_particles), probe

    def train_step(self) -> dict[str, float]:
        loss, _ = self.critic.train(self.critic_batch, self.options.entropy_weight)
        z = self.noise(self.num_particles)
        if self.ranks.world_size > 1:
            lo, hi = self.ranks.bounds(self.num_particles)
            x = self.network(z[lo:hi])
            phi = self.critic(x.detach())
            (phi2,) = self.ranked_pullback(x, phi, [phi.square().sum()])
            return {"critic_loss": loss, "direction_norm": (phi2 / self.num_particles) ** 0.5}
        x = self.network(z)
        phi = self.critic(x.detach())
        self.pullback(x, phi)
        return {"critic_loss": loss, "direction_norm": float(phi.square().sum(-1).mean().sqrt())}

    def extra_state(self) -> dict[str, Any]:
        return self.critic.state_dict()

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.critic.load_state_dict(state)
