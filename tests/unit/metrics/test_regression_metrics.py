"""Held-out regression metrics against scipy/numpy float64 references; held-out classification metrics of a
run against a direct computation from its particles."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import special, stats

from inference_core import run
from inference_core.datasets import Dataset
from inference_core.metrics.regression import interval_coverage, mixture_log_likelihood, rmse
from inference_core.targets import BuildContext


def test_rmse_and_coverage_by_hand() -> None:
    assert rmse([1.0, 2.0, 3.0], [1.0, 0.0, 6.0]) == pytest.approx(np.sqrt((0 + 4 + 9) / 3), rel=1e-15)
    assert interval_coverage([0.0, 1.0, 2.0, 3.0], [-1.0, 1.0, 2.5, 0.0], [1.0, 2.0, 3.0, 2.0]) == 0.5
    with pytest.raises(ValueError):
        rmse([1.0, 2.0], [1.0])


def test_mixture_log_likelihood_matches_scipy() -> None:
    rng = np.random.default_rng(0)
    loc, y = rng.normal(size=(12, 30)) * 3, rng.normal(size=30) * 3
    for scale in (rng.uniform(0.1, 2.0, size=12), rng.uniform(0.1, 2.0, size=(12, 30))):
        per_draw = stats.norm.logpdf(y, loc=loc, scale=scale if scale.ndim == 2 else scale[:, None])
        expected = special.logsumexp(per_draw, axis=0) - np.log(12)
        got = mixture_log_likelihood(torch.tensor(y), torch.tensor(loc), torch.tensor(scale))
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)
    # Far in the tail, where exp underflows: log-sum-exp keeps it finite and exact.
    far = mixture_log_likelihood([1e3], [[0.0], [1.0]], [0.1, 0.1])
    expected = special.logsumexp(stats.norm.logpdf(1e3, loc=[0.0, 1.0], scale=0.1)) - np.log(2)
    assert float(far[0]) == pytest.approx(expected, rel=1e-12)


def test_classification_run_reports_held_out_accuracy_nll_and_ece() -> None:
    rng = np.random.default_rng(1)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        x = rng.normal(size=(n, 2))
        return x, (x[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(np.int64) + (x[:, 1] > 1).astype(np.int64)

    (X, y), (X_test, y_test) = draw(200), draw(150)
    data = Dataset(X=X, y=y, X_test=X_test, y_test=y_test, name="synthetic")
    spec = {"method": "svgd", "num_particles": 10, "steps": 100, "seed": 0,
            "target": {"kind": "bnn", "task": "classification", "dataset": "ds_" + "1" * 32, "hidden": [8],
                       "standardize": True},
            "options": {"optimizer": {"name": "adam", "lr": 0.02}}}
    result = run(spec, context=BuildContext(load_dataset=lambda _: data))
    # The reference: the target's own batched network on the (standardised) test inputs, softmax in float64.
    target = result.method.target
    logits = target.forward(result.method.particles().to(torch.float64), target.X_test.to(torch.float64))
    probs = torch.softmax(logits, -1).mean(0).numpy()
    assert result.final_metrics["test_accuracy"] == pytest.approx(np.mean(probs.argmax(1) == y_test), abs=1e-12)
    assert result.final_metrics["test_nll"] == pytest.approx(-np.mean(np.log(probs[np.arange(150), y_test])),
                                                             rel=1e-6)
    assert result.final_metrics["test_accuracy"] > 0.7
    # ECE (Guo et al. 2017, eq. 3) by an explicit loop over the 15 bins ((m-1)/15, m/15] of the confidence.
    confidence, correct = probs.max(1), probs.argmax(1) == y_test
    ece = 0.0
    for m in range(15):
        in_bin = (confidence > m / 15) & (confidence <= (m + 1) / 15)
        if in_bin.any():
            ece += in_bin.mean() * abs(correct[in_bin].mean() - confidence[in_bin].mean())
    assert ece > 0.0
    assert result.final_metrics["test_ece"] == pytest.approx(ece, rel=1e-5, abs=1e-9)
