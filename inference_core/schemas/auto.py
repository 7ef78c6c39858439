"""Options of `auto` (inference_core.methods.auto): Pathfinder first, then SVGD in the whitened space.

Every default was chosen by measurement (benchmarks/robustness.py; docs/method-choice.md); every field can be
overridden in a spec.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from inference_core.schemas.common import StrictModel


class PathfinderOptions(StrictModel):
    starts: int = Field(default=4, ge=1, le=64, description="L-BFGS paths from independent starts N(0, start_scale²)")
    start_scale: float = Field(default=2.0, gt=0, le=1e6)
    max_iters: int = Field(default=1000, ge=1, le=100_000, description="L-BFGS iterations per path")
    history: int = Field(default=6, ge=1, le=100, description="L-BFGS curvature pairs (Pathfinder's J)")
    newton_steps: int = Field(default=10, ge=0, le=1000,
                              description="saddle-free Newton steps after each L-BFGS path (2d gradient rows each): "
                              "they reach the mode of a badly conditioned posterior where L-BFGS crawls")
    tol: float = Field(default=1e-9, gt=0, le=1, description="stop a path when log p gains less than tol·|log p|")
    max_candidates: int = Field(default=8, ge=1, le=1000,
                                description="points per path where a Gaussian is formed and its ELBO estimated, spaced evenly "
                                "in log(1 + iteration): dense early, where a path down a neck still crosses the bulk")
    elbo_draws: int = Field(default=32, ge=2, le=100_000, description="Monte-Carlo draws per ELBO (shared)")
    start_retries: int = Field(default=20, ge=1, le=1000,
                               description="redraws of a start where log p or its gradient is not finite")
    probes: int = Field(
        default=32, ge=0, le=1000,
        description="short L-BFGS runs around the best settled path's mode that look for modes no start reached "
        "(pathfinder.probe_modes); each mode found becomes one more path. The suite's 0.3·N(m₁, I) + 0.7·N(m₂, I) "
        "(d = 10, gap 5, the light mode near the origin, where 7.5 % of paths from the starts reach the heavy one): without probes `auto` missed it on 11 "
        "of seeds 0-19 (0.33-0.59 sds in a mean, all called good); with 16, 20 of 20 met the bars, for about 100 "
        "evaluations more. Where no start reached the other mode of such mixtures (gap 8 at d = 10, gap 6 at d = 20 "
        "and 50, seeds 0-2) the probes found it on 6 of 9 runs (the others' starts had), and all 9 met the bars. On "
        "the suite's 13 single-mode problems (seeds 0-1) no probe reported a mode, for 80-560 evaluations more; "
        "where some path did not settle (a funnel's neck) none runs. 32 since 2026-11-27: two unit Gaussians 10 "
        "apart at d = 4 (w = 0.5, one mode at the origin), seeds 0-15, 16 probes missed the far mode on seed 0 "
        "(0.98 sds off, called good), 32 on none; on those 13 problems 32 probes found no mode either, with the same "
        "scores, for 80-520 evaluations more than 16 (seed 0)")
    probe_scale: float = Field(default=5.0, gt=0, le=1e3,
                               description="the probes start N(0, probe_scale²) in that mode's whitened coordinates")
    probe_iters: int = Field(default=100, ge=1, le=100_000, description="L-BFGS iterations per probe")


class ConvergenceOptions(StrictModel):
    """Stop when the particles' moments stop moving over a doubling window: at steps t = check_every·2^k and
    t = 1.5·check_every·2^k the largest change of any coordinate's mean (in units of its particle sd) and log sd
    since step t/2; converged when below `tol`, not before `min_steps`. A fixed window misses slow, steady drift
    (a banana's particles spread along the curve by 0.015 sd per 25 steps for thousands of steps); the doubling
    window compares the second half of the run with the first. The checks at 1.5·check_every·2^k (75, 150, 300,
    600, …) stop a converged run up to a third sooner than powers of two alone (suite, seeds 0-2: 50-d
    ill-conditioned Gaussian 400 → 300 steps, breast cancer 200/800 → 150/600). `steps` is the upper bound."""

    check_every: int = Field(default=25, ge=1, le=100_000)
    tol: float = Field(default=0.05, gt=0, le=10)
    min_steps: int = Field(default=100, ge=0, le=10_000_000)


class FlowOptions(StrictModel):
    """The normalising flow of `transport: "flow"` (inference_core.preconditioning.transport)."""

    layers: int = Field(default=8, ge=1, le=64, description="affine coupling layers, each with a random half mask")
    hidden: int = Field(default=64, ge=4, le=4096, description="width of the two hidden layers of each coupling's net")
    steps: int = Field(default=2000, ge=1, le=1_000_000, description="Adam steps of the reverse-KL fit")
    batch: int = Field(default=64, ge=1, le=100_000, description="draws per step at the end of the fit")
    batch_start: Annotated[int, Field(ge=1, le=100_000)] | Literal["auto"] | None = Field(
        default="auto",
        description="draws at the first step, changing linearly to `batch` at the last (None: `batch` throughout; "
        "'auto': 16 where `auto`'s MALA engine moves the particles, None elsewhere). 16 cuts the fit's evaluations "
        "from 128,000 to 80,000. On Neal's funnel and centred eight schools (seeds 0-7 each) with MALA chains "
        "16 of 16 runs met the bars (centred eight schools at 1.24-1.34e5 evaluations, under NUTS's 1.39e5); with "
        "SVGD 3 of 16 missed, 2 of them called good, against 0 of 16 with 64 throughout (docs/method-choice.md)")
    lr: float = Field(default=2e-3, gt=0, le=1, description="Adam's first step, decayed to zero along a cosine")


class ChainOptions(StrictModel):
    """NUTS in the flow's latent space (NeuTra, Hoffman et al. 2019), `engine: "nuts"` (inference_core.methods.auto
    .chains): one job step is one transition of every chain; converged when the kept draws' split R-hat is below
    `rhat_below` and their bulk ESS reaches `ess_per_particle` × num_particles on every coordinate."""

    chains: int = Field(default=4, ge=2, le=64, description="independent chains (R-hat needs at least 2)")
    warmup_steps: int = Field(
        default=200, ge=0, le=1_000_000,
        description="adaptation transitions per chain (step size and diagonal mass), discarded. In the flow's "
        "coordinates the posterior is near N(0, I), so fewer than a raw NUTS run's 1,000")
    max_tree_depth: int = Field(default=8, ge=1, le=15, description="at most 2^depth leapfrog steps a transition")
    target_accept_prob: float = Field(default=0.8, gt=0, lt=1)
    rhat_below: float = Field(default=1.01, gt=1, le=2)
    ess_per_particle: float = Field(
        default=4.0, gt=0, le=100,
        description="bulk ESS wanted per returned particle: 4 gives Vehtari et al. (2021)'s 400 at 100 particles, and "
        "kernel herding picks the particles from that many effective draws. 1 stopped the suite's funnel at 50 kept "
        "transitions a chain with v's log sd 0.31 off")
    check_every: int = Field(default=100, ge=4, le=100_000, description="kept transitions between R-hat/ESS checks")


class MALAOptions(StrictModel):
    """Many short Langevin chains started from importance-resampled latent draws, `engine: "mala"`
    (inference_core.methods.auto.mala): one job step is one transition of every chain; converged when the kept
    draws' bulk ESS reaches `ess_per_particle` × num_particles (their split R-hat is reported)."""

    chains: int = Field(
        default=200, ge=2, le=10_000,
        description="chains, each started at an importance-resampled draw. On the suite's funnel and centred eight "
        "schools (seeds 0-7 each) 100 met the bars on 15 of 16 runs (centred seed 2 0.26 off in log sd, called good), "
        "200 on 16 of 16 (worst 0.14 / 0.20) for 10 % more evaluations")
    proposals: int = Field(
        default=2000, ge=2, le=1_000_000,
        description="draws of the latent N(0, I) (the flow's own draws, or Pathfinder's Gaussian) whose PSIS weights the "
        "chains' starts are resampled by (log p evaluations, no gradients)")
    warmup_steps: int = Field(default=100, ge=1, le=1_000_000,
                              description="transitions that adapt the step size by dual averaging, discarded")
    target_accept: float = Field(default=0.574, gt=0, lt=1,
                                 description="MALA's optimal acceptance rate (Roberts & Rosenthal 1998)")
    ess_per_particle: float | Literal["auto"] = Field(
        default="auto",
        description="bulk ESS wanted per returned particle; 'auto' = 10·max(1, log₁₀ d), so that the worst of d "
        "coordinates' Monte Carlo error stays about where it is at d = 10 (the largest of d standard errors grows like "
        "√(2 ln d)). 4 stopped the suite's funnel and centred eight schools (d = 10) at 125-200 transitions (seeds "
        "0-3), 5 of 8 runs within the bars, the misses 0.16-0.17 sds off in a mean; 10 at 150-500 (one run 2,775), 15 "
        "of 16 on seeds 0-7. On the 100-d stochastic-volatility posterior 10 stopped with the pooled draws 0.11-0.12 sds "
        "off in a mean (seed 1) and the herded 100 0.21; 20 (the 'auto' value there) met the bars on 9 of 10 seeds (the miss, seed 9, "
        "0.29 off in a latent log-volatility's log sd, is flagged) at 1.7-1.9·10⁵ evaluations (seed 6: 4.6·10⁵)")
    check_every: int = Field(default=25, ge=4, le=100_000, description="kept transitions between R-hat/ESS checks")


