"""Count the target evaluations a method makes (`grad_evals` in a job's metrics; issue 14's cost measure).

One count per particle row per call of `score` or of `log_prob` (a `log_prob` made inside `score` is not
counted twice). Methods that differentiate `log_prob` themselves (Pathfinder, NUTS through Pyro, MF-VI) are
counted by their `log_prob` rows. The run loop pauses the count while it evaluates diagnostics, so the number
is what the method itself spent.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import Tensor

from inference_core.targets.base import Target


class EvaluationCounter:
    """Wraps `target.log_prob` and `target.score` on the instance; `count` is the total rows evaluated."""

    def __init__(self, target: Target):
        self.count = 0
        self.active = True
        self._depth = 0
        log_prob, score = target.log_prob, target.score

        def counted_log_prob(x: Tensor, batch: object | None = None) -> Tensor:
            if self.active and self._depth == 0:
                self.count += int(x.shape[0]) if x.ndim > 1 else 1
            return log_prob(x, batch)

        def counted_score(x: Tensor, batch: object | None = None) -> Tensor:
            if self.active and self._depth == 0:
                self.count += int(x.shape[0]) if x.ndim > 1 else 1
            self._depth += 1
            try:
                return score(x, batch)
            finally:
                self._depth -= 1

        target.log_prob = counted_log_prob  # type: ignore[method-assign]
        target.score = counted_score  # type: ignore[method-assign]

    @contextmanager
    def paused(self) -> Iterator[None]:
        active, self.active = self.active, False
        try:
            yield
        finally:
            self.active = active
