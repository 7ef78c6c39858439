"""A target evaluated within a memory budget that does not grow with its data: `Bounded(target, budget_bytes)`.

Evaluating log p (and its score) at m points of a data target holds about m × N × w intermediate values (N data
rows, w values a row produces per point: the network's activations, the residual), times the copies autograd
keeps for the score. The service's routes that evaluate targets at client-chosen points (the density grid,
/targets/validate, /sample's importance weights) go through `Bounded`, which splits the points, and for a
`DataTarget` the data rows, into chunks of at most `budget_bytes` each: the full-data value is the sum over row
chunks, log p(θ) = log prior(θ) + Σ_chunks Σ_{i∈chunk} log p(y_i | x_i, θ), and its gradient the sum of theirs,
so the answer is the full-data one (up to float rounding of the sums), whatever the budget.
"""

from __future__ import annotations

import torch
from torch import Tensor

from inference_core.targets.base import Target
from inference_core.targets.models.data import DataTarget

#: Copies of the intermediate values kept while log p and its score are computed: the forward values, the ones
#: autograd saves for the backward pass, and the backward pass's own; log p alone holds two (an operation's
#: input and output).
AUTOGRAD_COPIES = 3
FORWARD_COPIES = 2
#: Values per point of a target without data rows (its own intermediate values), in units of its dimension.
VALUES_PER_DIMENSION = 8


class Bounded:
    """log p and its score of `target` at any number of points, `budget_bytes` of intermediate values at most
    per chunk (the points themselves and the answers are extra: m × (d + 1) values)."""

    def __init__(self, target: Target, budget_bytes: int):
        self.target = target
        self.budget_bytes = max(1, int(budget_bytes))
        self.dim = target.dim

    def __getattr__(self, name: str):  # noqa: ANN204 - everything else is the target's (layout, n_data, ...)
        return getattr(self.target, name)

    def log_prob(self, x: Tensor, batch: object | None = None) -> Tensor:
        return self._evaluate(x, with_score=False)[0]

    def score(self, x: Tensor, batch: object | None = None) -> Tensor:
        return self._evaluate(x, with_score=True)[1]

    def log_prob_and_score(self, x: Tensor, batch: object | None = None) -> tuple[Tensor, Tensor]:
        return self._evaluate(x, with_score=True)

    def chunks(self, m: int, with_score: bool) -> tuple[int, int | None]:
        """(points per chunk, data rows per chunk — None: all rows, or a target without rows)."""
        itemsize = torch.finfo(self._dtype()).bits // 8
        copies = AUTOGRAD_COPIES if with_score else FORWARD_COPIES
        if isinstance(self.target, DataTarget):
            per_point_row = max(1, self.target.values_per_row) * itemsize * copies
            rows = self.target.n_data
            if per_point_row * rows <= self.budget_bytes:
                return max(1, min(m, self.budget_bytes // (per_point_row * rows))), None
            return 1, max(1, self.budget_bytes // per_point_row)
        per_point = max(1, VALUES_PER_DIMENSION * self.target.dim) * itemsize * copies
        return max(1, min(m, self.budget_bytes // per_point)), None

    def _dtype(self) -> torch.dtype:
        dtype = getattr(self.target, "dtype", torch.float64)
        return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.float64

    def _evaluate(self, x: Tensor, with_score: bool) -> tuple[Tensor, Tensor | None]:
        points, rows = self.chunks(max(1, x.shape[0]), with_score)
        values, scores = [], []
        for start in range(0, x.shape[0], points):
            chunk = x[start:start + points]
            if rows is None:
                if with_score:
                    lp, grad = self.target.log_prob_and_score(chunk)
                    scores.append(grad.detach())
                else:
                    with torch.no_grad():
                        lp = self.target.log_prob(chunk)
                values.append(lp.detach())
            else:
                lp, grad = self._over_row_chunks(chunk, rows, with_score)
                values.append(lp)
                if grad is not None:
                    scores.append(grad)
        log_p = torch.cat(values) if values else x.new_zeros(0)
        return log_p, (torch.cat(scores) if scores else x.new_zeros(x.shape)) if with_score else None

    def _over_row_chunks(self, x: Tensor, rows: int, with_score: bool) -> tuple[Tensor, Tensor | None]:
        """log prior + Σ over row chunks of the unscaled log-likelihood sums (the full data, in pieces)."""
        target: DataTarget = self.target  # type: ignore[assignment]
        device = target.device
        with torch.set_grad_enabled(with_score):
            point = x.detach().requires_grad_(with_score)
            total = _detached_sum(target.log_prior(point), point, with_score)
            for start in range(0, target.n_data, rows):
                index = torch.arange(start, min(start + rows, target.n_data), device=device)
                total = _add(total, _detached_sum(target.log_likelihood_sum(point, index), point, with_score))
        return total


def _detached_sum(value: Tensor, point: Tensor, with_score: bool) -> tuple[Tensor, Tensor | None]:
    """(value, its gradient with respect to the points) with the graph released at once."""
    if not with_score:
        return value.detach(), None
    if not value.requires_grad:  # a term that does not depend on the point (a flat prior)
        return value.detach(), torch.zeros_like(point)
    (grad,) = torch.autograd.grad(value.sum(), point, allow_unused=True)
    return value.detach(), torch.zeros_like(point) if grad is None else grad.detach()


def _add(a: tuple[Tensor, Tensor | None], b: tuple[Tensor, Tensor | None]) -> tuple[Tensor, Tensor | None]:
    return a[0] + b[0], None if a[1] is None else a[1] + b[1]  # type: ignore[operator]

