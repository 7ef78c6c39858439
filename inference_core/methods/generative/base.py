"""`GenerativeMethod`: a generator f_θ(z) trained by pulling a particle-space direction back through it
(`pullback`, the surrogate-loss pattern, GPVI eq. 4 / eq. 14): with φ computed without a graph on a generated
batch x = f_θ(z), the generator's optimiser descends −(1/n) Σ_i φ_i·f_θ(z_i), whose θ-gradient is
−(1/n) Σ_i (∂f_θ(z_i)/∂θ)ᵀ φ_i.

State (all of it in `state_dict`, so a resumed run is bit-identical): generator (and log λ), its optimiser
(and λ's), the subclass's auxiliary networks and optimisers, the method's RNG (a CPU `torch.Generator`
that draws every noise batch, minibatch and probe, in a fixed order per step), the step count and the last
training batch (what `particles()` returns).
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from torch import Tensor

from inference_core import errors
from inference_core.methods.base import DTYPES, Method, check_direction
from inference_core.methods.optim import cosine_lr_factor, make_optimizer, optimizer_step, zero_grads
from inference_core.preconditioning.modes import distinct_modes
from inference_core.preconditioning.pathfinder import PathfinderResult, importance_check, pathfinder_whitening
from inference_core.preconditioning.transport import FlowTarget, fit_view_flow, misses_mass, paths_need_flow
from inference_core.prediction.model import predictive_model
from inference_core.samplers import Sampler
from inference_core.samplers.generator import GeneratorNetwork, mlp_features
from inference_core.schemas.auto import AutoOptions, PathfinderOptions
from inference_core.schemas.generative import GenerativeOptions
from inference_core.schemas.methods import OptimizerOptions
from inference_core.seeding import derive_seed
from inference_core.targets.base import Target
from inference_core.targets.whitened import WhitenedTarget

#: Default k: the noise prefix g reads is min(d, DEFAULT_NOISE_DIM) wide.
DEFAULT_NOISE_DIM = 64
#: λ for BNN-like targets (those with `initial_particles`) when k < d. λz gives every weight an sd ≥ λ whatever g
#: learns. ALF's MNIST hypernetwork uses 0.1: on the GPVI paper's Figure 1 BNN the on-data band sd was 1.08 at 0.1
#: (0.61 at 0.01, independent expectation batch). With eq. 9's expectation over the updated batch (the BNN default)
#: 0.01 still spread the weights: Figure 1's band on the data / in the gap 0.124 / 0.069 (NUTS 0.085 / 0.134, gap
#: ratio 0.56), at 0.003 0.056 / 0.038, at 0.001 0.030 / 0.035 (ratio 1.16); UCI split 0 at 0.01 → 0.001: Energy
#: NLL 0.94 → 0.67, Yacht RMSE 0.53 → 0.50 (docs/reproduction.md, GPVI BNN and UCI sections). All at a constant
#: learning rate; under GPVI's decayed BNN default (gpvi.DEFAULT_BNN_LR_SCHEDULE) 0.001 gives 0.022 / 0.017.
HYPERNETWORK_LAMBDA = 0.001
#: Draws used to measure the target's initialisation scale.
INIT_MATCH_DRAWS = 256

# Seed streams (seeding.derive_seed(seed, stream)).
STREAM_RNG, STREAM_GENERATOR_INIT, STREAM_AUX_INIT, STREAM_FIRST_BATCH, STREAM_INIT_MATCH = 1, 10, 11, 12, 13
STREAM_PRECONDITION = 14


def clone_tree(value: Any) -> Any:
    """Deep copy of nested dicts/lists/tuples, cloning tensors (a state must not alias live buffers)."""
    if isinstance(value, Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {key: clone_tree(item) for key, item in value.items()}
    if isinstance(value, list):
        return [clone_tree(item) for item in value]
    if isinstance(value, tuple):
        return tuple(clone_tree(item) for item in value)
    return value


def match_initial_scale(network: GeneratorNetwork, target: Target, seed: int) -> bool:
    """For targets with their own initialisation (`initial_particles`, e.g. a BNN's fan-in-scaled weights):
    rescale each row c of the output layer and set its bias so that, at initialisation, output coordinate c
    has the mean μ_c and standard deviation s_c of `INIT_MATCH_DRAWS` draws of that initialisation:
    Var[W_c·φ] = max(s_c² − λ², 0) (λz contributes λ² per coordinate) and b_c = μ_c − E[W_c·φ].
    A "coupling" generator (samplers.generator) gets the same for its d − k MLP rows (c ≥ k), and its top block
    t(u) = shift + exp(log_scale) ⊙ T(u), T the identity at initialisation, shift = μ[:k] and exp(log_scale) =
    s[:k] (floored at 1e-6): t(u) then has exactly that mean and sd.
    Returns whether it applied. Measured in float64 on the CPU with seeded draws."""
    own = getattr(target, "initial_particles", None)
    if own is None:
        return False
    d = network.output_dim
    m = max(16, min(INIT_MATCH_DRAWS, 2**25 // max(d, 1)))
    generator = torch.Generator().manual_seed(derive_seed(seed, STREAM_INIT_MATCH))
    reference = own(m, generator).detach().to("cpu", torch.float64)
    mean, std = reference.mean(0), reference.std(0)
    lam = network.lam_float()
    with torch.no_grad():
        z = torch.randn(m, network.noise_dim, generator=generator, dtype=torch.float64)
        hidden = [(w.to(torch.float64), b.to(torch.float64)) for w, b in network.hidden_params(detach=True)]
        features = mlp_features(hidden, z[:, : network.input_dim], network.activation)
        weight = network.output.weight.detach().to(torch.float64)
        if network.top is not None:
            k = network.input_dim
            network.top.shift.copy_(mean[:k])
            network.top.log_scale.copy_(std[:k].clamp_min(1e-6).log())
            mean, std = mean[k:], std[k:]
        out = features @ weight.T
        spread = out.std(0)
        wanted = (std.square() - lam**2).clamp_min(0).sqrt()
        scale = torch.where(spread > 0, wanted / spread.clamp_min(1e-300), torch.zeros_like(spread))
        network.output.weight.copy_(weight * scale[:, None])
        network.output.bias.copy_(mean - out.mean(0) * scale)
    return True


def whitened_view(target: Target, options: GenerativeOptions, seed: int, device: torch.device) -> Target:
    """The target in Pathfinder-whitened coordinates (`targets.whitened`) with `precondition` "pathfinder", else
    itself. Measured with GPVI's defaults on the robustness suite (2,000 steps, seed 0; worst |Δmean|/sd,
    worst |log sd ratio|): rotated Gaussian d = 20 0.37/0.51 raw → 0.23/6.2 whitened, eight schools
    (non-centred) 0.80/1.63 → 1.71/2.28, AR(2) 0.11/0.35 → 0.22/1.02: the generator's own collapse, not the
    coordinates, limits it there. With the matrix helper the picture changes (same problems, 3,000 steps:
    0.15/0.10, 0.14/0.18, 0.05/0.06 whitened, and diabetes 0.13/0.11, both mixtures ≤ 0.07/0.07), so GPVI's
    defaults are `helper: "matrix"` with `precondition: "auto"` (whitened unless the target has its own init).
    At its default 1,000 steps that missed rotated Gaussian 0.22, eight schools 0.17 and diabetes 0.32 (mean
    errors): the random initial generator has far to go, and on diabetes Pathfinder's Gaussian itself was 4
    sds off (its L-BFGS paths stop short there, fixed by Pathfinder's Newton steps). Whitened, GPVI now starts
    at the Pathfinder Gaussian (λ = 1, g's output layer zero: f(z) = z), and with the Newton steps the same 1,000
    steps give 0.05/0.04, 0.13/0.12, 0.06/0.03 (seed 0; seeds 1-2 at most 0.13/0.16), AR(2) and both mixtures
    ≤ 0.05/0.04. The funnel and the centred eight schools stayed out of reach (0.66/1.12, 9.2/1.4): no single
    Gaussian whitens them. There `precondition: "auto"` goes on through `auto`'s flow (`flow_view`)."""
    mode = getattr(options, "precondition", "none")
    if mode == "auto" and getattr(target, "initial_particles", None) is not None:
        mode = "none"
    if mode == "none":
        return target
    dtype = DTYPES[options.dtype]
    found, whitened = pathfinder_whitening(target, derive_seed(seed, STREAM_PRECONDITION), dtype, device,
                                           **PathfinderOptions().model_dump())
    if mode == "auto":
        mode = "flow" if flow_wanted(target, found, seed, dtype, device) else "pathfinder"
    if mode == "pathfinder":
        return whitened
    # fitted in float64, as by `auto` (the target still evaluated in the job's dtype), then trained in the job's
    evaluated = WhitenedTarget(target, whitened.shift, whitened.root, evaluate_in=dtype)
    flow = fit_view_flow(evaluated, options.flow, seed, device, torch.float64)[0].flow
    return FlowTarget(whitened, flow.to(dtype))


def flow_wanted(target: Target, found: PathfinderResult, seed: int, dtype: torch.dtype, device: torch.device) -> bool:
    """`auto`'s rule for its flow with `auto`'s defaults (preconditioning/transport.py): Pathfinder's paths settle at
    no mode or end far apart, or its Gaussian misses mass by the importance check (`AutoOptions.khat_draws` draws);
    and, where `auto` starts its particles in the modes' shares instead (preconditioning/modes.py), wherever the
    paths settled in separated modes: a generator from one Gaussian's whitening spreads over both or keeps one."""
    rule = AutoOptions()
    if paths_need_flow(found, rule.flow_above) or len(distinct_modes(found)) > 1:
        return True
    check = importance_check(target, found.best, rule.khat_draws,
                             torch.Generator().manual_seed(derive_seed(seed, STREAM_PRECONDITION, 1)), dtype, device)
    return misses_mass(check, rule)


class GenerativeMethod(Method):
    """Base of GPVI and the amortised methods; subclasses implement `train_step() -> metrics`."""

    family = "generative"
    auto_remedy = "draws"
    options: GenerativeOptions

    def __init__(self, target: Target, options: GenerativeOptions, num_particles: int, seed: int,
                 device: torch.device):
        super().__init__(target, options, num_particles, seed, device)
        if num_particles < 2:
            raise errors.MethodOptionsInvalid("a generative method needs a batch of at least 2 particles",
                                              loc=("num_particles",))
        d = int(target.dim)
        #: the target the generator trains against: `target` itself, or its whitened view (issue 14)
        self.view: Target = whitened_view(target, options, seed, device)
        gen = options.generator
        k = gen.noise_dim if gen.noise_dim is not None else min(d, DEFAULT_NOISE_DIM)
        if k > d:
            raise errors.MethodOptionsInvalid(f"generator.noise_dim k={k} exceeds the target dimension {d}",
                                              loc=("options", "generator", "noise_dim"))
        own_init = getattr(target, "initial_particles", None) is not None
        whitened = self.view is not target
        lam = gen.lam if gen.lam is not None else self.default_lambda(k, d, own_init, whitened)
        self.check_lambda(lam, k, d)
        if gen.lambda_trainable and lam <= 0:
            raise errors.MethodOptionsInvalid("a trainable lambda needs lambda > 0",
                                              loc=("options", "generator", "lambda_trainable"))
        structure = gen.structure if gen.structure is not None else self.default_structure(k, d, own_init, whitened,
                                                                                             lam)
        if structure == "coupling" and not (lam > 0 and k < d):
            raise errors.MethodOptionsInvalid(
                f"generator structure 'coupling' needs lambda > 0 and a noise prefix k < d (got lambda={lam}, k={k}, "
                f"d={d})", loc=("options", "generator", "structure"))
        init = torch.Generator().manual_seed(derive_seed(seed, STREAM_GENERATOR_INIT))
        self.network = GeneratorNetwork(input_dim=k, hidden=gen.hidden, output_dim=d, activation=gen.activation,
                                        lam=float(lam), lam_trainable=gen.lambda_trainable, generator=init,
                                        structure=structure, coupling_layers=gen.coupling_layers,
                                        coupling_hidden=gen.coupling_hidden)
        self.init_matched = match_initial_scale(self.network, target, seed) if not whitened else False
        if whitened and lam > 0:  # start from the Pathfinder Gaussian itself (f(z) = λz; N(0, I) at GPVI's λ = 1)
            with torch.no_grad():
                self.network.output.weight.zero_()
                self.network.output.bias.zero_()
                if self.network.top is not None:  # t(u) = λu: T starts as the identity
                    self.network.top.shift.zero_()
                    self.network.top.log_scale.fill_(math.log(lam))
        self.network.to(device=device, dtype=self.dtype)
        self.optimizer = make_optimizer(self.network.generator_parameters(), options.optimizer)
        #: the generator's learning-rate schedule over the job's steps (`lr_schedule`, resolved)
        self.lr_schedule = options.lr_schedule or self.default_lr_schedule(own_init, whitened)
        self.lambda_optimizer = (make_optimizer([self.network.log_lambda], OptimizerOptions(name="adam", lr=gen.lambda_lr))
                                 if gen.lambda_trainable else None)
        self.rng = torch.Generator(device="cpu")
        self.rng.manual_seed(derive_seed(seed, STREAM_RNG))
        self.build_auxiliary(torch.Generator().manual_seed(derive_seed(seed, STREAM_AUX_INIT)))
        first = torch.Generator().manual_seed(derive_seed(seed, STREAM_FIRST_BATCH))
        with torch.no_grad():
            self.last_batch = self.network(self.noise(num_particles, first)).detach()

    # ---- hooks ---------------------------------------------------------------------------------------

    def default_lambda(self, k: int, d: int, own_init: bool, whitened: bool) -> float:
        """λ when the options leave it out (amortised methods: 0, i.e. f = g on k-dimensional noise)."""
        return 0.0

    def default_structure(self, k: int, d: int, own_init: bool, whitened: bool, lam: float) -> str:
        """The generator structure when the options leave it out (samplers.generator.STRUCTURES)."""
        return "residual"

    def default_lr_schedule(self, own_init: bool, whitened: bool) -> str:
        """`lr_schedule` when the options leave it out."""
        return "constant"

    def check_lambda(self, lam: float, k: int, d: int) -> None:
        return None

    def build_auxiliary(self, generator: torch.Generator) -> None:
        """Create helper/critic networks and their optimisers, initialised from `generator`."""
        return None

    def train_step(self) -> dict[str, float]:
        raise NotImplementedError

    def extra_state(self) -> dict[str, Any]:
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        return None

    # ---- shared pieces -------------------------------------------------------------------------------

    @property
    def noise_dim(self) -> int:
        return self.network.noise_dim

    def noise(self, m: int, generator: torch.Generator | None = None) -> Tensor:
        """m standard-normal noise rows [m, noise_dim], drawn on the CPU (device-independent), then moved."""
        draw = torch.randn(m, self.noise_dim, generator=generator or self.rng, dtype=self.dtype)
        return draw.to(self.device)

    def pullback(self, points: Tensor, direction: Tensor) -> None:
        """One generator update along the ascent direction φ [n, d] at the batch x = f_θ(z) (`points`, with
        its graph to θ): the optimiser descends the surrogate −(1/n) Σ_i φ_i·f_θ(z_i), whose θ-gradient is
        −(1/n) Σ_i (∂f_θ(z_i)/∂θ)ᵀ φ_i (GPVI eq. 4 / eq. 14; λ's optimiser steps too when λ is trained).
        The batch becomes `particles()`."""
        check_direction(direction, self.step_count + 1)
        surrogate = -(direction.detach() * points).sum(-1).mean()
        zero_grads(self.optimizer)
        if self.lambda_optimizer is not None:
            zero_grads(self.lambda_optimizer)
        surrogate.backward()
        optimizer_step(self.optimizer)
        if self.lambda_optimizer is not None:
            optimizer_step(self.lambda_optimizer)
        self.last_batch = points.detach()

    def ranked_pullback(self, points: Tensor, direction: Tensor, stats: list[Tensor] | None = None,
                        batch: Tensor | None = None) -> list[float]:
        """`pullback` with the batch shared by the ranks (`rank_sharing` "batch", `inference_core.distributed`):
        `points` = f_θ(z_i) for this rank's rows i [lo, hi) of the batch (with their graph to θ) and `direction`
        φ_i for the same rows. Each rank back-propagates its part −(1/n) Σ_{i ∈ own} φ_i·f_θ(z_i) of the surrogate
        (GPVI eq. 4 / eq. 14, n the whole batch), so the SUM of the ranks' θ-gradients, all-reduced, is the one-rank
        gradient −(1/n) Σ_i (∂f_θ(z_i)/∂θ)ᵀ φ_i up to the order of the additions; then the same optimiser step (and
        λ's) on every rank keeps the generators identical. In the same all-reduce: a flag that raises
        `errors.Diverged` on every rank when any rank's direction is not finite, and `stats` (0-dim or 1-element
        local sums for the metrics), returned summed. `batch`: the whole batch f_θ(z) when the caller has gathered
        it already (else it is gathered here); it becomes `particles()`."""
        group = self.ranks
        n = self.num_particles
        surrogate = -(direction.detach() * points).sum() / n
        zero_grads(self.optimizer)
        if self.lambda_optimizer is not None:
            zero_grads(self.lambda_optimizer)
        surrogate.backward()
        # the parameters the surrogate reaches: the same on every rank (every rank has rows; same graph)
        grads = [p.grad for opt in (self.optimizer, self.lambda_optimizer) if opt is not None
                 for param_group in opt.param_groups for p in param_group["params"] if p.grad is not None]
        flag = (direction * 0.0).sum().isnan().to(points.dtype)  # as check_direction
        extra = torch.stack([flag, *[s.detach().reshape(()).to(points.dtype) for s in (stats or [])]])
        group.all_reduce_sum_([*grads, extra])
        if float(extra[0]) > 0:
            raise errors.Diverged(f"the update direction became non-finite at step {self.step_count + 1}")
        optimizer_step(self.optimizer)
        if self.lambda_optimizer is not None:
            optimizer_step(self.lambda_optimizer)
        self.last_batch = batch if batch is not None else group.all_gather_rows(points.detach(), n)
        return [float(v) for v in extra[1:]]

    def ranked_rows(self) -> tuple[int, ...]:
        return (self.num_particles, getattr(self, "expectation_particles", self.num_particles))

    def apply_direction(self, x: Tensor, phi: Tensor) -> None:
        """The former name of `pullback` (kept for existing callers; a subclass's `pullback` applies)."""
        self.pullback(x, phi)

    def step(self) -> dict[str, float]:
        started = time.perf_counter()
        lr = self.scheduled_lr()
        info = self.train_step()
        self.step_count += 1
        if not bool(torch.isfinite(self.last_batch).all()):
            raise errors.Diverged(f"the generator's output became non-finite at step {self.step_count}")
        return {"step_time_s": time.perf_counter() - started, "lambda": self.network.lam_float(), "lr": lr, **info}

    def scheduled_lr(self) -> float:
        """Set and return the generator's learning rate for the coming step (`lr_schedule`; a plain float, so
        `optimizer_step`'s direct path still applies). Derived from the step count alone, so a resumed run takes
        the same rates."""
        lr = float(self.options.optimizer.lr)
        if self.lr_schedule == "cosine" and self.total_steps:
            lr *= cosine_lr_factor(self.step_count, self.total_steps, self.options.lr_final_factor)
        self.optimizer.param_groups[0]["lr"] = lr
        return lr

    def to_target(self, u: Tensor) -> Tensor:
        """Generator outputs → the target's coordinates (the identity unless trained whitened or in a flow)."""
        if isinstance(self.view, FlowTarget):
            return self.view.base.to_target(self.view.to_target(u))
        return self.view.to_target(u) if isinstance(self.view, WhitenedTarget) else u

    def particles(self) -> Tensor:
        return self.to_target(self.last_batch)

    def diagnostic_coordinates(self) -> tuple[Tensor, Target, str]:
        """Through a flow, the quality checks run where the generator's draws live, the flow's latent space, with
        the target pulled back there (as `auto`'s: a funnel's exact draws look stranded in x, metrics.quality)."""
        if isinstance(self.view, FlowTarget):
            return self.last_batch, self.view, "flow_latent"
        return super().diagnostic_coordinates()

    def sampler(self) -> Sampler:
        describe = getattr(self.target, "describe_layout", None)
        layout = describe() if callable(describe) else None
        flow = self.view.flow if isinstance(self.view, FlowTarget) else None
        whitened = self.view.base if flow is not None else self.view
        affine = (whitened.shift, whitened.root) if isinstance(whitened, WhitenedTarget) else None
        return Sampler.from_generator(self.network, method=self.name, target_kind=self.target.kind, layout=layout,
                                      model=predictive_model(self.target), affine=affine, flow=flow)

    # ---- checkpoints ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        state = {
            "step": self.step_count,
            "generator": self.network.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "lambda_optimizer": None if self.lambda_optimizer is None else self.lambda_optimizer.state_dict(),
            "rng": self.rng.get_state(),
            "last_batch": self.last_batch,
            **self.extra_state(),
        }
        return clone_tree(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.network.load_state_dict(state["generator"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.lambda_optimizer is not None:
            self.lambda_optimizer.load_state_dict(state["lambda_optimizer"])
        self.rng.set_state(state["rng"])
        self.last_batch = state["last_batch"].to(device=self.device, dtype=self.dtype)
        self.step_count = int(state["step"])
        self.load_extra_state(state)


def expectation_size(options: Any, n: int) -> int:
    size = getattr(options, "expectation_particles", None)
    return int(size) if size is not None else n

