"""Held-out metrics of a trained model on its data set's test part (issue 13; the UCI protocol of
Hernández-Lobato & Adams 2015): reported in a job's final metrics when a `bnn` or `function_posterior` target
was built from data with a test part (e.g. `uci:bostonHousing:split=0`, or an upload with X_test/y_test).

The posterior predictive is `prediction.predictor_for_method`, as for the predictive checks
(`metrics.predictive_checks`): the final particles, or CHECK_DRAWS draws of a generative method's sampler with
seed CHECK_SEED (the sampler's own stream, so training is untouched).
* regression, in the original units of y: `test_rmse` of the predictive mean and `test_ll`, the mean over
  test points of log (1/n) Σ_i N(y_j; f_i(x_j), σ_i²) (`metrics.regression`);
* classification: `test_accuracy` of the arg-max of the predictive probabilities p̄ = (1/n) Σ_i softmax(f_i)
  and `test_nll` = −(1/m) Σ_j log p̄_{y_j}(x_j), and `test_ece`, the expected calibration error of p̄ in
  ECE_BINS equal-width confidence bins (`metrics.classification.expected_calibration_error`).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from inference_core.metrics.classification import expected_calibration_error
from inference_core.metrics.predictive_checks import (
    CHECK_SEED,
    ECE_BINS,
    PREDICTIVE_KINDS,
    original_inputs,
    original_outputs,
    predictor_draws,
)
from inference_core.metrics.regression import mixture_log_likelihood, rmse
from inference_core.prediction.predictive import PredictionUnsupported, predictor_for_method


def heldout_metrics(method: Any) -> dict[str, float]:
    """The held-out metrics above, or {} when the target has no test part or no predictive model."""
    target = method.target
    if target.kind not in PREDICTIVE_KINDS or getattr(target, "X_test", None) is None or getattr(target, "y_test", None) is None:
        return {}
    try:
        predictor = predictor_for_method(method)
    except PredictionUnsupported:
        return {}
    n = predictor_draws(predictor)
    x = original_inputs(target, target.X_test)
    y = target.y_test.detach().cpu()
    if predictor.task == "regression":
        y = original_outputs(target, y)
        f, noise_std = predictor.regression_draws(x, n, CHECK_SEED)
        metrics = {"test_rmse": rmse(f.mean(0), y),
                   "test_ll": float(mixture_log_likelihood(y, f, noise_std).mean())}
    else:
        probs = predictor.class_probabilities(x, n, CHECK_SEED).mean(0)
        labels = y.to(torch.int64)
        picked = probs.gather(1, labels.unsqueeze(1)).squeeze(1)
        metrics = {"test_accuracy": float((probs.argmax(1) == labels).to(torch.float64).mean()),
                   "test_nll": float(-torch.log(picked).mean()),
                   "test_ece": expected_calibration_error(probs, labels, n_bins=ECE_BINS)}
    return {name: value for name, value in metrics.items() if math.isfinite(value)}
