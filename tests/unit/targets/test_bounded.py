"""`Bounded(target, budget)`: log p and its score in chunks of points and data rows give the full-data answer
(float64, against the target's own one-pass evaluation) whatever the budget, and the chunks respect it."""

from __future__ import annotations

import pytest
import torch

from inference_core.targets import BuildContext, build_target
from inference_core.targets.bounded import AUTOGRAD_COPIES, Bounded

SPECS = [
    {"kind": "bnn", "dataset": "uci:boston", "hidden": [20]},
    {"kind": "bnn", "dataset": "uci:concrete", "hidden": [8, 8], "activation": "tanh"},
    {"kind": "bayesian_linear_regression", "dataset": "uci:yacht"},
    {"kind": "bayesian_logistic_regression", "dataset": "sklearn:breast_cancer"},
    {"kind": "gaussian", "mean": [0.0, 1.0, 2.0], "cov": [[1.0, 0.5, 0.0], [0.5, 2.0, 0.0], [0.0, 0.0, 1.0]]},
]


def points(target, m: int) -> torch.Tensor:  # noqa: ANN001
    generator = torch.Generator().manual_seed(1)
    init = getattr(target, "initial_particles", None)
    x = init(m, generator) if callable(init) else torch.randn(m, target.dim, generator=generator)
    return x.to(torch.float64)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s["kind"] + "-" + str(s.get("dataset", "")))
@pytest.mark.parametrize("budget", [10**9, 10**5, 2_000, 1])
def test_chunked_evaluation_is_the_full_data_one(spec, budget) -> None:
    target = build_target(spec, BuildContext(dtype=torch.float64))
    x = points(target, 5)
    log_p, score = target.log_prob_and_score(x)
    bounded = Bounded(target, budget)
    chunked_log_p, chunked_score = bounded.log_prob_and_score(x)
    scale = 1 + log_p.abs().max()
    assert torch.allclose(chunked_log_p, log_p, rtol=0, atol=1e-11 * scale)
    assert torch.allclose(chunked_score, score, rtol=0, atol=1e-11 * (1 + score.abs().max()))
    assert torch.allclose(bounded.log_prob(x), log_p, rtol=0, atol=1e-11 * scale)


def test_the_chunks_stay_within_the_budget() -> None:
    target = build_target(SPECS[0], BuildContext(dtype=torch.float64))
    per_point_row = target.values_per_row * 8 * AUTOGRAD_COPIES
    assert target.values_per_row == 2 * (20 + 1) + 2  # the hidden layer and the output, before and after
    for budget in (10**9, 10**6, 10**4, 500):
        points_per_chunk, rows = Bounded(target, budget).chunks(1000, with_score=True)
        assert points_per_chunk * (rows or target.n_data) * per_point_row <= max(budget, per_point_row)
    assert Bounded(target, 10**9).chunks(1000, True) == (1000 if 1000 * target.n_data * per_point_row <= 10**9
                                                         else 10**9 // (target.n_data * per_point_row), None)
