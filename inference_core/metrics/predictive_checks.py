"""Predictive checks of a posterior over functions (issue 40): every job on a `bnn` or `function_posterior`
target, and every function-space sampler's certificate, asks whether the posterior predictive fits and is
calibrated. These are the checks that see a posterior over network weights, where the parameter-space ones
(Stein ratio, KSD test, stranded draws) say little: FVI's predictive mean once fitted a 1-D regression no better
than ȳ (training RMSE 2.37-2.77 against y's sd 2.53, draws' sd 0.2-0.35), confidently wrong, and with no check
run its job was called `good`.

* `no_better_than_mean` — regression: the predictive mean's RMSE on the training rows is at least
  NO_BETTER_THAN_MEAN × the sd of the training y (predicting ȳ everywhere gives exactly that sd);
  classification: the training accuracy of the predictive's arg-max is no better than the majority class's
  share. Both ratios are the same in original and standardised units; the report gives original units.
* `miscalibrated` (where the data set has a test part) — regression: the share of test points inside the
  central 50 % and 90 % predictive intervals (the mixture (1/n) Σ_i N(f_i(x), σ_i²), noise included) is off the
  nominal level p by more than COVERAGE_SE binomial standard errors √(p(1 − p)/m) + COVERAGE_SLACK; a point is
  inside the central p interval exactly when its PIT value u = (1/n) Σ_i Φ((y − f_i)/σ_i) lies within p/2 of ½,
  so no quantile is solved for. Classification: the expected calibration error of the predictive
  probabilities (15 bins) above the same band summed over bins, Σ_b (m_b/m) · COVERAGE_SE √(c̄_b(1 − c̄_b)/m_b)
  + COVERAGE_SLACK (c̄_b the bin's mean confidence): what a calibrated predictive's ECE stays under, since
  each bin's accuracy then has mean c̄_b and that binomial standard error.

The predictive is `prediction.predictor_for_method` (particles, or CHECK_DRAWS draws of a sampler with seed
CHECK_SEED), on at most MAX_CHECK_ROWS rows of each part (a seeded subset beyond).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from inference_core.metrics.classification import calibration_bins
from inference_core.metrics.regression import rmse

#: the target kinds whose posterior is over functions of inputs
PREDICTIVE_KINDS = ("bnn", "function_posterior")
#: draws of a sampler's predictive (a particle set uses every particle)
CHECK_DRAWS = 100
CHECK_SEED = 0
#: rows of the training or test part checked at most (a seeded subset beyond: the RMSE's and coverage's
#: standard errors are then under 1 %)
MAX_CHECK_ROWS = 10_000
#: training RMSE of the predictive mean, as a share of the sd of y, at or above which the fit is no better than ȳ
NO_BETTER_THAN_MEAN = 0.9
#: central predictive intervals whose coverage of the test points is checked
COVERAGE_LEVELS = (0.5, 0.9)
#: standard errors of the band around the nominal coverage (or around zero ECE), and the slack added to it
COVERAGE_SE = 3.0
COVERAGE_SLACK = 0.05
#: confidence bins of the ECE (Guo et al. 2017's and the GPVI paper's Appendix E: 15; the held-out `test_ece` too)
ECE_BINS = 15


def original_inputs(target: Any, X: Tensor) -> Tensor:
    """Model inputs of `target` (held standardised) in the data's original units, float64 on the CPU."""
    x = X.detach().to(device="cpu", dtype=torch.float64)
    stats = getattr(target, "standardization", None)
    if stats is None:
        return x
    return x * torch.as_tensor(stats.x_std, dtype=torch.float64) + torch.as_tensor(stats.x_mean, dtype=torch.float64)


def original_outputs(target: Any, y: Tensor) -> Tensor:
    """Regression targets in original units (the target holds them standardised when it says so), float64."""
    y = y.detach().to(device="cpu", dtype=torch.float64)
    stats = getattr(target, "standardization", None)
    if stats is None or stats.y_mean is None:
        return y
    return y * stats.y_std + stats.y_mean


