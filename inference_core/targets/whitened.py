"""A target seen in whitened coordinates u, x = shift + root·u (issue 14's preconditioning).

The posterior of a badly scaled, correlated target is roughly N(0, I) in u when (shift, root rootᵀ) is a
Gaussian fitted to it (Pathfinder, `preconditioning.pathfinder`): log p_u(u) = log p(shift + root·u) (the
constant log|det root| dropped), s_u(u) = rootᵀ s(x). Methods train in u and map their draws back.
"""

from __future__ import annotations

import torch
from torch import Tensor

from inference_core.schemas.methods import PRECONDITION_MAX_DIM
from inference_core.targets.base import Target


def can_whiten(target: Target) -> bool:
    """Pathfinder's whitening suits `target`: it has no initialisation of its own (network weights, whose scales
    come from their fan-in) and 1 ≤ d ≤ PRECONDITION_MAX_DIM (Pathfinder forms dense d×d Hessians)."""
    dim = getattr(target, "dim", None)
    return getattr(target, "initial_particles", None) is None and bool(dim) and dim <= PRECONDITION_MAX_DIM


class WhitenedTarget(Target):
    """`evaluate_in`: the dtype the base target is evaluated in, when u's differs (a flow fitted in float64 to a
    target whose data are float32); results come back in u's dtype."""

    def __init__(self, base: Target, shift: Tensor, root: Tensor, evaluate_in: torch.dtype | None = None):
        self.base = base
        self.dim = base.dim
        self.kind = base.kind
        self.shift = shift
        self.root = root
        self.evaluate_in = evaluate_in

    def to_target(self, u: Tensor) -> Tensor:
        return self.shift.to(u) + u @ self.root.to(u).T

    def _x(self, u: Tensor) -> Tensor:
        x = self.to_target(u)
        return x if self.evaluate_in is None else x.to(self.evaluate_in)

    def log_prob(self, u: Tensor, batch: object | None = None) -> Tensor:
        return self.base.log_prob(self._x(u), batch).to(u.dtype)

    def score(self, u: Tensor, batch: object | None = None) -> Tensor:
        return self.base.score(self._x(u), batch).to(u.dtype) @ self.root.to(u)

    def log_prob_and_score(self, u: Tensor, batch: object | None = None) -> tuple[Tensor, Tensor]:
        log_p, score = self.base.log_prob_and_score(self._x(u), batch)
        return log_p.to(u.dtype), score.to(u.dtype) @ self.root.to(u)

    def sample_batch(self, generator):  # noqa: ANN001, ANN201 - the base's batches, unchanged
        return self.base.sample_batch(generator)
