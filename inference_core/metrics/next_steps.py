"""`next_steps` in a job's `quality` block: what to try when the block raises warnings, one line per kind of
trouble, each the remedy the robustness suite measured (docs/method-choice.md). A warning says what is wrong;
this says what to change. Empty when there is no warning, or when no measured remedy applies.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from inference_core.targets.whitened import can_whiten

#: a particle method of the papers (`svgd`, `gfsf`, ..., `ensemble`) on a target `auto` takes
TRY_AUTO_FOR_PARTICLES = (
    "the papers' particle methods shrink the small scales of a badly scaled posterior, and the spread of one in "
    "more than a few dimensions: `method: \"auto\"` (Pathfinder whitening, a kernel widened with the dimension, a "
    "stopping rule) met the robustness suite's bars on 15 of its 15 problems, where `svgd` with its defaults met "
    "none and with `options.precondition: \"pathfinder\"` 3")

#: a generator whose job or sampler checks failed
TRY_AUTO_FOR_DRAWS = (
    "where a fixed set of draws is enough, `method: \"auto\"` met the robustness suite's bars on 15 of its 15 "
    "problems")

#: `auto`'s remedies, by the warning codes they answer
AUTO_REMEDIES: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"starts_disagree", "mode_weights"}),
     "the posterior has more than one mode: run a second `seed` and compare the means; "
     "`options.pathfinder.starts` and `options.pathfinder.probes` set how widely Pathfinder looks for modes"),
    (frozenset({"heavy_tails"}),
     "the tails are too heavy for standard deviations to be estimated: report medians and quantiles instead"),
    (frozenset({"estimates_disagree", "stuck_chains"}),
     "the normalising flow fits the posterior too poorly: raise `options.flow.steps`"),
    (frozenset({"not_converged"}),
     "raise `steps` (an upper bound for `auto`: it stops where the moments settle)"),
    (frozenset({"collapsed"}),
     "raise `num_particles`: n particles span at most n − 1 directions, and their sds carry a sampling "
     "error of about 1/√(2n)"),
    (frozenset({"ksd_rejects", "stranded_draws", "overdispersed"}),
     "run a second `seed` and compare the means and sds in units of the posterior sd"),
)


#: the predictive checks' remedies (metrics.predictive_checks), by warning code
PREDICTIVE_REMEDIES: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"no_better_than_mean"}),
     "the posterior predicts about the mean of y: raise `steps`, or use `fsvgd` or `ensemble`, whose predictive "
     "means fit each UCI set of docs/reproduction.md far better than ȳ"),
    (frozenset({"miscalibrated"}),
     "the predictive intervals do not cover held-out data at their level (`quality.predictive.coverage`): where "
     "they are over-confident, compare `fsvgd` and `ensemble` on the same target; where the 50 % interval is too "
     "wide but the 90 % one is right, the residuals have heavier tails than the Gaussian noise model (f-SVGD, the "
     "deep ensemble and MF-VI on Yacht): use the predictive quantiles, not mean ± sd"),
)


def next_steps(method: Any, codes: Iterable[str]) -> list[str]:
    """The remedies for the warnings `codes` raised on a run of `method` (a `Method`: its `name`, `target` and
    `auto_remedy`, "particles" or "draws" where `auto` answers the method's trouble)."""
    codes = set(codes)
    if not codes:
        return []
    predictive = [remedy for answers, remedy in PREDICTIVE_REMEDIES if answers & codes]
    if method.name == "auto":
        return [remedy for answers, remedy in AUTO_REMEDIES if answers & codes]
    if not can_whiten(method.target):  # network weights' other remedies are docs/prediction.md's
        return predictive
    if method.auto_remedy == "particles":
        return [TRY_AUTO_FOR_PARTICLES, *predictive]
    if method.auto_remedy == "draws":
        return [TRY_AUTO_FOR_DRAWS, *predictive]
    return predictive
