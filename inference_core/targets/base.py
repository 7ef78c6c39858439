"""The target protocol every posterior implements (docs/architecture.md, "Targets").

A target is an unnormalised log-density on R^d evaluated for a batch of particles at once:
`log_prob(x[n, d]) -> [n]` and `score(x[n, d]) -> [n, d]` (autograd unless a closed form is given).
Data targets additionally accept a minibatch; the N/B likelihood scaling lives in `DataTarget` only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from inference_core.datasets import Dataset


@dataclass
class BuildContext:
    """What a target builder may use besides its spec: dtype/device, and a dataset loader injected by the
    caller (the worker resolves `ds_…` ids through the artifact store; a notebook passes its own)."""

    dtype: torch.dtype = torch.float32
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    load_dataset: Callable[[str], Dataset] | None = None


@dataclass
class Reference:
    """Exact facts about a target, used by tests and by a job's `eval` diagnostics.

    Any field may be None when no exact value exists. `sample(n, generator)` draws exact samples.
    """

    mean: Tensor | None = None
    cov: Tensor | None = None
    sample: Callable[[int, torch.Generator], Tensor] | None = None


class Target:
    """Base class. Subclasses set `dim` and implement `log_prob`; `score` defaults to autograd.

    Optional hook (not defined here, test with `hasattr`): `initial_particles(n, generator) -> [n, dim]`,
    a model-specific starting point (e.g. the BNN init of weights ~ N(0, 1/(fan_in + 1)), biases 0) drawn
    from the given generator only.
    """

    dim: int
    kind: str = "target"

    def log_prob(self, x: Tensor, batch: object | None = None) -> Tensor:
        raise NotImplementedError

    def score(self, x: Tensor, batch: object | None = None) -> Tensor:
        """∇_x log p(x) for each row, by autograd through `log_prob` (rows are independent)."""
        return self._autograd_log_prob_and_score(x, batch)[1]

    def log_prob_and_score(self, x: Tensor, batch: object | None = None) -> tuple[Tensor, Tensor]:
        """(log p, ∇log p) per row: one autograd pass when `score` is the autograd default, else both methods."""
        if type(self).score is not Target.score:
            return self.log_prob(x, batch), self.score(x, batch)
        return self._autograd_log_prob_and_score(x, batch)

    def _autograd_log_prob_and_score(self, x: Tensor, batch: object | None) -> tuple[Tensor, Tensor]:
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            lp = self.log_prob(x, batch)
            (grad,) = torch.autograd.grad(lp.sum(), x)
        return lp.detach(), grad

    def reference(self) -> Reference | None:
        return None

    def sample_batch(self, generator: torch.Generator) -> object | None:
        """Next minibatch for stochastic-gradient methods; None means full data (or no data)."""
        return None

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> Target:
        """Move every tensor attribute (subclasses with nested state override)."""
        for name, value in vars(self).items():
            if isinstance(value, Tensor):
                new_dtype = dtype if (dtype is not None and value.is_floating_point()) else value.dtype
                setattr(self, name, value.to(device=device, dtype=new_dtype))
        return self
