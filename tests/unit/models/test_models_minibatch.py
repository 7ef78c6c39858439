"""The DataTarget minibatch rule, for every data target kind: the N/B-scaled batch log-likelihood averaged
over all equally likely batches equals the full-data one; batches are pure functions of the generator."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from inference_core.targets import BuildContext, build_target

N, B = 7, 3
RNG = np.random.default_rng(0)
X = RNG.normal(size=(N, 2))
Y_REAL = (X.sum(1) + 0.1 * RNG.normal(size=N)).tolist()
Y_BINARY = [0, 1, 1, 0, 1, 0, 0]
Y_CLASSES = [0, 1, 2, 0, 1, 2, 1]
CONTEXT = BuildContext(dtype=torch.float64)


def data(y):
    return {"X": X.tolist(), "y": y}


SPECS = {
    "linear": {"kind": "bayesian_linear_regression", "dataset": data(Y_REAL), "prior_std": 1.0},
    "logistic_hierarchical": {"kind": "bayesian_logistic_regression", "dataset": data(Y_BINARY)},
    "logistic_fixed": {"kind": "bayesian_logistic_regression", "dataset": data(Y_BINARY), "prior_std": 2.0},
    "bnn_regression": {"kind": "bnn", "dataset": data(Y_REAL), "hidden": [4], "activation": "tanh"},
    "bnn_classification": {"kind": "bnn", "dataset": data(Y_CLASSES), "task": "classification", "hidden": [4]},
    "function_bnn": {"kind": "function_posterior", "dataset": data(Y_REAL), "prior": {"type": "bnn", "hidden": [3]}},
    "function_gp": {"kind": "function_posterior", "dataset": data(Y_REAL), "prior": {"type": "gp"}},
}


def all_batches() -> list[torch.Tensor]:
    return [torch.tensor(subset) for subset in itertools.combinations(range(N), B)]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_average_over_every_batch_equals_the_full_data_log_prob(name: str) -> None:
    target = build_target({**SPECS[name], "batch_size": B}, CONTEXT)
    theta = torch.as_tensor(np.random.default_rng(1).normal(size=(4, target.dim)) * 0.5)
    batches = all_batches()
    assert len(batches) == 35
    average = torch.stack([target.log_prob(theta, batch) for batch in batches]).mean(0)
    torch.testing.assert_close(average, target.log_prob(theta), rtol=1e-12, atol=1e-10)
    average_score = torch.stack([target.score(theta, batch) for batch in batches]).mean(0)
    torch.testing.assert_close(average_score, target.score(theta), rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_batch_likelihood_is_scaled_by_n_over_b(name: str) -> None:
    target = build_target({**SPECS[name], "batch_size": B}, CONTEXT)
    theta = torch.as_tensor(np.random.default_rng(2).normal(size=(3, target.dim)) * 0.5)
    prior = target.log_prior(theta)
    # One row at a time (scale N/1) gives each row's own log-likelihood ℓ_i.
    per_row = torch.stack([(target.log_prob(theta, torch.tensor([i])) - prior) / N for i in range(N)], dim=1)
    torch.testing.assert_close(per_row.sum(1), target.log_prob(theta) - prior, rtol=1e-12, atol=1e-10)
    batch = torch.tensor([5, 0, 3])
    torch.testing.assert_close(target.log_prob(theta, batch) - prior, (N / B) * per_row[:, [5, 0, 3]].sum(1),
                               rtol=1e-12, atol=1e-10)


def test_function_space_log_likelihood_uses_the_same_rule() -> None:
    target = build_target({**SPECS["function_gp"], "batch_size": B}, CONTEXT)
    f_values = torch.as_tensor(np.random.default_rng(3).normal(size=(5, N)))
    full = target.log_likelihood(f_values)
    average = torch.stack([target.log_likelihood(f_values[:, batch], batch) for batch in all_batches()]).mean(0)
    torch.testing.assert_close(average, full, rtol=1e-12, atol=1e-10)


def test_batches_are_distinct_uniform_indices_drawn_only_from_the_generator() -> None:
    target = build_target({**SPECS["linear"], "batch_size": B}, CONTEXT)
    before = {key: value.clone() if isinstance(value, torch.Tensor) else value for key, value in vars(target).items()}
    first, second = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    draws = [target.sample_batch(first) for _ in range(6000)]
    assert all(torch.equal(draw, target.sample_batch(second)) for draw in draws)  # same state, same batch
    assert torch.equal(first.get_state(), second.get_state())
    for key, value in vars(target).items():  # the target keeps no sampling state
        assert torch.equal(value, before[key]) if isinstance(value, torch.Tensor) else value is before[key]
    stacked = torch.stack(draws)
    assert all(len(set(row.tolist())) == B for row in stacked[:500])
    assert stacked.min() >= 0 and stacked.max() < N
    # Each row is in a batch with probability B/N (within 5 binomial standard errors).
    inclusion = torch.bincount(stacked.flatten(), minlength=N).double() / len(draws)
    std_error = np.sqrt((B / N) * (1 - B / N) / len(draws))
    assert torch.all((inclusion - B / N).abs() < 5 * std_error)


def test_full_data_when_batch_size_is_absent_or_not_smaller_than_n() -> None:
    generator = torch.Generator().manual_seed(0)
    for batch_size in (None, N, N + 5):
        spec = {**SPECS["linear"], **({} if batch_size is None else {"batch_size": batch_size})}
        target = build_target(spec, CONTEXT)
        assert target.sample_batch(generator) is None and target.likelihood_scale(None) == 1.0


def test_bad_batches_are_rejected() -> None:
    target = build_target(SPECS["linear"], CONTEXT)
    theta = torch.zeros(1, target.dim, dtype=torch.float64)
    for bad in (torch.tensor([0.5]), torch.tensor([], dtype=torch.int64), [0, 1], torch.tensor([[0, 1]])):
        with pytest.raises(ValueError, match="batch"):
            target.log_prob(theta, bad)
