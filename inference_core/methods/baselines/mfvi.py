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
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from inference_core import errors
from inference_core.methods.base import Method, initial_particles
from inference_core.methods.baselines.common import require_log_density
from inference_core.methods.optim import build_optimizer
from inference_core.prediction.model import predictive_model
from inference_core.samplers import FORMAT, FORMAT_VERSION, NOISE_DRAW, Sampler
from inference_core.schemas.baselines import MFVIOptions
from inference_core.seeding import derive_seed
from inference_core.targets.base import Target

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

    def elbo_estimate(self, batch: object | None) -> Tensor:
        """The reparameterised ELBO estimate (a graph to μ and ρ)."""
        d = self.mu.shape[0]
        eps = torch.randn(self.options.mc_samples, d, generator=self.generator, dtype=self.dtype).to(self.device)
        sigma = self.sigma()
        theta = self.mu + sigma * eps
        log_p = self.target.log_prob(theta, batch)
        if self.options.entropy == "closed_form":
            return log_p.mean() + torch.log(sigma).sum() + 0.5 * d * _LOG_2PI_E
        # log q(θ) = Σ_i log N(θ_i; μ_i, σ_i²), with (θ − μ)/σ = ε.
        log_q = -0.5 * eps.square().sum(-1) - torch.log(sigma).sum() - 0.5 * d * math.log(2 * math.pi)
        return (log_p - log_q).mean()

    def step(self) -> dict[str, float]:
        started = time.perf_counter()
        batch = self.target.sample_batch(self.generator)
        self.optimizer.zero_grad(set_to_none=False)
        elbo = self.elbo_estimate(batch)
        (-elbo).backward()
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
