"""Shared pieces of the baseline tests: a correlated Gaussian target with its exact moments, a small BNN
regression data set, and a run-loop hook that checkpoints through the real serialiser and stops early."""

from __future__ import annotations

import numpy as np
import torch

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


