"""What every baseline checks about its target: a pointwise log density over a finite parameter vector."""

from __future__ import annotations

import torch

from inference_core import errors
from inference_core.targets.base import Target


def require_log_density(target: Target, method: str, dtype: torch.dtype, device: torch.device) -> None:
    """Raise `MethodUnsupportedForTarget` when the target has no log density over its parameters (a
    `function_posterior` with a piecewise prior: its functions have no density, only prior draws)."""
    try:
        target.log_prob(torch.zeros(1, int(target.dim), dtype=dtype, device=device), None)
    except NotImplementedError as exc:
        raise errors.MethodUnsupportedForTarget(
            f"method {method!r} needs a log density over the target's parameters: {exc}", loc=("method",)
        ) from None
