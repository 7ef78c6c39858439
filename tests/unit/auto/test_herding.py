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


def test_the_marginal_moment_kernel_is_the_inner_product_of_its_features() -> None:
    """k_m(x, y) = ⟨φ(x), φ(y)⟩ / m with φ(x) = (x̃_j, x̃_j²/√2)_j, x̃ standardised column by column, against the
    features built by hand; a constant column adds nothing."""
    x = torch.randn(40, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 3 + 1
    x[:, 5] = 7.0
    from inference_core.methods.auto.herding import marginal_moment_kernel

    z = (x[:, :5] - x[:, :5].mean(0)) / x[:, :5].std(0, unbiased=False)
    features = torch.cat([z, z.square() / 2 ** 0.5], 1)
    torch.testing.assert_close(marginal_moment_kernel(x), features @ features.T / 6)


def test_marginal_moments_keep_every_coordinate_s_spread_in_high_dimension() -> None:
    """300 draws of N(0, I₁₀₀) herded to 100: with the Gaussian kernel alone the worst coordinate's |log sd
    ratio| against the 300 is about that of the best of 20 random subsets (0.13 and 0.14); with the marginal
    moments in the kernel a third smaller (0.09)."""
    generator = torch.Generator().manual_seed(3)
    points = torch.randn(300, 100, generator=generator, dtype=torch.float64)

    def worst_log_sd(subset: torch.Tensor) -> float:
        return float((subset.std(0) / points.std(0)).log().abs().max())

    random = min(worst_log_sd(points[torch.randperm(300, generator=generator)[:100]]) for _ in range(20))
    plain = worst_log_sd(points[kernel_herding(points, 100)])
    with_moments = worst_log_sd(points[kernel_herding(points, 100, points)])
    assert with_moments < 0.75 * random and with_moments < 0.75 * plain, (with_moments, plain, random)


def test_the_chains_draws_are_herded_from_every_chain_with_the_marginals_they_are_given() -> None:
    """`herded_draws` (the MALA and NUTS engines' particles) pools the same evenly spaced transitions of every chain
    (200 chains × 25 kept: 10 transitions each, every chain in the pool) and herds that pool, refined by swaps, with
    the features `marginals` maps it to, exactly as `kernel_herding` does with them."""
    from inference_core.methods.auto.chains import HERD_FROM, evenly_spaced, herded_draws

    record = torch.randn(25, 200, 6, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    pool = record[evenly_spaced(25, HERD_FROM // 200)].reshape(-1, 6)
    assert pool.shape[0] == HERD_FROM
    squash = torch.tanh
    chosen = herded_draws(record, 50, squash)
    assert torch.equal(chosen, pool[kernel_herding(pool, 50, squash(pool), refine=True)])
    assert torch.equal(herded_draws(record, 50), pool[kernel_herding(pool, 50, refine=True)])
    assert not torch.equal(chosen, herded_draws(record, 50))
    assert herded_draws(record[:1, :20], 50).shape == (50, 6)  # fewer draws than wanted: evenly spaced, repeated


def mmd2(kernel: torch.Tensor, chosen: torch.Tensor) -> float:
    """MMD²(chosen rows, all rows) under `kernel`, straight from its definition."""
    return float(kernel[chosen][:, chosen].mean() - 2 * kernel[chosen].mean() + kernel.mean())


def test_swaps_lower_the_mmd_greedy_herding_leaves_down_to_a_point_no_single_swap_improves() -> None:
    """On 400 draws of a skewed 8-d distribution: the swap-refined 40 have a lower MMD² to the 400 than the greedy 40
    (both from the definition), every kept row is distinct, and the refinement stops at a point no single swap
    improves (checked by brute force over all 40 × 360 swaps)."""
    from inference_core.methods.auto.herding import swap_refined

    generator = torch.Generator().manual_seed(5)
    points = torch.randn(400, 8, generator=generator, dtype=torch.float64)
    points[:, 0] = points[:, 0].exp()
    squared = torch.cdist(points, points).square()
    kernel = torch.exp(-squared / squared[squared > 0].median())
    greedy = kernel_herding(points, 40)
    refined = swap_refined(kernel, greedy, max_swaps=10_000)
    assert len(set(refined.tolist())) == 40
    assert mmd2(kernel, refined) < mmd2(kernel, greedy)
    best = mmd2(kernel, refined)
    rest = [j for j in range(400) if j not in set(refined.tolist())]
    for slot in range(40):
        for j in rest:
            trial = refined.clone()
            trial[slot] = j
            assert mmd2(kernel, trial) >= best - 1e-12
