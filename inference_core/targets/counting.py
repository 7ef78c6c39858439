"""Count the target evaluations a method makes (`grad_evals` in a job's metrics; issue 14's cost measure).

One count per particle row per call of `score` or of `log_prob` (a `log_prob` made inside `score` is not
counted twice). Methods that differentiate `log_prob` themselves (Pathfinder, NUTS through Pyro, MF-VI) are
counted by their `log_prob` rows. Methods that evaluate the model's likelihood without `log_prob` or `score`
count through `record_evaluations`, in the same unit: one per function (a particle's network, a draw of a
generator) whose minibatch log-likelihood gradient they evaluate (f-POVI and `amortized_fsvgd`: n per step,
the likelihood's gradient at the function values pulled back through the network; `fvi`: its posterior
draws, none while it distils the prior). The run loop pauses the count while it evaluates diagnostics, so the number
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
        target._evaluation_counter = self  # type: ignore[attr-defined] - for record_evaluations

    def add(self, rows: int) -> None:
        if self.active and self._depth == 0:
            self.count += int(rows)

    @contextmanager
    def paused(self) -> Iterator[None]:
        active, self.active = self.active, False
        try:
            yield
        finally:
            self.active = active


def record_evaluations(target: Target, rows: int) -> None:
    """Count `rows` evaluations made outside `log_prob`/`score` (a method that differentiates the likelihood of
    its function values itself); a no-op on a target no counter wraps."""
    counter = getattr(target, "_evaluation_counter", None)
    if counter is not None:
        counter.add(rows)
