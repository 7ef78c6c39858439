"""`auto`'s separated modes (preconditioning/modes.py): grouping of Pathfinder's settled paths, their masses, the
start split by largest remainders and the shares, on hand-built paths with known answers."""

from __future__ import annotations

import math

import torch

from inference_core.preconditioning.modes import (
    distinct_modes,
    mode_counts,
    mode_groups,
    mode_shares,
    start_in_modes,
)
from inference_core.preconditioning.pathfinder import Gaussian, PathfinderResult


def gaussian(mean: list[float], elbo: float, sd: float = 1.0) -> Gaussian:
    d = len(mean)
    return Gaussian(torch.tensor(mean, dtype=torch.float64), sd * torch.eye(d, dtype=torch.float64),
                    2 * d * math.log(sd), elbo)


def found(paths: list[tuple[Gaussian, list[float], bool]]) -> PathfinderResult:
    best = max((g for g, _, _ in paths), key=lambda g: g.elbo)
    return PathfinderResult(best=best, per_start=[g for g, _, _ in paths],
                            path_ends=torch.tensor([end for _, end, _ in paths], dtype=torch.float64),
                            grad_evals=0, settled=[ok for _, _, ok in paths])


def test_paths_at_two_separated_modes_weigh_them_by_their_elbos() -> None:
    # two paths end at each mode (5 sds apart); the chosen Gaussians of the paths at one mode differ (mid-path)
    a1, a2 = gaussian([0.0, 0.0], math.log(0.3)), gaussian([0.5, 0.0], math.log(0.3) - 1)
    b1, b2 = gaussian([5.0, 0.0], math.log(0.7)), gaussian([4.0, 0.0], math.log(0.7) - 2)
    modes = distinct_modes(found([(a1, [0.0, 0.0], True), (b1, [5.0, 0.0], True), (a2, [0.01, 0.0], True),
                                  (b2, [5.01, 0.0], True)]))
    assert len(modes) == 2 and modes.gaussians == [b1, a1]  # best ELBO first, one Gaussian per mode
    torch.testing.assert_close(modes.weights, torch.tensor([0.7, 0.3], dtype=torch.float64))


def test_unsettled_close_or_hopeless_paths_make_one_mode() -> None:
    near = [(gaussian([0.0], 0.0), [0.0], True), (gaussian([2.0], -0.1), [2.9], True)]  # 2.9 < 3 sds apart
    assert len(distinct_modes(found(near))) == 1
    unsettled = [(gaussian([0.0], 0.0), [0.0], True), (gaussian([9.0], -0.1), [9.0], False)]  # a funnel's neck
    assert len(distinct_modes(found(unsettled))) == 1
    no_mass = [(gaussian([0.0], 0.0), [0.0], True), (gaussian([9.0], -math.inf), [9.0], True)]
    modes = distinct_modes(found(no_mass))
    assert len(modes) == 1 and modes.weights.tolist() == [1.0]


def test_start_splits_by_largest_remainders_and_shares_count_nearest_modes() -> None:
    assert mode_counts(torch.tensor([0.7, 0.3]), 100) == [70, 30]
    assert mode_counts(torch.tensor([1 / 3, 1 / 3, 1 / 3]), 100) == [34, 33, 33]
    assert sum(mode_counts(torch.tensor([0.123, 0.456, 0.421]), 7)) == 7
    a, b = gaussian([0.0, 0.0], math.log(0.25)), gaussian([10.0, 0.0], math.log(0.75))
    modes = distinct_modes(found([(a, [0.0, 0.0], True), (b, [10.0, 0.0], True)]))
    eps = torch.randn(400, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x = start_in_modes(modes, eps)
    assert bool((x[:300, 0] > 5).all()) and bool((x[300:, 0] < 5).all())  # 300 from the heavier mode, then 100
    torch.testing.assert_close(mode_shares(modes, x), torch.tensor([0.75, 0.25], dtype=torch.float64))
    heavy, light = mode_groups(mode_counts(modes.weights, 400))  # the rows each mode's start block holds
    assert heavy.tolist() == list(range(300)) and light.tolist() == list(range(300, 400))