def predictor_draws(predictor: Any) -> int | None:
    """How many draws to ask a predictor for: every particle of a particle set, CHECK_DRAWS of a sampler."""
    from inference_core.prediction.ensemble import EnsemblePredictor

    return None if isinstance(predictor, EnsemblePredictor) else CHECK_DRAWS


def _rows(count: int) -> Tensor:
    if count <= MAX_CHECK_ROWS:
        return torch.arange(count)
    return torch.randperm(count, generator=torch.Generator().manual_seed(CHECK_SEED))[:MAX_CHECK_ROWS].sort().values


def _part(target: Any, X: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    rows = _rows(X.shape[0])
    return original_inputs(target, X[rows.to(X.device)]), y[rows.to(y.device)].detach().cpu()


def predictive_checks(predictor: Any, target: Any) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """(the `predictive` block of a quality report, warnings) of `predictor` (prediction.Predictor) on the data
    of `target`; see the module docstring."""
    n = predictor_draws(predictor)
    x, y = _part(target, target.X, target.y)
    X_test, y_test = getattr(target, "X_test", None), getattr(target, "y_test", None)
    test = None if X_test is None or y_test is None or X_test.shape[0] == 0 else _part(target, X_test, y_test)
    if predictor.task == "regression":
        f, noise = predictor.regression_draws(x, n, CHECK_SEED)
        return _regression_checks(f, noise, original_outputs(target, target.y),
                                  original_outputs(target, y), test and (predictor, n, target, *test))
    return _classification_checks(predictor.class_probabilities(x, n, CHECK_SEED).mean(0), y.to(torch.int64),
                                  target.y.detach().cpu().to(torch.int64), test and (predictor, n, *test))


def function_values_checks(values: Tensor, noise_std: float, target: Any) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The training-fit check of draws that ARE function values at the training inputs (particles of a
    `function_posterior` with a GP prior: no predictive at new inputs), [n, N] in model units."""
    y_std = 1.0 if target.standardization is None or target.standardization.y_std is None else \
        float(target.standardization.y_std)
    f = original_outputs(target, values.detach().cpu().to(torch.float64))
    noise = torch.full((f.shape[0],), noise_std * y_std, dtype=torch.float64)
    y = original_outputs(target, target.y)
    return _regression_checks(f, noise, y, y, None)


def _regression_checks(f: Tensor, noise: Tensor, y_all: Tensor, y: Tensor,
                       test: tuple[Any, ...] | None) -> tuple[dict[str, Any], list[dict[str, str]]]:
    warnings: list[dict[str, str]] = []
    y_sd = float(y_all.std(unbiased=False))
    train_rmse = rmse(f.mean(0), y)
    report: dict[str, Any] = {"task": "regression", "draws": int(f.shape[0]), "train_rows": int(y.shape[0]),
                              "train_rmse": train_rmse, "y_sd": y_sd}
    if y_sd > 0 and train_rmse >= NO_BETTER_THAN_MEAN * y_sd:
        warnings.append({"code": "no_better_than_mean", "message": (
            f"the predictive mean fits the training data no better than their mean: training RMSE "
            f"{train_rmse:.3g} against the sd of y {y_sd:.3g} (the RMSE of predicting ȳ everywhere); the posterior "
            "has not learnt the inputs' effect")})
    if test is not None:
        predictor, n, target, x_test, y_test = test
        f_test, noise_test = predictor.regression_draws(x_test, n, CHECK_SEED)
        pit = predictive_pit(f_test, noise_test, original_outputs(target, y_test))
        coverage = {f"{level:g}": float(((pit - 0.5).abs() <= level / 2).to(torch.float64).mean())
                    for level in COVERAGE_LEVELS}
        m = int(pit.shape[0])
        bands = {key: COVERAGE_SE * math.sqrt(float(key) * (1 - float(key)) / m) + COVERAGE_SLACK for key in coverage}
        report.update(test_rows=m, coverage=coverage, coverage_band=bands)
        off = [key for key, value in coverage.items() if abs(value - float(key)) > bands[key]]
        if off:
            shown = ", ".join(f"{float(key):.0%} interval covers {coverage[key]:.0%}" for key in off)
            warnings.append({"code": "miscalibrated", "message": (
                f"the predictive intervals (noise included) cover the {m} held-out points at the wrong rate: {shown} "
                f"(allowed ± {max(bands[key] for key in off):.2f}); "
                + ("the predictive is over-confident" if any(coverage[key] < float(key) for key in off)
                   else "the predictive is too wide"))})
    return report, warnings


def predictive_pit(f: Tensor, noise: Tensor, y: Tensor) -> Tensor:
    """PIT values u_j = (1/n) Σ_i Φ((y_j − f_ij)/σ_i) of the mixture predictive at observed y, [m] float64."""
    scale = noise.unsqueeze(-1) if noise.ndim == 1 else noise
    z = (y.to(torch.float64) - f.to(torch.float64)) / scale.to(torch.float64)
    return (0.5 * torch.erfc(-z / math.sqrt(2))).mean(0)


def _classification_checks(probs: Tensor, labels: Tensor, all_labels: Tensor,
                           test: tuple[Any, ...] | None) -> tuple[dict[str, Any], list[dict[str, str]]]:
    warnings: list[dict[str, str]] = []
    accuracy = float((probs.argmax(1) == labels).to(torch.float64).mean())
    majority = float(torch.bincount(all_labels).max()) / all_labels.shape[0]
    report: dict[str, Any] = {"task": "classification", "train_rows": int(labels.shape[0]),
                              "train_accuracy": accuracy, "majority_share": majority}
    if accuracy <= majority:
        warnings.append({"code": "no_better_than_mean", "message": (
            f"the predictive classifies the training data no better than always answering the majority class: "
            f"accuracy {accuracy:.3f} against its share {majority:.3f}")})
    if test is not None:
        predictor, n, x_test, y_test = test
        test_probs = predictor.class_probabilities(x_test, n, CHECK_SEED).mean(0)
        count, correct, confidence = calibration_bins(test_probs, y_test.to(torch.int64), ECE_BINS)
        m = float(count.sum())
        ece = float(np.abs(correct - confidence).sum() / m)
        mean_confidence = np.divide(confidence, count, out=np.zeros_like(confidence), where=count > 0)
        band = float((COVERAGE_SE * np.sqrt(mean_confidence * (1 - mean_confidence) * count)).sum() / m) \
            + COVERAGE_SLACK
        report.update(test_rows=int(m), ece=ece, ece_band=band)
        if ece > band:
            warnings.append({"code": "miscalibrated", "message": (
                f"the predictive probabilities are miscalibrated on the {int(m)} held-out points: expected "
                f"calibration error {ece:.3f} above {band:.3f}, what a calibrated predictive stays under")})
    return report, warnings


def method_predictive_checks(method: Any) -> tuple[dict[str, Any], list[dict[str, str]]] | None:
    """`predictive_checks` of a trained method's predictive (`prediction.predictor_for_method`), or of its
    particles where they are a GP-prior `function_posterior`'s function values; None where the target is not
    over functions of inputs or has no predictive."""
    from inference_core.prediction.predictive import PredictionUnsupported, predictor_for_method

    target = method.target
    if target.kind not in PREDICTIVE_KINDS:
        return None
    try:
        predictor = predictor_for_method(method)
    except PredictionUnsupported:
        if target.kind == "function_posterior" and method.particles_in_target_space:
            return function_values_checks(method.particles(), float(target.noise_std), target)
        return None
    return predictive_checks(predictor, target)
