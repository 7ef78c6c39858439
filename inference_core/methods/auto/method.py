"""`auto`: posterior particles without tuning (issue 14; the rule is written down in docs/method-choice.md).

1. Pathfinder (`preconditioning/pathfinder.py`; Zhang et al. 2022): L-BFGS paths from a few starts, the Gaussian
   N(μ, Σ = R Rᵀ) with the best ELBO along them. Its gradients count towards the job's `grad_evals`.
2. Whitening: particles live in u with x = μ + R u, so the posterior is roughly N(0, I) in u whatever the
   scales and correlations of x; the score is s_u = Rᵀ s_x(μ + R u). Particles start as N(0, I) in u — draws of
   the Pathfinder Gaussian — with non-finite starts redrawn from it (`methods.start`).
3. SVGD (Liu & Wang 2016, eq. 8) in u with an RBF kernel whose bandwidth is h = c · median ‖u_i − u_j‖² with
   c = max(1, d/20) and no log n divisor, moved with heavy-ball momentum: v ← `momentum`·v + φ, u ← u + `lr`·v,
   each particle's move capped at `max_move` posterior sds (its velocity with it), the velocity re-expressed at
   each re-whitening; a particle whose move left the support (log p, which the score's autograd pass computes
   anyway, not finite) is sent back at rest. Measured on N(0, I_d) with 100 particles from exact draws (500
   steps, plain SGD): the usual h = med²/log n shrinks the spread by e^−0.31 (d = 10), e^−0.44 (d = 30),
   e^−0.48 (d = 60) with SGD and by e^−0.4..−1.3 with Adam; h = med² keeps e^−0.04, e^−0.11, e^−0.18; h = 4 med² at d = 60 and d = 100 keeps e^−0.09 and e^−0.10.
   A wide kernel in whitened coordinates is our remedy for SVGD's variance collapse in higher dimension.
4. Adaptation (`adapt_first`): at steps 25, 50, 100, 200, … the whitening becomes the particles' own mean and
   covariance (in the current whitened coordinates, shrunk towards its diagonal by d/(n + d), the target of
   Ledoit & Wolf 2004), since the Pathfinder
   scale is that of the mode: a banana or a funnel is much wider than its mode. On a Gaussian, SVGD's fixed
   point with a median-scaled kernel does not depend on the linear coordinates, so re-whitening cannot feed a
   collapse; on a skewed posterior it can: non-centred eight schools, seed 1, log τ's sd is 0.13-0.19 too
   wide (log ratio, steps 800-1,600) in re-whitened coordinates even with momentum off after step 200. It creeps
   outward in the Pathfinder coordinates too (seed 2: +0.10 at 1,600 plain-SGD steps, still rising), so where
   the stopping rule catches the creep decides the result; the remedies tried are in docs/method-choice.md.
5. Convergence (`options.convergence`): stop when every coordinate's mean and log sd (in units of the current
   particle sd) moved less than `tol` over a doubling window (steps t/2 to t, t = 25·2^k or 75·2^k); `steps` is
   the upper bound.
6. Transport (`transport`; `preconditioning/transport.py`): where Pathfinder's paths end far apart (more than `flow_above` = 10 of
   its sds: no single mode to whiten around; unless they settled at separated modes, point 9) or none of them settled at a mode (log p still rising at their last
   iteration: a funnel's neck, where the density grows without bound), a normalising flow fitted by reverse KL (NeuTra,
   Hoffman et al. 2019) goes between the Pathfinder whitening and SVGD's own, so x = μ + R·T(z) and the particles
   live in z. Measured on the robustness suite: no path of the funnel or centred eight schools settles (seeds 0-1),
   every path of the other thirteen does; with Pathfinder's Gaussian in the neck (candidates evenly spaced in
   iteration, before 2026-11-27) the two funnels' paths also ended 11-208 sds apart (seeds 0-5), the others' at most
   7.0, but chosen in the bulk they agree to 3-4 sds (docs/method-choice.md). Paths can
   agree on a mode that is far from the mass (a hierarchical scale skewed away from its mode: the logistic
   regression with a sampled prior precision of docs/reproduction.md, Pathfinder's Gaussian 3.6 sds off in
   log α): the Pareto k̂ of the importance weights p/q of `khat_draws` draws of Pathfinder's Gaussian q (PSIS,
   Vehtari et al. 2024; every job computes and reports it) above `flow_khat_above` = 1 (the mean weight does
   not exist), with the weighted mean more than `flow_shift_above` = 1 of q's sds from q's mean (q misses mass on
   one side, not only in heavy tails: `pathfinder.importance_check`), or that mean more than `flow_shift_alone_above`
   = 1.15 sds away whatever k̂ (a scale parameter whose joint mode is far from its mean), fits the flow too, and oversamples
   (point 7, whatever the transport) as hierarchical scales need.

7. Oversampling (`oversample`, `herding.py`): where Pathfinder's paths disagree by more than `oversample_above`
   (0.5 of its sds), its Gaussian misses a tail (k̂ above `oversample_khat_above`, 0.7) or mass (point 6), or
   num_particles is below 1.25 × d (n ≤ d particles are flat in some direction: at d = 100 their sds collapsed by
   e^−0.19), SVGD moves `oversample` (5) × num_particles particles,
   and the job returns num_particles of them chosen by kernel herding. 100 particles leave a hierarchical scale
   biased at SVGD's fixed point (non-centred eight schools: log τ's sd up to 0.3 too wide, a few particles stuck
   at large τ); 300 keep log τ's moments, and the herded 100 keep them too, where a random 100 do not
   (docs/method-choice.md, "What limits eight schools"). But scored in τ itself the herded 100 of 300 missed τ's sd
   on 4 of seeds 0-9 (0.25-0.47 in log units, called `good`): SVGD's outermost particles overshoot log τ's short
   right tail (τ up to 44 where 100,000 exact draws reach 46) and herding gives one of them 1/100 of the mass. The
   herded 100 of 500 met the bars in both parameterisations on 10 of 10 (issue 41; docs/method-choice.md). The seven suite problems 100 particles fit disagree by
   at most 0.12 and have k̂ at most 0.65 but on three breast-cancer seeds of six (0.71-0.83, within the bars
   either way); non-centred eight schools' seed 0 has paths that agree and k̂ 0.80, and missed with 100.

8. Engine (`engine`; `"auto"`, the default: `"mala"` where the flow is fitted for a neck, no Pathfinder path having
   settled, or where num_particles < 1.25·d with a single mode, `"svgd"` elsewhere). `"nuts"` (`chains.py`,
   opt-in) runs NUTS chains in the same coordinates instead of SVGD (NeuTra, Hoffman et al. 2019), stopped when
   split R-hat < 1.01 and bulk ESS ≥ 4 × num_particles, the particles herded from the draws. On the funnel it cost half of SVGD's evaluations where its chains mixed, but met the bars
   less often, with wider sd errors. `"mala"` (`mala.py`) resamples 200 chains' starts from the PSIS weights of 2,000
   draws of the latent N(0, I) and moves them by MALA until the kept draws' bulk ESS reaches 10 × num_particles:
   on the funnel and centred eight schools (seeds 0-7 each) it met the bars on 16 of 16 at 1.7-1.9·10⁵ evaluations,
   a fifth of SVGD's cost on the funnel (with 100 chains 15 of 16, the miss called good), where SVGD also met all
   16 but ran to the 3,000-step cap on 6 of the funnel's 8 seeds (1.0·10⁶): the default for necks since 2026-11-27.
   The chains also absorb a cheaper flow (`flow.batch_start: "auto"`: a batch growing from 16 to 64 draws, 8·10⁴
   evaluations instead of 1.28·10⁵): 16 of 16 at 1.24-1.99·10⁵, centred eight schools under NUTS's 1.39·10⁵.
   Where the flow fits too poorly the chains can stop and miss; their draws then part from the weighted proposals
   they started from, and the job says so (`estimates_disagree`, mala.WEIGHTS_GAP_WARN).
   Where the flow is fitted for mass Pathfinder's Gaussian misses (the hierarchical logistic regression, the
   regression with an unknown noise scale), SVGD converges at step 100 and stays (docs/method-choice.md).
   With fewer particles than PARTICLES_PER_DIM·d (and one mode) the chains move them too: SVGD's 500 particles
   (oversampled, point 7) on the 100-d stochastic-volatility posterior converged at step 100 with sds 0.26-0.47 off
   in log units (φ's or σ's on eight of the nine seeds of 0-9 that finished; seed 6 diverged), three runs called
   `good`; the chains, stopped at 10·log₁₀ d = 20 effective draws per particle (`mala.ess_wanted`) and herded
   (`chains.herded_draws`), met the bars in both spaces on 9 of 10 seeds at 1.7-1.9·10⁵ evaluations (seed 6:
   4.6·10⁵), the miss (seed 9, 0.29 off in a log-volatility's log sd) flagged (`starts_disagree`); SVGD's own
   cost there was 1.9-2.0·10⁵ (one run 1.6·10⁶).
   On the 100-d rotated Gaussian they cost 6.1·10⁴ evaluations against SVGD's 6.4·10⁴, within the bars on 10 of 10.

9. Modes (`preconditioning/modes.py`): where Pathfinder's paths settled at separated modes (ends more than 3 sds apart), the
   particles start in the modes' masses, ∝ exp(ELBO) of each mode's best Gaussian, drawn from those Gaussians
   (linear transport), since SVGD keeps the shares it starts with; the quality block compares the shares they end
   with (`mode_weights`). Measured on 0.3·N(m₁, I) + 0.7·N(m₂, I), d = 10, |m₁ − m₂| = 5, seeds 0-1: all particles
   from the best Gaussian put 98 % in one mode (means 0.5 sds off, called `good`); in the masses, 0.02-0.04 /
   0.04-0.07. With separated modes the re-whitening (point 4) uses the modes' pooled spread, and the herding of
   point 7 runs within each mode, in its share. Modes that no path reaches stay unseen; after the starts' paths,
   32 short probes around the best mode look for more (`pathfinder.probe_modes`): without them the suite's
   mixture_unequal_10 missed the heavy mode on 11 of seeds 0-19 (called `good`), with them on none
   (docs/method-choice.md).

10. Tails (`tails.py`): where no flow is fitted, the log-density's decay along rays from Pathfinder's mean (the
   whitened axes at 4, 8 and 16 sds, and 16 random directions) tells power-law tails from light ones; where it falls
   like a power, the particles move in z with x = μ + R·T_h(z), T_h Tukey's h map (coordinatewise for independent
   heavy-tailed coordinates, radial for an elliptical posterior such as a multivariate t, h = 1/ν̂), in which the
   tails are Gaussian again: SVGD's median-scaled repulsion balances a 1/x score at no spread (the cloud spread
   without bound on 20 independent t₅'s, 1.05 / 2.52 off; through T_h 0.016-0.036 / 0.085-0.144 on seeds 0-7), and on
   a 10-d multivariate t₅ the linear whitening stopped 0.37-0.40 too narrow in log sd, called `good` (through T_h 0.13-0.16 on seeds 0-2).
   Where ν̂ ≤ 3.5 the particles' sds have no standard error, and the job says so (`heavy_tails`). With power-law
   tails the importance weights of point 6 have no mean, so their k̂ and shift do not fit the flow there.

`quality()` reports what should make a user distrust the result: a Pathfinder path whose mean lies outside the
particles (a missed mode, or a mode far from the mass), particle spread collapsed below the Pathfinder scale, no
convergence.

A resumed run redoes Pathfinder and the flow's fit (deterministic given the seed) and then loads the saved
whitening and particles.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from inference_core import errors
from inference_core.kernels import kernel_from_options
from inference_core.kernels.bandwidth import AUTO_EXACT_MAX_N, MedianRule, ScaledRule
from inference_core.methods.auto.chains import LatentChains
from inference_core.methods.auto.herding import kernel_herding
from inference_core.methods.auto.mala import LatentMALA
from inference_core.methods.auto.tails import TailProbe, probe_tails
from inference_core.methods.base import Method, check_direction
from inference_core.methods.directions import svgd_direction
from inference_core.methods.optim import build_optimizer
from inference_core.methods.start import redraw_nonfinite
from inference_core.metrics.quality import chi2_quantile
from inference_core.preconditioning.modes import (
    Modes,
    distinct_modes,
    mode_counts,
    mode_groups,
    mode_shares,
    start_in_modes,
)
from inference_core.preconditioning.pathfinder import PathfinderResult, importance_check, pathfinder
from inference_core.preconditioning.transport import FlowTarget, fit_view_flow, misses_mass, paths_need_flow
from inference_core.schemas.auto import AutoOptions
from inference_core.schemas.kernels import BandwidthOptions, KernelOptions
from inference_core.schemas.methods import OptimizerOptions
from inference_core.seeding import derive_seed, per_particle_normal
from inference_core.targets.base import Target
from inference_core.targets.whitened import WhitenedTarget

#: Largest dimension `auto` takes: Pathfinder forms dense d×d Hessians (2d gradient rows each) and the whitening
#: a dense root; beyond this (BNN weights) use the function-space or generative methods (docs/method-choice.md).
MAX_DIM = 2000


def scaled_median_rule(factor: float, ensemble_size: int) -> ScaledRule:
    """factor × the median of the squared distances: exact up to AUTO_EXACT_MAX_N particles (4,096), over a fixed
    seeded subset of 2,048 beyond (the exact one holds all n² distances, refused beyond 11,585, and an ensemble
    is `oversample` × num_particles)."""
    return ScaledRule(factor, MedianRule(divisor="none", subsampled=ensemble_size > AUTO_EXACT_MAX_N))


def bandwidth_factor(options: AutoOptions, dim: int) -> float:
    return max(1.0, dim / 20.0) if options.bandwidth_factor == "auto" else float(options.bandwidth_factor)


#: `lr: "auto"`: the particles' step (posterior sds) through the linear whitening and through the flow (the option's
#: description has the measurements)
LINEAR_LR = 0.4
FLOW_LR = 0.2

#: `starts_disagree` fires when a Pathfinder path's chosen mean lies outside the particles' mass: farther from their
#: mean, in Mahalanobis units of their covariance, than the radius holding all but PATH_OUTSIDE_LEVEL of a Gaussian's
#: mass, √χ²_d(1 − level) (3.8 at d = 2, 5.5 at d = 10, 7.9 at d = 32). A single mode lies within the mass: measured
#: (seeds 0-5) at most 1.1 on seven suite problems, 2.6 on the skewed non-centred eight schools (d = 10), 3.2-4.1 on the
#: hierarchical logistic regression (d = 32, whose mode is 3.6 sds off in log α alone); two unit Gaussians 12 apart
#: with the particles in one: 12 (d = 4); the funnel and the centred eight schools (d = 10), whose paths end in the
#: neck: 6.7-21 (9.9 or more on the funnel). Those paths never settle (log p still rises at every L-BFGS and Newton
#: step: `PathfinderResult.settled`, seeds 0-5), the two modes' settle within 10 iterations: only settled paths count
#: (2026-11-26; the neck had made every funnel-shaped run `unreliable`, within the bars or not). A fixed 4 sds, the
#: rule before, called the d = 32 regression multimodal.
#: (The paths' spread among themselves, `start_disagreement_sd`, was the rule before that: it called non-centred eight
#: schools multimodal, at 1.2-2.1 particle sds, on 5 of 6 seeds that met the bars.)
PATH_OUTSIDE_LEVEL = 1e-3


#: `heavy_tails` fires where the tail probe's index ν̂ is at most this: the sds of a t with ν ≤ 4 have no standard
#: error (no fourth moment); measured on 10 independent t₃'s (ν̂ 3.0), `auto`'s sds were 0.29-0.33 too small in log
#: units on seeds 0-2, on a t₄ (the README's example, ν̂ 4.0) within 0.12 (seeds 0-5)
FOURTH_MOMENT_INDEX = 3.5

#: where the quality checks ran (`checked_in`) for each transport: the coordinates the particles move in
CHECKED_IN = {"linear": "whitened", "flow": "flow_latent", "tails": "tails_latent"}

#: `oversample` applies where num_particles is below this many per dimension (its option has the measurements)
PARTICLES_PER_DIM = 1.25

#: `mode_weights` fires when a mode's share of the particles is off its mass by more than 3 binomial standard errors
#: plus this (the masses come from ELBOs, a bound that is close only where the mode's Gaussian fits)
MODE_SHARE_SLACK = 0.1


def _fractions(values: Tensor) -> str:
    return " / ".join(f"{float(v):.2f}" for v in values)


def path_outside_radius(dim: int) -> float:
    """The `starts_disagree` threshold (PATH_OUTSIDE_LEVEL) in Mahalanobis sds for dimension `dim`."""
    return math.sqrt(chi2_quantile(1 - PATH_OUTSIDE_LEVEL, dim))


def shrunk_moments(x: Tensor) -> tuple[Tensor, Tensor | None]:
    """Mean of the rows x [n, d] and the Cholesky root of their covariance shrunk towards its diagonal by d/(n + d)
    (the target of Ledoit & Wolf 2004); None for the root where it does not exist."""
    n, d = x.shape
    centre = x.mean(0)
    centred = x - centre
    sample = centred.T @ centred / max(n - 1, 1)
    shrink = d / (n + d)
    chol, info = torch.linalg.cholesky_ex((1 - shrink) * sample + shrink * torch.diag(sample.diagonal()))
    return centre, chol if int(info) == 0 and bool(torch.isfinite(chol).all()) else None


class Auto(Method):
    name = "auto"
    options: AutoOptions

    def __init__(self, target: Target, options: AutoOptions, num_particles: int, seed: int, device: torch.device):
        super().__init__(target, options, num_particles, seed, device)
        if int(target.dim) > MAX_DIM:
            raise errors.MethodUnsupportedForTarget(
                f"auto takes targets of dimension up to {MAX_DIM} (dense Pathfinder Hessians and whitening); this one "
                f"has {target.dim}: use fsvgd, ensemble or gpvi for network weights")
        found = pathfinder(target, generator=torch.Generator().manual_seed(derive_seed(seed, 3)), dtype=self.dtype,
                           device=device, **options.pathfinder.model_dump())
        self.found: PathfinderResult = found
        d = int(target.dim)
        #: the target in whitened coordinates x = shift + root·u (targets.whitened, shared with generative methods)
        whitened = WhitenedTarget(target, found.best.mean.to(device=device, dtype=self.dtype),
                                  found.best.root.to(device=device, dtype=self.dtype))
        self.flow_target: FlowTarget | None = None
        self.flow_losses: list[float] = []
        self.flow_evals = 0  # the flow fit's target evaluations
        self.transport = options.transport
        #: Pathfinder's Gaussian as an importance proposal: its k̂ and weighted-mean shift (points 6 and 7)
        self.importance = importance_check(target, found.best, options.khat_draws,
                                           torch.Generator().manual_seed(derive_seed(seed, 7)), self.dtype, device)
        self.khat = self.importance.khat
        needs_flow = paths_need_flow(found, options.flow_above)
        #: the tails' probe along rays from Pathfinder's mean (point 10, `tails.py`), unless the flow is certain
        self.tail_probe: TailProbe | None = None
        if self.transport in ("linear", "tails") or self.transport == "auto" and not needs_flow:
            self.tail_probe = probe_tails(whitened, torch.Generator().manual_seed(derive_seed(seed, 8)), self.dtype,
                                          device)
        if self.transport == "auto":
            # with power-law tails the importance weights' mean does not exist, and k̂ and the shift are noise
            heavy = self.tail_probe is not None and self.tail_probe.shape != "light"
            self.transport = "flow" if needs_flow or self.misses_mass and not heavy else "tails" if heavy else "linear"
        if self.transport == "tails":  # x = shift + root·T_h(z), T_h Tukey's h, coordinatewise or radial
            self.flow_target = FlowTarget(whitened, self.tail_probe.transform().to(device=device, dtype=self.dtype))
            whitened = WhitenedTarget(self.flow_target, torch.zeros(d, device=device, dtype=self.dtype),
                                      torch.eye(d, device=device, dtype=self.dtype))
        #: separated modes that Pathfinder's paths settled at, with their masses (point 9, `modes.py`)
        self.modes: Modes = distinct_modes(found)
        #: `engine: "auto"`: MALA chains where the flow is fitted for a neck (no Pathfinder path settled: the funnel,
        #: centred eight schools), where SVGD creeps out of the flow's under-covered neck for thousands of steps, and
        #: where the particles are too few for the dimension (fewer than PARTICLES_PER_DIM·d: `crowded`), where
        #: SVGD's fixed point narrows the least Gaussian coordinates; SVGD elsewhere (point 8). The chains start
        #: from one Gaussian, so separated modes stay with SVGD, started in the modes' masses.
        neck = self.transport == "flow" and not all(found.settled)
        too_few = num_particles < PARTICLES_PER_DIM * d  # a cloud of n ≤ d points is flat in some direction
        self.crowded = too_few and len(self.modes) == 1 and options.engine == "auto" and not neck
        self.engine = ("mala" if neck or self.crowded else "svgd") if options.engine == "auto" else options.engine
        if self.transport == "flow":  # x = shift + root·T(z), and SVGD's whitening acts on z (transport.py)
            self.flow_target, batches, self.flow_losses = fit_view_flow(
                whitened, options.flow, seed, device, self.dtype, for_chains=self.engine == "mala")
            self.flow_evals = sum(batches)
            whitened = WhitenedTarget(self.flow_target, torch.zeros(d, device=device, dtype=self.dtype),
                                      torch.eye(d, device=device, dtype=self.dtype))
        self.view = whitened

        def draw(attempt: int, k: int) -> Tensor:
            return per_particle_normal(derive_seed(seed, 4, attempt), k, d, torch.float64)

        #: the ensemble SVGD moves: `oversample`·num_particles where Pathfinder's paths disagree or its Gaussian
        #: misses mass (point 7); with NUTS (point 8), the chains
        if self.engine == "nuts":
            self.ensemble_size = options.chains.chains
        elif self.engine == "mala":
            self.ensemble_size = options.mala.chains
        else:
            disagree = found.start_disagreement() > options.oversample_above
            misses_tail = self.khat > options.oversample_khat_above
            self.ensemble_size = (num_particles * options.oversample
                                  if disagree or misses_tail or self.misses_mass or too_few else num_particles)
        self._herded: tuple[int, Tensor] | None = None  # (step, indices) of the last herded subset
        start = per_particle_normal(seed, self.ensemble_size, d, torch.float64)
        #: with separated modes, the rows of the ensemble started in each (consecutive): re-whitened by the modes' own
        #: pooled spread (`_adapt`) and herded in their shares (`herd`)
        self.mode_groups: list[Tensor] | None = None
        if len(self.modes) > 1 and self.transport == "linear":  # the starts in the modes' shares, whitened
            start = found.best.standardize(start_in_modes(self.modes, start))
            self.mode_groups = mode_groups(mode_counts(self.modes.weights, self.ensemble_size), device)
        start = start.to(device=device, dtype=self.dtype)
        start, self.redrawn = redraw_nonfinite(target, start, draw, options.start_retries, self.to_target)
        self.u = start.requires_grad_(True)
        #: the particles' step in whitened units: `lr`, or for "auto" the one measured for the transport (its schema)
        self.lr = (float(options.lr) if options.lr != "auto"
                   else FLOW_LR if self.transport == "flow" else LINEAR_LR)
        self.optimizer = build_optimizer([self.u], OptimizerOptions(name="sgd", lr=self.lr))
        #: heavy-ball velocity in u (kept here, not in the optimiser, so that the move it makes can be capped)
        self.velocity = torch.zeros_like(self.u, requires_grad=False)
        self.before: Tensor | None = None  # positions before the last move (`step`)
        self.sent_back = 0  # particles sent back into the support, in all (their rows count in `grad_evals`)
        self.kernel_options = KernelOptions(bandwidth=BandwidthOptions(
            rule="scaled", divisor="none", factor=bandwidth_factor(options, d)))
        self.bandwidth_rule = scaled_median_rule(self.kernel_options.bandwidth.factor, self.ensemble_size)
        self.pathfinder_evals = found.grad_evals
        self.checked: dict[int, Tensor] = {}  # step → [2, d] (mean, log sd) of the particles at each check
        self.converged_step: int | None = None
        self.last_drift = math.nan
        self.chains: LatentChains | LatentMALA | None = None
        if self.engine == "nuts":
            self.chains = LatentChains(self.view, options.chains, num_particles, seed, device, self.u.detach(),
                                       options.dtype)
        elif self.engine == "mala":
            self.chains = LatentMALA(self.view, options.mala, num_particles, seed, device, self.dtype)

    # ---- coordinates ----
    def to_target(self, u: Tensor) -> Tensor:
        inner = self.view.to_target(u)
        if self.flow_target is None:
            return inner
        return self.flow_target.base.to_target(self.flow_target.to_target(inner))

    def ensemble(self) -> Tensor:
        """What moved: SVGD's particles, or every kept draw of the chains."""
        if self.chains is not None:
            return self.to_target(self.chains.draws().to(self.u))
        return self.to_target(self.u.detach())

    def particles(self) -> Tensor:
        return self.to_target(self.latent_particles())

    def latent_particles(self) -> Tensor:
        """The job's num_particles in the coordinates they move in: the whole ensemble, its herded subset (point
        7), herded there, or with NUTS the draws herded likewise (point 8, `chains.py`)."""
        if self.chains is not None:
            # chains run for too few particles through a flow herd where the user reads them: x, standardised
            # (stochastic volatility, d = 100, seeds 0-4: herded in the flow's latent coordinates the 100 missed
            # on three, 0.18 in a mean and 0.31 in a log sd twice; in x within on all five). Not elsewhere through a
            # flow: a funnel's x_i sds rest on rare large v, and herded in x the 3-d funnel's were 0.27 off where
            # the draws' were 0.12
            points = self.to_target if self.crowded and self.transport == "flow" else None
            return self.chains.particles(self.herding_marginals(), points).to(self.u)
        u = self.u.detach()
        if self.ensemble_size == self.num_particles:
            return u
        if self._herded is None or self._herded[0] != self.step_count:
            self._herded = (self.step_count, self.herd(u))
        return u[self._herded[1]]

    def herding_marginals(self) -> Callable[[Tensor], Tensor] | None:
        """The map to the coordinates whose moments the herding kernel matches (`herd`): the target's, except
        through a flow (see `herd`)."""
        return None if self.transport == "flow" else self.to_target

    def herd(self, u: Tensor) -> Tensor:
        """Indices of num_particles rows of the ensemble u by kernel herding, with the target coordinates' means and
        second moments in the kernel (`herding.kernel_herding`); with separated modes, herded within each mode's
        group, in the groups' shares (one kernel over the modes weighs them by its own geometry). Through the tail
        map too: on 20 independent t₅'s (seeds 2-3, 300 particles, whose own sds were 0.11 and 0.10 off in log
        units) the Gaussian kernel alone herded 100 whose sds were 0.19 and 0.16 off, with the moments 0.12 and
        0.09; on a 20-d multivariate t₅ (seeds 0-3; the 300 0.18-0.19) 0.22-0.25 against 0.18-0.19. Through a flow
        x's second moments can rest on a few particles (the funnel's x_i, carried by rare large v): with them in
        the kernel the funnel's seed 0 went from 0.02 / 0.13 to 0.09 / 0.16, so there the kernel is the Gaussian
        one alone."""
        marginals = self.herding_marginals()
        x = None if marginals is None else marginals(u)
        if self.mode_groups is None:
            return kernel_herding(u, self.num_particles, x)
        sizes = torch.tensor([float(rows.numel()) for rows in self.mode_groups])
        counts = mode_counts(sizes / sizes.sum(), self.num_particles)
        return torch.cat([rows[kernel_herding(u[rows], count, None if x is None else x[rows])]
                          for rows, count in zip(self.mode_groups, counts, strict=True) if count])

    def diagnostic_coordinates(self) -> tuple[Tensor, Target, str]:
        """The quality checks run where the particles move (Method.diagnostic_coordinates): the target seen through
        the whitening, and the flow where there is one."""
        return self.latent_particles(), self.view, CHECKED_IN[self.transport]

    @property
    def misses_mass(self) -> bool:
        """Pathfinder's Gaussian misses posterior mass (`transport.misses_mass`)."""
        return misses_mass(self.importance, self.options)

    @property
    def converged(self) -> bool:
        return self.converged_step is not None

    @property
    def grad_evals(self) -> int:
        probe_evals = self.tail_probe.evals if self.tail_probe is not None else 0
        moved = (self.chains.grad_evals if self.chains is not None
                 else self.ensemble_size * self.step_count + self.sent_back)
        return self.pathfinder_evals + self.options.khat_draws + probe_evals + self.flow_evals + moved

    # ---- one step ----
    def step(self) -> dict[str, float]:
        if self.chains is not None:
            metrics = self.chains.step()
            self.step_count = self.chains.step_count
            self.converged_step = self.chains.converged_step
            metrics["converged"] = float(self.converged)
            return metrics
        started = time.perf_counter()
        with torch.no_grad():
            u = self.u.detach()
            log_p, score = self.view.log_prob_and_score(u)
            out = ~torch.isfinite(log_p)
            if self.before is not None and bool(out.any()):
                # the last move left the support (log p NaN or −inf): back, at rest. Momentum can carry a particle
                # over a boundary that the score alone pushes it from, and outside the score may be finite and
                # point further out (log x at x < 0: log p NaN, score 1/x; measured on Gamma(2, 1) × N(0, 9):
                # without this every particle ran off to x ≈ −10⁵)
                u[out] = self.before[out]
                self.velocity[out] = 0.0
                score[out] = self.view.score(u[out])
                self.sent_back += int(out.sum())
            h = self.bandwidth_rule(u)
            phi = svgd_direction(u, score, kernel_from_options(self.kernel_options, h))
            velocity = self.options.momentum * self.velocity + phi
            move = self.lr * velocity.norm(dim=-1, keepdim=True)  # each particle moves at most max_move
            self.velocity = velocity * (self.options.max_move / move).clamp(max=1.0).nan_to_num(1.0)
            self.before = u.clone()
        self.pullback(self.u, self.velocity)
        self.step_count += 1
        self._adapt()
        metrics = {"step_time_s": time.perf_counter() - started, "stein_force_norm": float(phi.square().sum(-1).mean().sqrt()),
                   "bandwidth": float(h)}
        self._check_convergence(metrics)
        return metrics

    def pullback(self, points: Tensor, direction: Tensor) -> None:
        check_direction(direction, self.step_count + 1)
        self.optimizer.zero_grad(set_to_none=False)
        points.grad = -direction
        self.optimizer.step()

    def _adapt(self) -> None:
        """Re-whiten with the particles' mean and shrunk covariance (module docstring, point 4)."""
        first = self.options.adapt_first
        if not first or self.step_count < first or self.step_count % first:
            return
        ratio = self.step_count // first
        if ratio & (ratio - 1):  # not a power of two
            return
        # in the current whitened coordinates, where the covariance is near I: shrinking a badly scaled, rotated
        # raw covariance towards its diagonal would distort it by orders of magnitude
        u = self.u.detach().double()
        spread = u
        if self.mode_groups is not None:
            # the modes' own spread, pooled: the spread between them would whiten each mode to a sliver along the
            # gap, where a step of `lr` whitened units crosses to the other mode (two unit Gaussians 10 apart, d = 4,
            # masses 0.5 / 0.5, seeds 1-2: shares 0.72 / 0.28 and 1.0 / 0.0 at the end, from starts in the right
            # shares, 0.45 and 0.98 sds off; pooled, 0.5 / 0.5 and 0.01-0.02 / 0.02. A kernel per mode instead
            # let the light mode's particles leak into the heavy one where the modes overlap: the suite's
            # mixture_unequal_10, seeds 0-19, worst 0.14 in a mean against 0.06)
            spread = torch.cat([u[rows] - u[rows].mean(0) for rows in self.mode_groups])
        centre, (_, chol) = u.mean(0), shrunk_moments(spread)
        if chol is None:
            return
        u = torch.linalg.solve_triangular(chol, (u - centre).T, upper=False).T
        view = self.view
        root = view.root.double()
        view.shift = (view.shift.double() + root @ centre).to(view.shift)
        view.root = (root @ chol).to(view.root)
        with torch.no_grad():
            self.u.copy_(u.to(self.u))
        # a velocity moves with the linear part of the new whitening only; `before` with the whole map
        self.velocity = torch.linalg.solve_triangular(chol, self.velocity.double().T, upper=False).T.to(self.u)
        self.before = self.u.detach().clone() if self.before is not None else None
        self.bandwidth_rule = scaled_median_rule(self.kernel_options.bandwidth.factor, self.ensemble_size)

    def _check_convergence(self, metrics: dict[str, float]) -> None:
        """At steps t = check_every·2^k and 1.5·check_every·2^k, compare the moments with those at t/2."""
        rule = self.options.convergence
        ratio, rest = divmod(self.step_count, rule.check_every)
        odd = ratio >> ((ratio & -ratio).bit_length() - 1) if ratio else 0  # ratio without its factors of 2
        if rest or odd not in (1, 3):
            return
        x = self.ensemble().double()
        sd = x.std(0).clamp_min(1e-300)
        now = torch.stack([x.mean(0), sd.log()])
        earlier = self.checked.get(self.step_count // 2) if self.step_count % 2 == 0 else None
        if earlier is not None:
            self.last_drift = float(max(((now[0] - earlier[0]) / sd).abs().max(), (now[1] - earlier[1]).abs().max()))
            if self.last_drift < rule.tol and self.step_count >= rule.min_steps:
                self.converged_step = self.step_count
        self.checked[self.step_count] = now
        metrics["moment_drift"] = self.last_drift
        metrics["converged"] = float(self.converged)

    # ---- diagnostics ----
    def quality(self) -> dict[str, Any]:
        """Pathfinder facts and the warnings particular to `auto` (metrics.quality adds the general ones)."""
        x = self.particles().double()
        pathfinder_sd = self.found.best.std.to(x)
        ratio = float((x.std(0) / pathfinder_sd).min())
        disagreement = self.found.start_disagreement(x.std(0))
        distances = self.paths_outside()
        settled = torch.tensor(self.found.settled, dtype=torch.bool)
        outside = float(distances.max())
        settled_outside = float(distances[settled].max()) if bool(settled.any()) else 0.0
        warnings = []
        # SVGD's failure, seen against Pathfinder's scale; the chains' draws do not collapse, and where they run
        # through a flow fitted because Pathfinder's Gaussian misses mass its sds are no reference (stochastic
        # volatility, MALA chains through the flow: it fired on seeds 1-4, seed 3 within the bars in both spaces)
        if self.chains is None and ratio < self.options.collapse_threshold:
            warnings.append({"code": "collapsed", "message":
                             f"some coordinate's particle sd is {ratio:.2f} of the Pathfinder sd "
                             f"(threshold {self.options.collapse_threshold}): the spread is likely underestimated"})
        radius = path_outside_radius(int(x.shape[1]))
        if settled_outside > radius:
            warnings.append({"code": "starts_disagree", "message":
                             f"a Pathfinder path from one of {len(self.found.per_start)} starts settled at a mode "
                             f"{settled_outside:.1f} sds from the particles' mean (Mahalanobis, in their covariance; "
                             f"{radius:.1f} holds all but {PATH_OUTSIDE_LEVEL:g} of a Gaussian's mass), where a "
                             "single-mode posterior does not put its mode: a mode the particles miss"})
        shares = mode_shares(self.modes, x)
        if len(self.modes) > 1:
            off = (shares - self.modes.weights).abs()
            allowed = 3 * (self.modes.weights * (1 - self.modes.weights) / x.shape[0]).sqrt() + MODE_SHARE_SLACK
            if bool((off > allowed).any()):
                warnings.append({"code": "mode_weights", "message":
                                 f"Pathfinder's paths settled at {len(self.modes)} separated modes with masses "
                                 f"{_fractions(self.modes.weights)} (from their ELBOs), but the particles are "
                                 f"split {_fractions(shares)} between them: the modes' weights are likely wrong"})
        if self.tail_probe is not None and self.tail_probe.smallest_index <= FOURTH_MOMENT_INDEX:
            warnings.append({"code": "heavy_tails", "message":
                             f"the posterior's tails fall like a power with index about "
                             f"{self.tail_probe.smallest_index:.1f} ({self.tail_probe.shape}): a Student-t with so "
                             "few degrees of freedom has no fourth moment, and the sds of "
                             f"{x.shape[0]} particles (or draws) are unreliable (most often too small)"})
        chains = self.chains.quality() if self.chains is not None else None
        if isinstance(self.chains, LatentMALA) and self.chains.too_many_stuck:
            warnings.append({"code": "stuck_chains", "message":
                             f"{self.chains.stuck_chains} of {chains['chains']} chains accepted almost no proposal "
                             "since the warm-up (a funnel's neck, where the shared step is too long): their draws "
                             "repeat their starts, so that region rests on the starts' importance weights alone"})
        if isinstance(self.chains, LatentMALA) and self.chains.weights_disagree:
            warnings.append({"code": "estimates_disagree", "message":
                             f"the chains' draws and the importance-weighted proposals they started from (draws of "
                             f"the flow, or of Pathfinder's Gaussian) differ by {chains['weights_gap_mean']:.2f} in a "
                             f"mean and {chains['weights_gap_log_sd']:.2f} in a log sd (latent units): at least one "
                             "of them misses posterior mass, and the map fits too poorly for either to be trusted"})
        if not self.converged and chains is not None:
            rule = self.options.chains
            wanted = (f"ESS ≥ {self.chains.ess_wanted:g}" if isinstance(self.chains, LatentMALA)
                      else f"R-hat < {rule.rhat_below} and ESS ≥ {rule.ess_per_particle * self.num_particles:g}")
            warnings.append({"code": "not_converged", "message":
                             f"the chains' split R-hat {chains['rhat_max']} and bulk ESS {chains['ess_bulk_min']} "
                             f"after {chains['kept_per_chain']} kept transitions missed {wanted}; raise `steps`"})
        elif not self.converged:
            warnings.append({"code": "not_converged", "message":
                             f"moments still moving at the last step (drift {self.last_drift:.3g}, tol "
                             f"{self.options.convergence.tol}); raise `steps`"})
        return {
            "pathfinder_elbo": self.found.best.elbo,
            "pathfinder_grad_evals": self.pathfinder_evals,
            "start_disagreement_sd": disagreement,
            "start_outside_sd": outside,
            "unsettled_paths": int((~settled).sum()),
            "probed_modes": self.found.probed_modes,
            "mode_weights": [round(float(w), 4) for w in self.modes.weights],
            "mode_shares": [round(float(f), 4) for f in shares],
            "pathfinder_khat": self.khat,
            "pathfinder_importance_shift_sd": self.importance.shift_sd,
            "spread_vs_pathfinder_min": ratio,
            "converged_step": self.converged_step,
            "redrawn_starts": self.redrawn,
            "ensemble_size": self.ensemble_size,
            "transport": self.transport,
            **({"tails": self.tail_probe.shape, "tail_index": self.tail_probe.smallest_index}
               if self.tail_probe is not None else {}),
            "engine": self.engine,
            **({"flow_final_loss": self.flow_losses[-1]} if self.flow_losses else {}),
            **({"chains": chains} if chains is not None else {}),
            "warnings": warnings,
        }

    def paths_outside(self) -> Tensor:
        """[starts] Mahalanobis distances, in the ensemble's shrunk covariance, from the ensemble's mean to the mean
        of each path's chosen Gaussian (`starts_disagree`, path_outside_radius)."""
        x = self.ensemble().double()
        centre, chol = shrunk_moments(x)
        chol = torch.diag(x.std(0).clamp_min(1e-300)) if chol is None else chol
        means = torch.stack([g.mean for g in self.found.per_start]).to(x)
        return torch.linalg.solve_triangular(chol, (means - centre).T, upper=False).norm(dim=0)

    # ---- checkpoints ----
    def state_dict(self) -> dict[str, Any]:
        if self.chains is not None:
            return {"step": self.step_count, "chains": self.chains.state_dict()}
        return {"step": self.step_count, "u": self.u.detach().clone(), "velocity": self.velocity.clone(),
                "before": None if self.before is None else self.before.clone(), "sent_back": self.sent_back,
                "mean": self.view.shift.clone(),
                "root": self.view.root.clone(), "optimizer": self.optimizer.state_dict(),
                "bandwidth_rule": self.bandwidth_rule.state_dict(),
                "checked": {step: moments.clone() for step, moments in self.checked.items()},
                "converged_step": -1 if self.converged_step is None else self.converged_step,
                "last_drift": self.last_drift}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.chains is not None:
            self.chains.load_state_dict(state["chains"])
            self.step_count = self.chains.step_count
            self.converged_step = self.chains.converged_step
            return
        self._herded = None
        with torch.no_grad():
            self.u.copy_(state["u"].to(self.u))
        self.velocity = state["velocity"].to(self.u) if "velocity" in state else torch.zeros_like(self.velocity)
        self.before = None if state.get("before") is None else state["before"].to(self.u)
        self.sent_back = int(state.get("sent_back", 0))
        self.view.shift, self.view.root = state["mean"].to(self.view.shift), state["root"].to(self.view.root)
        self.optimizer.load_state_dict(state["optimizer"])
        self.bandwidth_rule.load_state_dict(state["bandwidth_rule"])
        self.step_count = int(state["step"])
        checked = state["checked"]  # before the 1.5× checks: one [2, d] tensor or None; the window restarts
        self.checked = {int(step): moments for step, moments in checked.items()} if isinstance(checked, dict) else {}
        self.converged_step = None if int(state["converged_step"]) < 0 else int(state["converged_step"])
        self.last_drift = float(state["last_drift"])
