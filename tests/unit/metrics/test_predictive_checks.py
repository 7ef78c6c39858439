"""The predictive checks of a posterior over functions (metrics/predictive_checks.py, issue 40): the PIT-based
coverage against the mixture's quantiles solved independently, and each check on predictives whose truth is
known (a calibrated one passes, an over-confident one and one that predicts ȳ are flagged); then through the run
loop: an under-trained FVI job is `no_better_than_mean`, f-SVGD's weights get the predictive checks only, and a
result no check applies to is `unchecked`."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from inference_core import run
from inference_core.metrics import predictive_checks as checks
from inference_core.metrics.classification import expected_calibration_error
from inference_core.metrics.next_steps import PREDICTIVE_REMEDIES
from inference_core.prediction.mixture import mixture_quantiles


def _regression_data(m: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(m, 1, generator=g, dtype=torch.float64) * 4 - 2
    return x, 2 * x[:, 0] + 0.5 * torch.randn(m, generator=g, dtype=torch.float64)


def _target(m_train: int = 300, m_test: int = 400) -> SimpleNamespace:
    X, y = _regression_data(m_train, 0)
    X_test, y_test = _regression_data(m_test, 1)
    return SimpleNamespace(X=X, y=y, X_test=X_test, y_test=y_test, standardization=None)


def _predictor(function, noise_std: float, draws: int = 20) -> SimpleNamespace:
    """Draws f_i(x) = function(x) + tiny spread, noise σ: the predictive N(function(x), σ²) up to the spread."""

    def regression_draws(x, n, seed):
        g = torch.Generator().manual_seed(seed)
        f = function(torch.as_tensor(x)) + 1e-3 * torch.randn(draws, len(x), generator=g, dtype=torch.float64)
        return f, torch.full((draws,), noise_std, dtype=torch.float64)

    return SimpleNamespace(task="regression", regression_draws=regression_draws)


def test_pit_coverage_equals_the_mixtures_solved_quantile_intervals() -> None:
    g = torch.Generator().manual_seed(3)
    f = torch.randn(7, 500, generator=g, dtype=torch.float64) * 2
    noise = torch.rand(7, generator=g, dtype=torch.float64) + 0.2
    y = torch.randn(500, generator=g, dtype=torch.float64) * 2.5
    pit = checks.predictive_pit(f, noise, y)
    for level in (0.5, 0.9):
        low, high = mixture_quantiles(f, noise, [(1 - level) / 2, (1 + level) / 2])
        inside = ((y >= low) & (y <= high)).to(torch.float64).mean()
        assert float(((pit - 0.5).abs() <= level / 2).to(torch.float64).mean()) == pytest.approx(float(inside), abs=1e-12)
    one = checks.predictive_pit(f[:1], noise[:1], y)  # one component: Φ((y − f)/σ)
    expected = torch.tensor([0.5 * math.erfc(-(float(a) - float(b)) / float(noise[0]) / math.sqrt(2))
                             for a, b in zip(y, f[0], strict=True)], dtype=torch.float64)
    torch.testing.assert_close(one, expected, rtol=0, atol=1e-12)


def test_a_calibrated_predictive_passes_and_an_overconfident_one_is_miscalibrated() -> None:
    target = _target()
    truth = lambda x: 2 * x[:, 0]  # noqa: E731
    report, warnings = checks.predictive_checks(_predictor(truth, 0.5), target)
    assert warnings == [], warnings
    assert report["train_rmse"] == pytest.approx(0.5, abs=0.06) and report["y_sd"] > 2 * report["train_rmse"]
    assert report["coverage"]["0.5"] == pytest.approx(0.5, abs=report["coverage_band"]["0.5"])
    assert report["coverage_band"]["0.9"] == pytest.approx(3 * math.sqrt(0.09 / 400) + 0.05)
    _, narrow = checks.predictive_checks(_predictor(truth, 0.1), target)
    assert [w["code"] for w in narrow] == ["miscalibrated"] and "over-confident" in narrow[0]["message"]
    _, wide = checks.predictive_checks(_predictor(truth, 3.0), target)
    assert [w["code"] for w in wide] == ["miscalibrated"] and "too wide" in wide[0]["message"]


def test_a_predictive_of_the_mean_of_y_is_no_better_than_the_mean() -> None:
    target = _target()
    mean = float(target.y.mean())
    report, warnings = checks.predictive_checks(_predictor(lambda x: torch.full((len(x),), mean), 2.3), target)
    assert "no_better_than_mean" in [w["code"] for w in warnings]
    assert report["train_rmse"] == pytest.approx(report["y_sd"], rel=1e-3)
    half = lambda x: x[:, 0]  # noqa: E731 - half the slope: RMSE ≈ √(sd(x)²·1 + 0.25) ≈ 0.6 sd(y), not flagged
    assert "no_better_than_mean" not in [w["code"] for w in checks.predictive_checks(_predictor(half, 1.2), target)[1]]


def test_large_parts_are_checked_on_a_seeded_subset(monkeypatch) -> None:
    monkeypatch.setattr(checks, "MAX_CHECK_ROWS", 50)
    report, _ = checks.predictive_checks(_predictor(lambda x: 2 * x[:, 0], 0.5), _target())
    assert report["train_rows"] == 50 and report["test_rows"] == 50
    again, _ = checks.predictive_checks(_predictor(lambda x: 2 * x[:, 0], 0.5), _target())
    assert again == report


def _classifier(probs_of) -> SimpleNamespace:
    return SimpleNamespace(task="classification",
                           class_probabilities=lambda x, n, seed: probs_of(torch.as_tensor(x)).unsqueeze(0))


def test_classification_checks_accuracy_against_the_majority_and_the_ece_band() -> None:
    g = torch.Generator().manual_seed(5)

    def labelled(m: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(m, 1, generator=g, dtype=torch.float64)
        p1 = torch.sigmoid(3 * x[:, 0])
        return x, (torch.rand(m, generator=g, dtype=torch.float64) < p1).to(torch.int64)

    (X, y), (X_test, y_test) = labelled(400), labelled(2000)
    target = SimpleNamespace(X=X, y=y, X_test=X_test, y_test=y_test, standardization=None)
    calibrated = lambda x: torch.stack([1 - torch.sigmoid(3 * x[:, 0]), torch.sigmoid(3 * x[:, 0])], 1)  # noqa: E731
    report, warnings = checks.predictive_checks(_classifier(calibrated), target)
    assert warnings == [], warnings
    assert report["ece"] == pytest.approx(expected_calibration_error(calibrated(X_test), y_test), abs=1e-12)
    assert report["ece"] < report["ece_band"] and report["train_accuracy"] > report["majority_share"]
    sharp = lambda x: torch.stack([1 - torch.sigmoid(30 * x[:, 0]), torch.sigmoid(30 * x[:, 0])], 1)  # noqa: E731
    assert [w["code"] for w in checks.predictive_checks(_classifier(sharp), target)[1]] == ["miscalibrated"]
    flat = lambda x: torch.full((len(x), 2), 0.5, dtype=torch.float64)  # noqa: E731 - arg-max: class 0 always
    codes = [w["code"] for w in checks.predictive_checks(_classifier(flat), target)[1]]
    assert "no_better_than_mean" in codes


# ---- through the run loop -------------------------------------------------------------------------------

X1 = np.linspace(-2, 2, 60)
Y1 = 2 * np.sin(2 * X1) + 0.1 * np.random.default_rng(0).standard_normal(60)
BNN_1D = {"kind": "bnn", "dataset": {"X": X1[:, None].tolist(), "y": Y1.tolist()}, "hidden": [20],
          "standardize": True, "noise": {"type": "inverse_gamma_std"}}


def test_an_under_trained_fvi_job_is_no_better_than_the_mean_not_good() -> None:
    result = run({"method": "fvi", "num_particles": 20, "steps": 4, "seed": 0, "target": BNN_1D,
                  "options": {"distill_steps": 2}})
    quality = result.quality
    assert quality["checks"] == ["predictive"] and quality["verdict"] == "unreliable" and not quality["trustworthy"]
    assert "no_better_than_mean" in [w["code"] for w in quality["warnings"]]
    assert quality["predictive"]["train_rmse"] >= 0.9 * quality["predictive"]["y_sd"]
    assert quality["predictive"]["y_sd"] == pytest.approx(float(Y1.std()), rel=1e-6)  # original units
    no_better = next(remedy for answers, remedy in PREDICTIVE_REMEDIES if "no_better_than_mean" in answers)
    assert no_better in quality["next_steps"]


def test_function_space_particles_get_the_predictive_checks_not_the_weight_space_ones() -> None:
    result = run({"method": "fsvgd", "num_particles": 10, "steps": 400, "seed": 0, "target": BNN_1D})
    quality = result.quality
    assert quality["checks"] == ["predictive"] and "spread_ratio_rms" not in quality and quality["ksd"] is None
    assert quality["predictive"]["train_rmse"] < 0.3 * quality["predictive"]["y_sd"]
    assert quality["verdict"] == "good" and quality["trustworthy"], quality


def test_a_result_no_check_applies_to_is_unchecked_not_good() -> None:
    """One particle: no spread, KSD test or stranded-draw check can be made of a single point, and the target
    is not over functions; the run says so instead of `good`."""
    result = run({"method": "svgd", "num_particles": 1, "steps": 5, "seed": 0,
                  "target": {"kind": "gaussian", "mean": [0.0, 1.0], "cov": [[1.0, 0.0], [0.0, 1.0]]}})
    quality = result.quality
    assert quality["checks"] == [] and quality["warnings"] == []
    assert quality["verdict"] == "unchecked" and not quality["trustworthy"] and "no check" in quality["reason"]
