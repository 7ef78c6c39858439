"""A robust start (issue 14): starting particles where the target's log-density or score is not finite are
redrawn from the method's own starting distribution, a bounded number of times, instead of failing the job.

Only when no finite start exists does the job fail with `target_nonfinite`, naming the coordinates whose
score was non-finite. Rows still bad after the retries, when others are finite, become copies of finite rows
moved by a small jitter (so a start with a few bad corners always runs).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from inference_core import errors
from inference_core.targets.base import Target

#: Jitter (in the starting distribution's units) of a finite row copied into a still-bad row.
COPY_JITTER = 1e-2


def nonfinite_rows(target: Target, x: Tensor, batch: object | None = None) -> Tensor:
    """[n] bool: log p or some score coordinate is not finite at the row."""
    log_p = target.log_prob(x, batch)
    score = target.score(x, batch)
    return ~(torch.isfinite(log_p) & torch.isfinite(score).all(-1))


def redraw_nonfinite(target: Target, x: Tensor, draw: Callable[[int, int], Tensor], retries: int,
                     to_target: Callable[[Tensor], Tensor] = lambda u: u) -> tuple[Tensor, int]:
    """(rows, redrawn count): `x` [n, d] (starting coordinates) with every row where the target is not finite
    at `to_target(row)` replaced. `draw(attempt, k)` gives k fresh rows [k, d] (seeded by the caller per
    attempt, so a start is reproducible). Raises `errors.TargetNonFinite` when no row is finite."""
    x = x.clone()
    bad = nonfinite_rows(target, to_target(x))
    redrawn = int(bad.sum())
    first_bad = x[bad][:1].clone()
    for attempt in range(retries):
        if not bool(bad.any()):
            return x, redrawn
        index = torch.nonzero(bad).flatten()
        x[index] = draw(attempt, index.numel()).to(x)
        bad[index] = nonfinite_rows(target, to_target(x[index]))
    if bool(bad.all()):
        score = target.score(to_target(first_bad))
        coordinates = torch.nonzero(~torch.isfinite(score[0])).flatten().tolist()
        raise errors.TargetNonFinite(
            f"the target is not finite at any of {x.shape[0]} starting particles after {retries} redraws; at the "
            f"first, the log-density is {float(target.log_prob(to_target(first_bad))[0])} and the score is non-finite "
            f"in coordinates {coordinates[:20]}{' …' if len(coordinates) > 20 else ''}"
            " (log-density and score must be finite somewhere in the starting distribution)")
    good = torch.nonzero(~bad).flatten()
    index = torch.nonzero(bad).flatten()
    generator = torch.Generator().manual_seed(index.numel())
    picks = good[torch.randint(good.numel(), (index.numel(),), generator=generator)]
    jitter = COPY_JITTER * torch.randn(index.numel(), x.shape[1], generator=generator, dtype=torch.float64)
    x[index] = x[picks] + jitter.to(x)
    return x, redrawn
