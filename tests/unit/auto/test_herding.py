"""Kernel herding (inference_core/methods/auto/herding.py): `count` distinct rows, deterministic, and a subset
whose moments follow the whole set's more closely than random subsets' do (the reference: the whole set)."""

from __future__ import annotations

import pytest
import torch

from inference_core.methods.auto.herding import kernel_herding


def moment_error(subset: torch.Tensor, whole: torch.Tensor) -> float:
    sd = whole.std(0)
    return float(torch.maximum(((subset.mean(0) - whole.mean(0)) / sd).abs().max(),
                               (subset.std(0) / sd).log().abs().max()))


def test_herding_picks_distinct_rows_deterministically() -> None:
    points = torch.randn(50, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    chosen = kernel_herding(points, 20)
    assert chosen.shape == (20,) and len(set(chosen.tolist())) == 20
    assert torch.equal(chosen, kernel_herding(points, 20))
    assert sorted(kernel_herding(points, 50).tolist()) == list(range(50))
    with pytest.raises(ValueError):
        kernel_herding(points, 51)


def test_a_herded_third_keeps_the_moments_better_than_random_thirds() -> None:
    """300 draws of a skewed 5-d distribution (one log-normal coordinate): the herded 100's worst standardised
    mean error and |log sd ratio| against the 300 beat those of at least 95 of 100 random subsets of 100."""
    generator = torch.Generator().manual_seed(1)
    points = torch.randn(300, 5, generator=generator, dtype=torch.float64)
    points[:, 0] = points[:, 0].exp()
    herded = moment_error(points[kernel_herding(points, 100)], points)
    random = [moment_error(points[torch.randperm(300, generator=generator)[:100]], points) for _ in range(100)]
    assert sum(herded < r for r in random) >= 95, (herded, sorted(random)[:10])
