"""Shared pieces of the baseline tests: a correlated Gaussian target with its exact moments, a small BNN
regression data set, and a run-loop hook that checkpoints through the real serialiser and stops early."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from inference_core.serialization import state_to_bytes
from inference_core.training import RunHooks

MEAN = [1.0, -2.0, 0.5]
COV = [[1.0, 0.6, 0.2], [0.6, 2.0, -0.3], [0.2, -0.3, 0.5]]
GAUSSIAN = {"kind": "gaussian", "mean": MEAN, "cov": COV}


def exact_moments() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """mean, covariance and precision of GAUSSIAN in float64 (the precision by numpy, independently)."""
    cov = np.array(COV)
    return torch.tensor(MEAN, dtype=torch.float64), torch.tensor(cov), torch.from_numpy(np.linalg.inv(cov))


def regression_data(n: int = 40, seed: int = 0) -> dict[str, list]:
    """y = sin(3x) + 0.1 ε on x ~ U(−1, 1): a small inline data set for BNN runs."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(n, 1))
    return {"X": x.tolist(), "y": (np.sin(3 * x[:, 0]) + 0.1 * rng.normal(size=n)).tolist()}


class StopAt(RunHooks):
    """Stops before step `step + 1`; keeps every checkpoint as serialised bytes (as the worker stores them)."""

    def __init__(self, step: int):
        self.step = step
        self.current = 0
        self.checkpoints: dict[int, bytes] = {}

    def on_step(self, step: int, total_steps: int, metrics: dict[str, float]) -> None:
        self.current = step

    def save_checkpoint(self, step: int, state: dict[str, Any]) -> None:
        self.checkpoints[step] = state_to_bytes(state)

    def should_stop(self) -> str | None:
        return "preempted" if self.current >= self.step else None
