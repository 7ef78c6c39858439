"""`mfvi`: Bayes by Backprop (Blundell et al. 2015), a mean-field Gaussian q(θ) = N(μ, diag σ²), σ = softplus(ρ)
(§3.2), fitted by stochastic ascent on the ELBO

    L(μ, ρ) = E_q[log p(θ, D)] + H[q],      θ = μ + σ ⊙ ε, ε ~ N(0, I)      (eqs. 1-4, the reparameterisation)

estimated with `mc_samples` draws of ε and the target's minibatch log density (already N/B-scaled, so the
estimate is unbiased for the full-data ELBO; DataTarget). H[q] = Σ log σ_i + d/2 log(2πe) in closed form
(default, lower variance), or the paper's sampled −log q(θ) (eq. 2). The prior is the target's own.

Mean-field's known answer on a Gaussian target N(m, Λ⁻¹): μ = m and σ_i² = 1/Λ_ii (the KL(q‖p) optimum under
a factorised q; Bishop 2006 §10.1.2), so q under-covers correlated posteriors; the tests check exactly that.

`particles()`: n draws μ + σ ⊙ z with z from a fixed stream of the seed (the same z at every step).
`sampler()`: f(z) = diag(σ) z + μ in the archive's generator format (hidden [], W = diag σ, b = μ, λ = 0),
so `/v1/samplers/{id}/sample` works for MF-VI; W is stored dense, hence only for d ≤ SAMPLER_MAX_DIM (above it
`sampler()` is None: a dense d×d float32 W would be ≥ 64 MiB).

As k ranks on a data target (`rank_sharing` "data", inference_core.distributed: data parallel, as
DistributedDataParallel is): every rank holds μ, ρ and the optimiser state and draws the same ε and minibatch; rank
r evaluates the log-likelihood of its contiguous share of the minibatch rows (all N rows without one) at the same
θ, scaled by the whole batch's N/B, and rank 0 adds the prior and the entropy; the ranks' parts of the ELBO sum to
one rank's, so their μ- and ρ-gradients, all-reduced, are its gradient (up to the order of the additions) and every
rank takes the same Adam step.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from inference_core import errors
from inference_core.distributed.group import RankGroup
from inference_core.methods.base import Method, initial_particles
from inference_core.methods.baselines.common import require_log_density
from inference_core.methods.optim import build_optimizer
from inference_core.prediction.model import predictive_model
from inference_core.samplers import FORMAT, FORMAT_VERSION, NOISE_DRAW, Sampler
from inference_core.schemas.baselines import MFVIOptions
from inference_core.seeding import derive_seed
from inference_core.targets.base import Target
from inference_core.targets.counting import record_evaluations
from inference_core.targets.models.data import DataTarget

#: Largest d for which `sampler()` writes the dense diagonal W (4096² float32 = 64 MiB).
SAMPLER_MAX_DIM = 4096
# Seed streams (seeding.derive_seed(seed, stream)).
STREAM_RNG, STREAM_PARTICLES = 1, 30
_LOG_2PI_E = math.log(2 * math.pi) + 1.0


def inverse_softplus(value: Tensor) -> Tensor:
    """ρ with softplus(ρ) = value > 0, written to stay finite for large values: v + log(1 − e^{−v})."""
    return value + torch.log(-torch.expm1(-value))


class MFVI(Method):
    """Mean-field Gaussian VI by the reparameterisation gradient (Bayes by Backprop)."""

    name = "mfvi"
    options: MFVIOptions
    rank_sharing = "data"

    def __init__(self, target: Target, options: MFVIOptions, num_particles: int, seed: int, device: torch.device):
        super().__init__(target, options, num_particles, seed, device)
        require_log_density(target, self.name, self.dtype, device)
        d = int(target.dim)
        start = initial_particles(target, options.init, 1, seed)[0]
        self.mu = start.to(device=device, dtype=self.dtype).requires_grad_(True)
        rho = inverse_softplus(torch.full((d,), float(options.init_std), dtype=torch.float64))
        self.rho = rho.to(device=device, dtype=self.dtype).requires_grad_(True)
        self.optimizer = build_optimizer([self.mu, self.rho], options.optimizer)
        # Draws every ε and minibatch, in a fixed order per step: part of the state.
        self.generator = torch.Generator(device="cpu")
        self.generator.manual_seed(derive_seed(seed, STREAM_RNG))

    # ---- q -------------------------------------------------------------------------------------------

    def sigma(self) -> Tensor:
        return F.softplus(self.rho)

    def use_ranks(self, group: RankGroup) -> None:
        if group.world_size > 1 and not isinstance(self.target, DataTarget):
            raise errors.ProcessesUnsupported(
                f"mfvi shares a data target's rows among ranks; a {self.target.kind} target has none: "
                "resources.processes must be 1")
        super().use_ranks(group)

    def ranked_rows(self) -> tuple[int, ...]:
        """The minibatch rows the ranks share (all N without a minibatch)."""
        target: DataTarget = self.target  # type: ignore[assignment]
        return (target.batch_size or target.n_data,)

    def elbo_estimate(self, batch: object | None) -> Tensor:
        """The reparameterised ELBO estimate (a graph to μ and ρ); under k ranks this rank's part of it."""
        d = self.mu.shape[0]
        eps = torch.randn(self.options.mc_samples, d, generator=self.generator, dtype=self.dtype).to(self.device)
        sigma = self.sigma()
        theta = self.mu + sigma * eps
        ranked = self.ranks.world_size > 1
        log_p = self._log_p_part(theta, batch) if ranked else self.target.log_prob(theta, batch)
        if ranked and not self.ranks.is_root:  # the entropy is rank 0's
            return log_p.mean()
        if self.options.entropy == "closed_form":
            return log_p.mean() + torch.log(sigma).sum() + 0.5 * d * _LOG_2PI_E
        # log q(θ) = Σ_i log N(θ_i; μ_i, σ_i²), with (θ − μ)/σ = ε.
        log_q = -0.5 * eps.square().sum(-1) - torch.log(sigma).sum() - 0.5 * d * math.log(2 * math.pi)
        return (log_p - log_q).mean()

    def _log_p_part(self, theta: Tensor, batch: object | None) -> Tensor:
        """This rank's part of log p(θ, D) [mc_samples]: (N/B) Σ over its share of the minibatch rows of log p(y_i |
        x_i, θ), plus log prior(θ) on rank 0. Counted as one rank's `log_prob` rows, on rank 0."""
        target: DataTarget = self.target  # type: ignore[assignment]
        rows = batch if isinstance(batch, Tensor) else torch.arange(target.n_data, device=theta.device)
        lo, hi = self.ranks.bounds(rows.shape[0])
        part = target.likelihood_scale(batch) * target.log_likelihood_sum(theta, rows[lo:hi])  # type: ignore[arg-type]
        if self.ranks.is_root:
            record_evaluations(target, theta.shape[0])
            part = part + target.log_prior(theta)
        return part

    def step(self) -> dict[str, float]:
        started = time.perf_counter()
        batch = self.target.sample_batch(self.generator)
        self.optimizer.zero_grad(set_to_none=False)
        elbo = self.elbo_estimate(batch)
        (-elbo).backward()
        if self.ranks.world_size > 1:  # the parts' gradients and ELBOs summed: one rank's
            total = elbo.detach().reshape(1).clone()
            self.ranks.all_reduce_sum_([self.mu.grad, self.rho.grad, total])
            elbo = total[0]
        grads = torch.cat([self.mu.grad, self.rho.grad])
        if not (bool(torch.isfinite(elbo)) and bool(torch.isfinite(grads).all())):
            raise errors.Diverged(f"the ELBO or its gradient became non-finite at step {self.step_count + 1}")
        self.optimizer.step()
        self.step_count += 1
        sigma = self.sigma().detach()
        return {"step_time_s": time.perf_counter() - started, "elbo": float(elbo.detach()),
                "sigma_mean": float(sigma.mean()), "sigma_min": float(sigma.min()),
                "grad_norm": float(grads.norm())}

    # ---- outputs -------------------------------------------------------------------------------------

    def particles(self) -> Tensor:
        """n draws μ + σ ⊙ z, z [n, d] from the seed's fixed stream (drawn on the CPU, then moved)."""
        generator = torch.Generator().manual_seed(derive_seed(self.seed, STREAM_PARTICLES))
        z = torch.randn(self.num_particles, self.mu.shape[0], generator=generator, dtype=self.dtype)
        with torch.no_grad():
            return self.mu.detach() + self.sigma().detach() * z.to(self.device)

    def sampler(self) -> Sampler | None:
        """f(z) = diag(σ) z + μ as an archive sampler (None when d > SAMPLER_MAX_DIM)."""
        d = int(self.mu.shape[0])
        if d > SAMPLER_MAX_DIM:
            return None
        sigma = self.sigma().detach().to(device="cpu", dtype=torch.float32)
        config = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "method": self.name,
            "dtype": "float32",
            "generator": {"kind": "mlp", "noise_dim": d, "input_dim": d, "hidden": [], "activation": "relu",
                          "output_dim": d, "lambda": 0.0},
            "noise": {"distribution": "standard_normal", "dtype": "float32", "draw": NOISE_DRAW},
            "target": {"kind": self.target.kind, "dim": d},
            "layout": self._layout(),
            # what /predict and the held-out metrics need (network, task, noise) — as GPVI's samplers carry
            "model": predictive_model(self.target),
        }
        tensors = {"output.weight": torch.diag(sigma),
                   "output.bias": self.mu.detach().to(device="cpu", dtype=torch.float32)}
        return Sampler(config, tensors)

    def _layout(self) -> list[dict[str, Any]] | None:
        describe = getattr(self.target, "describe_layout", None)
        try:
            return describe() if callable(describe) else None
        except ValueError:  # a function_posterior without network weights (gp prior)
            return None

    # ---- checkpoints ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step_count, "mu": self.mu.detach().clone(), "rho": self.rho.detach().clone(),
                "optimizer": self.optimizer.state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            self.mu.copy_(state["mu"].to(self.mu))
            self.rho.copy_(state["rho"].to(self.rho))
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.step_count = int(state["step"])
