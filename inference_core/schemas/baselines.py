"""Option schemas of the baseline methods: `mfvi` (Bayes by Backprop), `ensemble` (deep ensemble), and the
reference samplers `hmc` and `nuts` (Pyro's kernels). Every field is documented in its `description`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from inference_core.schemas.common import StrictModel
from inference_core.schemas.methods import InitOptions, OptimizerOptions, ParticleMethodOptions


def _adam(lr: float) -> OptimizerOptions:
    return OptimizerOptions(name="adam", lr=lr)


class MFVIOptions(StrictModel):
    """Mean-field Gaussian q(θ) = N(μ, diag σ²), σ = softplus(ρ), trained on the reparameterised ELBO
    (Blundell et al. 2015, eqs. 1-4 and §3.2). μ starts at the target's own initialisation (`init`, as the
    particle methods' particle 0); ρ at softplus⁻¹(init_std)."""

    optimizer: OptimizerOptions = Field(default_factory=lambda: _adam(1e-2),
                                        description="optimiser of (μ, ρ); default Adam, lr 1e-2")
    init: InitOptions = Field(default_factory=InitOptions, description="where μ starts")
    init_std: float = Field(default=0.05, gt=0, le=1e3, description="σ at the start (all coordinates)")
    mc_samples: int = Field(default=1, ge=1, le=1024, description="draws of θ ~ q per ELBO estimate")
    entropy: Literal["closed_form", "monte_carlo"] = Field(
        default="closed_form",
        description="H[q] in closed form Σ log σ + d/2 log(2πe), or the paper's sampled −log q(θ) (eq. 2)",
    )
    dtype: Literal["float32", "float64"] = "float32"


class EnsembleOptions(ParticleMethodOptions):
    """n networks, each its own MAP: every particle ascends its own log posterior with the optimiser
    (Lakshminarayanan et al. 2017 without the adversarial term); no interaction between members."""

    optimizer: OptimizerOptions = Field(default_factory=lambda: _adam(1e-2),
                                        description="optimiser of every member; default Adam, lr 1e-2")
    independent_batches: bool = Field(
        default=False, description="each member draws its own minibatch (n log-density calls per step); "
        "default: one shared minibatch per step (members still differ by their initialisation)"
    )


class MCMCOptions(StrictModel):
    """Reference sampling with Pyro's HMC/NUTS kernels (pyro-ppl 1.9.2), one transition of every chain per
    step. The kernels see the full-data log density (never a minibatch: that would break detailed balance).

    A method is not told the job's step count, so the warm-up is its own option: the first `warmup_steps`
    steps adapt the step size (dual averaging) and the mass matrix (Stan's windows) and are discarded; the
    steps after it are kept. A job with steps ≤ warmup_steps returns the chains' current positions.
    """

    chains: int = Field(default=4, ge=1, le=64, description="independent chains (R-hat needs at least 2)")
    warmup_steps: int = Field(default=500, ge=0, le=1_000_000,
                              description="adaptation transitions per chain, discarded (not the job's steps)")
    step_size: float = Field(default=1.0, gt=0, le=1e3, description="initial leapfrog step size")
    adapt_step_size: bool = True
    adapt_mass_matrix: bool = True
    full_mass: bool = Field(default=False, description="dense mass matrix (d ≤ 2000) instead of diagonal")
    target_accept_prob: float = Field(default=0.8, gt=0, lt=1, description="dual-averaging target")
    init: InitOptions = Field(default_factory=InitOptions, description="chain c starts at particle c of this rule")
    max_draws_per_chain: int = Field(
        default=1000, ge=8, le=100_000,
        description="draws kept per chain; when full, every other one is dropped and the stride doubles"
    )
    diagnostics_every: int = Field(default=100, ge=1, le=1_000_000,
                                   description="ESS / R-hat in the step metrics every this many steps")
    dtype: Literal["float32", "float64"] = Field(default="float64", description="the target's precision")
    draws_returned: Literal["all", "num_particles"] = Field(
        default="all",
        description="the job's particles: 'all' = every stored post-warm-up draw (up to chains × "
        "max_draws_per_chain, interleaved across chains); 'num_particles' = that many of them, evenly spaced over "
        "each chain's record. Until 2026-11-28 the job returned num_particles (100 by default) of its 4,000 "
        "stored draws, so its answers were noisier than the run warranted")


class NUTSOptions(MCMCOptions):
    """The No-U-Turn sampler (Hoffman & Gelman 2014, Algorithm 6; Pyro's multinomial variant, Betancourt 2017)."""

    max_tree_depth: int = Field(default=10, ge=1, le=15, description="at most 2^depth leapfrog steps")


class HMCOptions(MCMCOptions):
    """Hamiltonian Monte Carlo (Neal 2011): `num_steps` leapfrog steps per transition whatever the adapted
    step size, or else trajectory_length / step size of them (Pyro's default length 2π), at most max_num_steps."""

    num_steps: int | None = Field(default=None, ge=1, le=10_000,
                                  description="fixed leapfrog steps per transition (the step size still adapts)")
    trajectory_length: float | None = Field(default=None, gt=0, le=1e4,
                                            description="ε × leapfrog steps, when num_steps is not given (default 2π)")
    max_num_steps: int = Field(default=1024, ge=1, le=100_000,
                               description="cap on trajectory_length / ε (as NUTS's max_tree_depth 10)")

    @model_validator(mode="after")
    def _one_length(self) -> HMCOptions:
        if self.num_steps is not None and self.trajectory_length is not None:
            raise ValueError("give num_steps or trajectory_length, not both")
        return self