class AutoOptions(StrictModel):
    dtype: Literal["float32", "float64"] = Field(
        default="float64", description="float64 by default: badly scaled posteriors lose digits in float32")
    pathfinder: PathfinderOptions = Field(default_factory=PathfinderOptions)
    lr: float | Literal["auto"] = Field(
        default="auto",
        description="SGD step in whitened units (posterior sds); 'auto' = 0.4 through the linear whitening, 0.2 through "
        "the flow. Measured on the robustness suite (seeds 0-5): on the linear path 0.4 met the bars wherever 0.2 did "
        "and converged sooner (non-centred eight schools 150-200 steps against 400-600, 4.8-6.3e4 evaluations against "
        "1.2-1.8e5; the 50-d Gaussian 150 against 300); through the flow, whose latent target is not N(0, I) where it "
        "under-covers a neck, 0.4 kept the particles moving: centred eight schools' seed 0 and the funnel's ran to the "
        "3,000-step cap (1.0e6 evaluations, against 1.7e5 and 1.8e5 at 0.2 converged at steps 100 and 150)")
    momentum: float = Field(
        default=0.9, ge=0, lt=1,
        description="heavy-ball momentum of the particle moves. 0.9, not 0 (plain SGD, before): measured on the "
        "robustness suite (seeds 0-2), the worst |log sd ratio| fell from 0.19-0.21 to 0.05-0.09 on the badly "
        "scaled Gaussians and breast cancer, and the non-centred eight schools met the convergence rule at 200-800 "
        "steps instead of running to the 3,000-step cap (momentum 0.5 did not)")
    max_move: float = Field(default=1.0, gt=0, le=1e3,
                            description="largest move of one particle per step, in whitened units")
    bandwidth_factor: float | Literal["auto"] = Field(
        default="auto",
        description="h = factor · median squared distance (no log n divisor); 'auto' = max(1, d/20)")
    start_retries: int = Field(default=20, ge=1, le=1000,
                               description="redraws of a starting particle where log p or its score is not finite")
    adapt_first: int = Field(
        default=25, ge=0, le=10_000_000,
        description="re-whiten with the particles' own mean and covariance at steps adapt_first·2^k (0: never); "
        "the Pathfinder scale is local to the mode, a curved or funnel-shaped posterior is wider")
    transport: Literal["auto", "linear", "flow", "tails"] = Field(
        default="auto",
        description="the map SVGD's coordinates go through: 'linear' (the Pathfinder whitening), 'flow' (that, then a "
        "normalising flow fitted by reverse KL, NeuTra-style, for funnels and centred hierarchies, whose scale "
        "changes across the posterior; costs flow.steps·flow.batch evaluations more), or 'auto': the flow when "
        "Pathfinder's paths end more than `flow_above` of its sds apart (no single mode to whiten around) but not "
        "at separated modes (whose masses the particles start in instead), some path did not "
        "settle at a mode (a funnel's neck, `unsettled_paths`) or its "
        "Gaussian's importance k̂ is above `flow_khat_above` (it misses mass), else 'tails' where the log-density falls "
        "like a power along rays from Pathfinder's mean (Tukey's h map, coordinatewise or radial, after the whitening: "
        "heavy tails, where SVGD's cloud otherwise spreads without bound; methods/auto/tails.py), else linear. 'tails' "
        "forced applies the map the probe finds (the identity where the tails are light)")
    flow_above: float = Field(
        default=10.0, gt=0,
        description="start disagreement (Pathfinder sds) above which transport 'auto' fits the flow. Measured on the "
        "robustness suite, seeds 0-5: at most 7.0 (non-centred eight schools, 0.03-7.0; the rest at most 0.27) where "
        "the paths settle; the funnels, whose paths do not, take the flow for that")
    flow_khat_above: float = Field(
        default=1.0, gt=0,
        description="Pareto k̂ of Pathfinder's Gaussian as an importance proposal (`khat_draws` draws) above which "
        "transport 'auto' also fits the flow where `flow_shift_above` agrees (and `oversample` applies, whatever the "
        "transport): k̂ ≥ 1 means the "
        "Gaussian misses mass altogether even where the paths agree, as for a hierarchical scale whose mode is far "
        "from its mean. Measured (512 draws, seeds 0-9): the hierarchical logistic regression of docs/reproduction.md 1.01-1.69 (through the "
        "linear whitening it missed the bars on 6 of 6 seeds, with the flow met them on 6 of 6); non-centred eight "
        "schools 0.20-1.46 (above 1 on 2 of 10: flow, both met the bars); breast-cancer logistic regression at most "
        "0.79, AR(2) 0.57, the mixture 0.66; seeds 0-2: both Gaussians at most 0.02, diabetes 0.35")
    flow_shift_above: float = Field(
        default=1.0, gt=0,
        description="with k̂ above `flow_khat_above`, the flow is fitted only where the importance-weighted (PSIS) mean "
        "of the `khat_draws` draws lies more than this many of the Gaussian's sds from its mean: mass missed on one "
        "side, not tails heavier than a Gaussian's (whose k̂ is 1 at any scale and so lands on either side of 1 by "
        "chance). Measured (seeds 0-5): 1.95-3.69 on the hierarchical logistic regression (k̂ 1.25-1.65), 2.66 on "
        "non-centred eight schools' seed 5 (k̂ 1.05); 0.03-0.34 on the README's example with a Student-t coordinate "
        "(k̂ 0.34-3.23: without this rule seeds 0-2 fitted the flow, 1.6e5 evaluations against 3.2e4), 0.38-0.57 on "
        "breast cancer")
    flow_shift_alone_above: float = Field(
        default=1.15, gt=0,
        description="whatever k̂, the flow is fitted where the importance-weighted mean lies more than this many of the "
        "Gaussian's sds from its mean: with k̂ below 1 that shift is a trustworthy estimate, and the mode the Gaussian "
        "sits at is far from the mean. Measured (seeds 0-5): 1.20-1.67 on a regression whose noise scale is estimated "
        "with 30 coefficients (suite problem regression_noise_31: its joint mode is 1.4 sds low in log sigma^2, and "
        "through the linear whitening SVGD creeps back too slowly, 0.16 off at convergence, seed 0; through the flow "
        "0.01); at most 1.05 on the suite's other problems (non-centred eight schools, seed 0; at most 0.66 elsewhere)")
    khat_draws: int = Field(default=512, ge=32, le=100_000,
                            description="draws of Pathfinder's Gaussian for k̂ (log p evaluations, no gradients)")
    flow: FlowOptions = Field(default_factory=FlowOptions)
    engine: Literal["auto", "svgd", "nuts", "mala"] = Field(
        default="auto",
        description="what moves the particles: 'auto' takes 'mala' where the flow is fitted for a neck (no Pathfinder "
        "path settled: a funnel, a centred hierarchy) and 'svgd' elsewhere; 'svgd' (points 3-5 and 7 of "
        "docs/method-choice.md's `auto`); 'nuts': "
        "chains of NUTS in the whitened coordinates, or the flow's where it is fitted (NeuTra; `chains`), the particles "
        "herded from their draws; or 'mala': many short MALA chains started from importance-resampled draws of the same "
        "coordinates' N(0, I) (`mala`), herded likewise. Measured on the funnel (seeds 0-3): NUTS through the flow met "
        "the bars on 3 of 4 at 1.9-2.1e5 evaluations, its log sd errors 0.06-0.25, and on seed 2 the chains never mixed "
        "(R-hat 1.26 at 3,000 transitions, flagged). On the funnel and centred eight schools, seeds 0-7 each (in-process, "
        "2026-11-27): 'mala' met the bars on 15 of 16 at 1.6-1.9e5 evaluations (one funnel seed 4.2e5), the miss centred "
        "seed 2 (log sd 0.26) called good; SVGD on 16 of 16, but its moments settle on 2 of the funnel's 8 seeds and it "
        "runs to the 3,000-step cap on the others (1.0e6, called not converged); centred eight schools 1.7e5 on 7 of 8. "
        "With 200 chains (the default since) 'mala' met them on 16 of 16 at 1.7-1.9e5, a fifth of SVGD's cost on the "
        "funnel: 'auto' takes it there")
    chains: ChainOptions = Field(default_factory=ChainOptions)
    mala: MALAOptions = Field(default_factory=MALAOptions)
    oversample: int = Field(
        default=5, ge=1, le=100,
        description="where Pathfinder's paths disagree by more than `oversample_above` or its k̂ is above "
        "`oversample_khat_above` (or `flow_khat_above`), run this many times "
        "num_particles and return num_particles of them chosen by kernel herding. 100 particles leave a hierarchical "
        "scale biased (non-centred eight schools, seeds 0-5: log tau's sd up to 0.3 too wide). 300 kept log tau's "
        "moments, but not tau's: scored in the model's own parameters (mu, tau, theta) the herded 100 of 300 missed "
        "tau's sd by 0.25-0.47 (log units) on seeds 0, 5, 7 and 9 of 0-9, all called good, since SVGD's outermost "
        "particles overshoot the short right tail of log tau and herding gives each 1/100 of the mass; the herded 100 "
        "of 500 met both bars in both parameterisations on 10 of 10 (worst 0.09 / 0.21 in the model's parameters; "
        "docs/method-choice.md). Also where num_particles is below "
        "1.25 × the dimension: 100 particles span at most 99 directions, and on 100-d Gaussians (a rotated one, "
        "condition number 1e4, and a regression on features scaled 1e-2 to 1e2) SVGD's particles ended with "
        "their sds 0.19 too narrow on average (log units, worst 0.26-0.41); 300 kept 0.06 (worst 0.21-0.24). At d "
        "= 50 and 75 the 100 were within 0.05 on every coordinate. Costs this factor in evaluations where it applies")
    oversample_above: float = Field(
        default=0.5, gt=0,
        description="start disagreement (Pathfinder sds) above which `oversample` applies. Measured on the robustness "
        "suite, seeds 0-5: at most 0.12 on the seven problems 100 particles fit, 1.25-3.9 on non-centred eight schools "
        "(seeds 1-5; 0.04 on seed 0), 26 and more on the funnels")
    oversample_khat_above: float = Field(
        default=0.7, gt=0,
        description="Pareto k̂ of Pathfinder's Gaussian (`khat_draws` draws) above which `oversample` applies too, "
        "where the paths agree: above 0.7 importance sampling from it is unreliable (Vehtari et al. 2024), the "
        "Gaussian misses a tail. Non-centred eight schools, seed 0 (paths 0.03 apart, k̂ 0.80): with 100 particles "
        "a particle ran off at step 800 and the run missed the bars, not converged by 3,000 steps (0.16 / 0.29 over "
        "HTTP); with 300 it met them at step 400 (0.06 / 0.08). Measured on the suite, seeds 0-5: it adds only that "
        "run and breast cancer's seeds 1, 4, 5 (k̂ 0.71-0.83; all met the bars either way, at 3.4-4.9e4 "
        "evaluations with 300 against 1.9-6.4e4 with 100); every other problem with paths that agree is at most 0.65")
    convergence: ConvergenceOptions = Field(default_factory=ConvergenceOptions)
    collapse_threshold: float = Field(
        default=0.6, gt=0, lt=1,
        description="warn (`collapsed`) when some coordinate's particle sd is below this share of the Pathfinder sd; "
        "SVGD's particles only (the chain engines' draws do not collapse)")
