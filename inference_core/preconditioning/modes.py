"""Separated modes among Pathfinder's settled paths, and their masses (`auto`, issue 14).

SVGD moves probability mass between two modes only through the region between them, where its particles hardly
go: where the modes are a few sds apart, the share of particles each mode ends with is mostly the share it started
with. A mixture 0.3·N(m₁, I) + 0.7·N(m₂, I) in 10-d with |m₁ − m₂| = 5, all particles started at the heavier
mode's Gaussian, ended with 98 % there (seeds 0 and 1), the means 0.5 sds off, while every other check (Stein
ratio, KSD test, stranded draws, the paths' positions) passed: the KSD and the score cannot see mode weights.

Each path that settled at a mode carries its Gaussian's Monte-Carlo ELBO, a lower bound on log ∫p near that mode
that is close to it where the Gaussian fits (Laplace's evidence, Zhang et al. 2022 §2): the modes' relative masses
are ∝ exp(ELBO). `auto` starts its particles in those shares (`start_in_modes`) and the quality block compares
the shares they end with (`mode_shares`, the `mode_weights` warning).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from inference_core.preconditioning.pathfinder import Gaussian, PathfinderResult, separated


@dataclass
class Modes:
    gaussians: list[Gaussian]  # one per mode, the highest-ELBO Gaussian of the paths that settled there
    weights: Tensor  # [k] float64, their masses ∝ exp(ELBO), summing to 1

    def __len__(self) -> int:
        return len(self.gaussians)


def distinct_modes(found: PathfinderResult) -> Modes:
    """The settled paths grouped by where they ended (greedily, best ELBO first), each mode with its best path's
    Gaussian; Pathfinder's best Gaussian alone where no path settled (a funnel's neck) or all settled at one mode.
    Where a path ended, not its chosen Gaussian's mean, tells the modes apart: on a skewed posterior (non-centred
    eight schools) paths that end at the one mode choose Gaussians from different stretches of their way."""
    settled = [(g, end.double()) for g, end, ok in zip(found.per_start, found.path_ends, found.settled, strict=False)
               if ok and math.isfinite(g.elbo)]  # an ELBO of −inf (no finite draw) gives no mass to weigh
    kept: list[tuple[Gaussian, Tensor]] = []
    for gaussian, end in sorted(settled, key=lambda pair: pair[0].elbo, reverse=True):
        if all(separated(gaussian, end, other, other_end) for other, other_end in kept):
            kept.append((gaussian, end))
    if len(kept) < 2:
        return Modes([found.best], torch.ones(1, dtype=torch.float64))
    elbos = torch.tensor([g.elbo for g, _ in kept], dtype=torch.float64)
    return Modes([g for g, _ in kept], torch.softmax(elbos, 0))


def mode_counts(weights: Tensor, n: int) -> list[int]:
    """n split in proportion to `weights` by largest remainders (Hamilton's method): the counts sum to n."""
    exact = weights.double() * n
    counts = exact.floor().long()
    for index in torch.argsort(exact - counts, descending=True)[: n - int(counts.sum())]:
        counts[index] += 1
    return [int(c) for c in counts]


def mode_groups(counts: list[int], device: torch.device | None = None) -> list[Tensor]:
    """The row indices of each mode's consecutive block of `counts` rows (the order `start_in_modes` draws them)."""
    ends = torch.tensor(counts).cumsum(0).tolist()
    return [torch.arange(end - count, end, device=device) for count, end in zip(counts, ends, strict=True)]


def start_in_modes(modes: Modes, eps: Tensor) -> Tensor:
    """Start rows x [n, d] in the target's coordinates from standard normal rows eps: each mode's share of them
    (mode_counts) drawn from its Gaussian, x = mean + root·ε."""
    rows, start = [], 0
    for gaussian, count in zip(modes.gaussians, mode_counts(modes.weights, eps.shape[0]), strict=True):
        rows.append(gaussian.draw(eps[start:start + count].double()))
        start += count
    return torch.cat(rows)


def mode_shares(modes: Modes, x: Tensor) -> Tensor:
    """[k] the share of rows x [n, d] nearest each mode, by the modes' Gaussian log-densities (unweighted)."""
    x = x.double()
    log_densities = torch.stack([g.log_q(g.standardize(x)) for g in modes.gaussians])
    nearest = log_densities.argmax(0)
    return torch.bincount(nearest, minlength=len(modes)).double() / x.shape[0]
