"""Kernel herding (Chen, Welling & Smola 2010, "Super-samples from kernel herding", eq. 4-5): `count` of `points`
chosen one at a time so that the chosen set's kernel mean embedding stays close to that of all points, i.e. the
greedy minimiser of MMD(chosen, points). `auto` uses it to return `num_particles` of a larger ensemble: the
moments of the herded subset follow the ensemble's far more closely than a random subset's (measured in
docs/method-choice.md, "What limits eight schools")."""

from __future__ import annotations

import torch
from torch import Tensor


def kernel_herding(points: Tensor, count: int) -> Tensor:
    """Indices [count] into the rows of `points` [n, d] (count ≤ n, no repeats): at step t the row maximising
    mean_j k(x, p_j) − Σ_{s chosen} k(x, s) / (t + 1), with a Gaussian kernel k of bandwidth the median squared
    distance between distinct rows. Deterministic (ties: the lowest index)."""
    n = points.shape[0]
    if not 0 < count <= n:
        raise ValueError(f"count must be in 1..{n}, got {count}")
    squared = torch.cdist(points, points).square()
    positive = squared[squared > 0]
    bandwidth = positive.median() if positive.numel() else torch.ones((), dtype=points.dtype)
    kernel = torch.exp(-squared / bandwidth)
    embedding = kernel.mean(1)
    attraction = torch.zeros(n, dtype=points.dtype, device=points.device)
    taken = torch.zeros(n, dtype=torch.bool, device=points.device)
    chosen = []
    for t in range(count):
        objective = (embedding - attraction / (t + 1)).masked_fill(taken, -torch.inf)
        index = int(objective.argmax())
        chosen.append(index)
        taken[index] = True
        attraction += kernel[:, index]
    return torch.tensor(chosen, dtype=torch.long, device=points.device)
