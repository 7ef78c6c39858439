"""Neural transport for `auto` (`transport`): funnels that no linear whitening straightens. `auto` fits it where
Pathfinder's paths end far apart or settle at no mode (`transport: "auto"`, the default) or always (`transport:
"flow"`).

NeuTra (Hoffman, Sountsov, Dillon, Langmore, Tran & Vasudevan 2019, "NeuTra-lizing bad geometry in Hamiltonian
Monte Carlo using neural transport", §3): fit a normalising flow T to the posterior by reverse KL, then sample in
its latent space, where the target p_z(z) = p(T(z)) |det ∂T/∂z| is close to N(0, I) even where p's scale changes
across the space. There NUTS runs; here SVGD does (`auto`), which also corrects the flow's reverse-KL
under-dispersion in the tails.

The flow is a stack of affine coupling layers (Dinh, Sohl-Dickstein & Bengio 2017, "Density estimation using
Real NVP", eq. 7-8): y = z ⊙ m + (1 − m) ⊙ (z ⊙ exp(s(z ⊙ m)) + t(z ⊙ m)) with a random half mask m per layer,
log det = Σ (1 − m) ⊙ s. One coupling with (v) in m represents Neal's funnel exactly (x_i = e^{v/2} z_i), and a
hierarchy's θ_j = μ + τ η_j is the same form, which is why the family suits the suite's funnels. The last layer of
every s, t network starts at zero, so T starts as the identity: in `auto` T acts on Pathfinder-whitened
coordinates, and the fit starts from the Pathfinder Gaussian.

Measured on the robustness suite (docs/method-choice.md; 8 layers of width 64, 2,000 Adam steps of 64 draws):
with the fit of the time (plain reparameterised gradient, constant step), Neal's funnel met issue 14's bars on 2 of
6 seeds and centred eight schools on 2 of 6 (seeds 0-5, 100 particles; 5 of 6 each when `auto` moves 300, as it now
does there), against none of seeds 0-2 with the linear whitening; with the flow forced, the eight other problems
met them on seeds 0-2, non-centred eight schools at 100 SVGD steps. 1,000 steps of 32 draws were not enough for the
10-d funnel (0 of 3). Reverse KL under-covers a funnel's neck (the flow's own draws: v's sd 0.34-0.57 too narrow
in log units), and there the latent target is far from N(0, I); `fit_flow`'s sticking-the-landing gradient and
cosine decay narrowed that to 0.17-0.37 (seeds 0-3), and `auto` then met the bars on the funnel on 6 of 6 seeds;
docs/method-choice.md, "What limits the funnels", has the rest.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from inference_core import errors
from inference_core.coupling import CouplingFlow
from inference_core.preconditioning.modes import distinct_modes
from inference_core.preconditioning.pathfinder import ImportanceCheck, PathfinderResult
from inference_core.schemas.auto import AutoOptions, FlowOptions
from inference_core.seeding import derive_seed
from inference_core.targets.base import Target


def batch_schedule(steps: int, batch: int, batch_start: int | None) -> list[int]:
    """Draws at each step of `fit_flow`: linear from `batch_start` to `batch` (a growing batch, Byrd, Chin, Nocedal
    & Wu 2012, "Sample size selection in optimization methods for machine learning": a gradient's noise need only
    shrink as the optimum nears), or `batch` throughout."""
    if batch_start is None or steps == 1:
        return [batch] * steps
    return [round(batch_start + (batch - batch_start) * step / (steps - 1)) for step in range(steps)]


def fit_flow(base: Target, flow: CouplingFlow, *, batches: list[int], lr: float,
             generator: torch.Generator) -> list[float]:
    """Reverse KL of T_#N(0, I) to `base`, by Adam on `batches[i]` fresh draws at step i with a cosine decay of the
    step to zero; rows
    where log p is not finite are left out of a step's mean. Returns the loss −(log p(T(z)) + log|det ∂T/∂z|),
    the negative ELBO up to a constant, every step.

    The gradient is the "sticking the landing" estimator (Roeder, Wu & Duvenaud 2017, eq. 8): log q is evaluated
    at x = T_θ(z) through the inverse with θ held fixed, so the gradient flows only through the draw x. That drops
    the score term ∇_θ log q_θ(x), zero in expectation but not per draw: where q = p the estimate is zero draw by
    draw, so the fit settles instead of jittering in the tails. The cosine decay stops Adam's own jitter at the end.
    Measured on the suite's funnel (10-d, seeds 0-3, the flow's own draws against v's exact sd, |log sd ratio|):
    0.35, 0.34, 0.57 (seeds 0-2) with the plain reparameterised gradient at a constant 1e-3 (the fit before);
    0.24, 0.32, 0.46, 0.27 with the cosine decay from 2e-3; 0.17, 0.19, 0.37, 0.18 with both. Centred eight schools,
    log τ: 0.37, 0.31, 0.93, 0.36 → 0.32, 0.25, 0.59, 0.24."""
    parameters = [p for p in flow.parameters() if p.requires_grad]
    like = next(flow.parameters())
    optimizer = torch.optim.Adam(parameters, lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=len(batches))
    losses = []
    for step, batch in enumerate(batches):
        # drawn on the CPU generator (the same draws on any device), then moved to the flow's device
        z = torch.randn(batch, int(base.dim), generator=generator, dtype=like.dtype).to(like.device)
        x, log_det = flow(z)
        log_p = base.log_prob(x)
        finite = torch.isfinite(log_p)
        if not bool(finite.any()):
            raise errors.TargetNonFinite(f"the flow's draws at step {step} all have a non-finite log-density")
        loss = (flow.log_density(x, frozen=True) - log_p)[finite].mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(float(-(log_p + log_det)[finite].detach().mean()))
        if not math.isfinite(losses[-1]):
            raise errors.TargetNonFinite(f"the flow's reverse-KL loss is not finite at step {step}")
    for p in parameters:
        p.requires_grad_(False)
    return losses


def paths_need_flow(found: PathfinderResult, flow_above: float) -> bool:
    """Pathfinder's paths end more than `flow_above` of its sds apart (no single mode to whiten around) but not at
    separated modes, or some path did not settle at a mode: log p still rose at its last iteration, down a neck
    where the density grows without bound (docs/method-choice.md, "Pathfinder's candidates and the neck").
    Separated modes take no flow: `auto` starts its particles in their masses (`modes.py`), where the flow, fitted
    by reverse KL, which seeks one mode, put them all in one (two unit Gaussians 12 apart, d = 4, seeds 0-3; in
    their masses 0.02-0.03 / 0.02-0.07, tests/unit/auto/test_auto_method.py)."""
    far = found.start_disagreement() > flow_above and len(distinct_modes(found)) < 2
    return far or not all(found.settled)


def misses_mass(importance: ImportanceCheck, options: AutoOptions) -> bool:
    """Pathfinder's Gaussian misses posterior mass: k̂ above `flow_khat_above` and its importance-weighted mean
    more than `flow_shift_above` of its sds from its own (heavy tails alone do not move it), or that mean more
    than `flow_shift_alone_above` away whatever k̂ (a mode far from the mean)."""
    return (importance.khat > options.flow_khat_above and importance.shift_sd > options.flow_shift_above
            or importance.shift_sd > options.flow_shift_alone_above)


#: `flow.batch_start: "auto"` where MALA chains move the particles: they correct a flow fitted on fewer draws
#: (the option's description has the measurements); elsewhere the batch is `batch` throughout
CHAINS_BATCH_START = 16


def fit_view_flow(view: Target, options: FlowOptions, seed: int, device: torch.device, dtype: torch.dtype,
                  for_chains: bool = False) -> tuple[FlowTarget, list[int], list[float]]:
    """A `CouplingFlow` fitted to `view` (Pathfinder-whitened coordinates) with `options`, from the seed streams
    `auto` uses; the flow's target, the fit's batches and its losses. `for_chains`: MALA chains will move in its
    latent space (`batch_start: "auto"` then grows the batch from CHAINS_BATCH_START)."""
    flow = CouplingFlow(int(view.dim), options.layers, options.hidden,
                        torch.Generator().manual_seed(derive_seed(seed, 5))).to(device=device, dtype=dtype)
    batch_start = options.batch_start
    if batch_start == "auto":
        batch_start = min(CHAINS_BATCH_START, options.batch) if for_chains else None
    batches = batch_schedule(options.steps, options.batch, batch_start)
    losses = fit_flow(view, flow, batches=batches, lr=options.lr,
                      generator=torch.Generator().manual_seed(derive_seed(seed, 6)))
    return FlowTarget(view, flow), batches, losses


class FlowTarget(Target):
    """`base` seen through the flow: log p_z(z) = log p(T(z)) + log|det ∂T/∂z|; the score by autograd."""

    def __init__(self, base: Target, flow: CouplingFlow):
        self.base = base
        self.flow = flow
        self.dim = base.dim
        self.kind = base.kind

    def to_target(self, z: Tensor) -> Tensor:
        with torch.no_grad():
            return self.flow(z)[0]

    def log_prob(self, z: Tensor, batch: object | None = None) -> Tensor:
        x, log_det = self.flow(z)
        return self.base.log_prob(x, batch) + log_det

    def sample_batch(self, generator):  # noqa: ANN001, ANN201 - the base's batches, unchanged
        return self.base.sample_batch(generator)
