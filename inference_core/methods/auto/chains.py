"""`auto`'s NUTS engine (`engine: "nuts"`): NeuTra (Hoffman et al. 2019, §3), NUTS run in the coordinates where the
posterior is near N(0, I) — here the Pathfinder whitening followed by the fitted flow (`transport.py`) — and the
draws mapped back (or NUTS in the whitened coordinates alone: a dense mass matrix from Pathfinder). Opt-in, with
`engine: "nuts"`. Where the flow leaves the posterior's neck under-covered (reverse KL is mode-seeking: the funnel's
v had a 0.34-0.55 too narrow log sd under the flow alone), SVGD in those coordinates inherits part of the error, while
NUTS is exact for any invertible map, given time: measured on the suite's funnel (seeds 0-3) the chains met the bars
on 3 of 4 at half SVGD's evaluations, but two of those with v's log sd 0.19-0.25 off (the kept draws themselves, not
the herding, were that narrow: the chains reach the neck and mouth too rarely for their ESS to notice), and on seed 2
they never mixed (R-hat 1.26 after 3,000 transitions, 583 s). SVGD stays `auto`'s default engine.

The chains are the project's own `nuts` method (Pyro's kernel, transition by transition, bit-identical resume) on the
latent target. One job step is one transition of every chain; the first `warmup_steps` adapt the step size and a
diagonal mass matrix and are discarded. The run has converged when the kept draws' split R-hat is below `rhat_below`
and their bulk ESS is at least `ess_per_particle` × num_particles on every coordinate (checked every `check_every`
kept transitions); `steps` stays the upper bound. The job's particles are num_particles of the kept draws chosen by
kernel herding (`herding.py`, refined by swaps) from at most HERD_FROM of them, the same evenly spaced transitions of
every chain (evenly spaced draws, with repeats, when no more than num_particles were kept).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from inference_core.methods.auto.herding import kernel_herding
from inference_core.methods.baselines.mcmc import NUTSMethod
from inference_core.schemas.auto import ChainOptions
from inference_core.schemas.baselines import NUTSOptions
from inference_core.targets.base import Target

#: most draws kernel herding chooses from (its kernel matrix is HERD_FROM² entries)
HERD_FROM = 2000


def evenly_spaced(available: int, count: int) -> Tensor:
    return torch.linspace(0, available - 1, count, dtype=torch.float64).round().long()


def herded_draws(record: Tensor, count: int, marginals: Callable[[Tensor], Tensor] | None = None,
                 points: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """`count` of the chains' kept draws, `record` [m, chains, d] (transition by transition), chosen by kernel
    herding refined by swaps (`herding.kernel_herding`) from a pool of at most HERD_FROM: the same evenly spaced
    transitions of every chain. An evenly spaced pool over the interleaved record aliases where its stride nearly
    divides the chain count (200 chains, 250 kept transitions: a stride of 25 rows takes the same 8 chains at
    consecutive transitions for long stretches), and was twice as far off as the record (stochastic volatility,
    d = 100, seed 1: 0.18 sds in the worst mean against 0.08; per chain 0.08). Evenly spaced draws, with repeats,
    when there are no more than `count`. `points` maps draws to the coordinates, standardised over the pool, where
    the Gaussian kernel measures distances (default: the draws' own); `marginals` to those whose means and second
    moments the herding kernel also matches."""
    m, chains, d = record.shape
    if m * chains <= count:
        return record.reshape(-1, d)[evenly_spaced(m * chains, count)]
    pool = record[evenly_spaced(m, min(m, max(1, HERD_FROM // chains)))].reshape(-1, d)
    if pool.shape[0] > HERD_FROM:  # more chains than HERD_FROM
        pool = pool[evenly_spaced(pool.shape[0], HERD_FROM)]
    with torch.no_grad():
        features = None if marginals is None else marginals(pool)
        where = pool if points is None else standardised(points(pool))
    return pool[kernel_herding(where, count, features, refine=True)]


def standardised(x: Tensor) -> Tensor:
    """Each column centred and scaled to unit sd (a constant column to zeros)."""
    centred = x - x.mean(0)
    scale = centred.std(0)
    return torch.where(scale > 0, centred / scale.clamp_min(torch.finfo(x.dtype).tiny), torch.zeros_like(centred))


class LatentChains:
    def __init__(self, latent: Target, options: ChainOptions, num_particles: int, seed: int, device: torch.device,
                 starts: Tensor, dtype: str):
        self.options = options
        self.num_particles = num_particles
        nuts = NUTSOptions(chains=options.chains, warmup_steps=options.warmup_steps,
                           max_tree_depth=options.max_tree_depth, target_accept_prob=options.target_accept_prob,
                           max_draws_per_chain=max(1000, 4 * num_particles), diagnostics_every=1_000_000,
                           dtype=dtype)
        self.nuts = NUTSMethod(latent, nuts, num_particles, seed, device, starts=starts[: options.chains])
        self.diagnostics: dict[str, float] = {}
        self.converged_step: int | None = None
        self._herded: tuple[int, Tensor] | None = None  # (step, particles) of the last herded subset

    @property
    def grad_evals(self) -> int:
        return self.nuts.potential.calls

    @property
    def step_count(self) -> int:
        return self.nuts.step_count

    def step(self) -> dict[str, float]:
        metrics = self.nuts.step()
        kept = self.nuts.kept
        if kept and kept % self.options.check_every == 0 and self.converged_step is None:
            self.diagnostics = self.nuts.diagnostics()
            metrics.update(self.diagnostics)
            if self.met(self.diagnostics):
                self.converged_step = self.nuts.step_count
        return metrics

    def met(self, diagnostics: dict[str, float]) -> bool:
        return bool(diagnostics) and (diagnostics["rhat_max"] < self.options.rhat_below
                                      and diagnostics["ess_bulk_min"] >= self.options.ess_per_particle * self.num_particles)

    def draws(self) -> Tensor:
        """Every kept draw [m·chains, d], interleaved across chains (the chains' positions before any is kept)."""
        stored = self.nuts.stored_draws()
        if stored.shape[1] == 0:
            return torch.stack(self.nuts.positions)
        return stored.transpose(0, 1).reshape(-1, stored.shape[-1])

    def particles(self, marginals: Callable[[Tensor], Tensor] | None = None,
                  points: Callable[[Tensor], Tensor] | None = None) -> Tensor:
        """num_particles of the kept draws chosen by `herded_draws`; before any is kept, of the chains' positions."""
        if self._herded is None or self._herded[0] != self.nuts.step_count:
            stored = self.nuts.stored_draws()
            record = stored.transpose(0, 1) if stored.shape[1] else torch.stack(self.nuts.positions)[None]
            self._herded = (self.nuts.step_count, herded_draws(record, self.num_particles, marginals, points))
        return self._herded[1]

    def quality(self) -> dict[str, Any]:
        diagnostics = self.nuts.diagnostics() if self.nuts.kept else {}
        return {"chains": len(self.nuts.kernels), "kept_per_chain": self.nuts.kept,
                "rhat_max": diagnostics.get("rhat_max"), "ess_bulk_min": diagnostics.get("ess_bulk_min"),
                "divergences": int(sum(len(k._divergences) for k in self.nuts.kernels))}

    def state_dict(self) -> dict[str, Any]:
        return {"nuts": self.nuts.state_dict(), "diagnostics": dict(self.diagnostics),
                "converged_step": -1 if self.converged_step is None else self.converged_step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.nuts.load_state_dict(state["nuts"])
        self._herded = None
        self.diagnostics = {key: float(value) for key, value in state["diagnostics"].items()}
        self.converged_step = None if int(state["converged_step"]) < 0 else int(state["converged_step"])
