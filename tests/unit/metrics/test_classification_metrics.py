"""inference_core.metrics.classification against independent references: scikit-learn's roc_auc_score, an
ECE computed by hand on a small example, entropy closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from inference_core.metrics.classification import auroc, expected_calibration_error, predictive_entropy

# ------------------------------------------------------------------------------------------------ AUROC


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auroc_matches_sklearn_with_ties(seed):
    rng = np.random.default_rng(seed)
    # Rounded scores: many ties within and across the two groups.
    scores_in = np.round(rng.normal(0.0, 1.0, size=137), 1)
    scores_out = np.round(rng.normal(0.7, 1.2, size=61), 1)
    labels = np.r_[np.zeros(137), np.ones(61)]
    expected = roc_auc_score(labels, np.r_[scores_in, scores_out])
    assert auroc(scores_in, scores_out) == pytest.approx(expected, abs=1e-12)


def test_auroc_extremes_and_all_ties():
    assert auroc([0.1, 0.2], [0.3, 0.4, 0.5]) == 1.0
    assert auroc([0.3, 0.4, 0.5], [0.1, 0.2]) == 0.0
    assert auroc([1.0, 1.0, 1.0], [1.0, 1.0]) == 0.5
    # One tie between the groups out of 2·2 pairs: (3 + 0.5) / 4.
    assert auroc([0.0, 1.0], [1.0, 2.0]) == pytest.approx(3.5 / 4)


def test_auroc_accepts_tensors_and_rejects_bad_input():
    assert auroc(torch.tensor([0.0, 1.0]), torch.tensor([2.0])) == 1.0
    with pytest.raises(ValueError, match="scores_out"):
        auroc([0.0], [])
    with pytest.raises(ValueError, match="finite"):
        auroc([0.0, float("nan")], [1.0])


# -------------------------------------------------------------------------------------------------- ECE


def test_ece_hand_computed_example():
    # Confidences 0.9 (correct), 0.8 (wrong), 0.55 (correct), 0.6 (correct) with M = 5 bins of width 0.2:
    # bin (0.8, 1.0] holds {0.9}; bin (0.6, 0.8] holds {0.8}; bin (0.4, 0.6] holds {0.55, 0.6}.
    # ECE = (1/4)|1 − 0.9| + (1/4)|0 − 0.8| + (2/4)|1 − 0.575| = 0.025 + 0.2 + 0.2125 = 0.4375.
    probs = np.array([[0.9, 0.1, 0.0], [0.8, 0.2, 0.0], [0.2, 0.55, 0.25], [0.1, 0.3, 0.6]])
    labels = np.array([0, 1, 1, 2])
    assert expected_calibration_error(probs, labels, n_bins=5) == pytest.approx(0.4375, abs=1e-12)
    # One bin: |accuracy − mean confidence| = |0.75 − 0.7125|.
    assert expected_calibration_error(probs, labels, n_bins=1) == pytest.approx(0.0375, abs=1e-12)


def test_ece_matches_a_loop_over_bins():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(500, 6)) * 2
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    labels = rng.integers(0, 6, size=500)
    confidence, prediction = probs.max(1), probs.argmax(1)
    edges = np.linspace(0, 1, 16)
    total = 0.0
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        inside = (confidence > lo) & (confidence <= hi)
        if inside.any():
            total += inside.mean() * abs((prediction[inside] == labels[inside]).mean() - confidence[inside].mean())
    assert expected_calibration_error(probs, labels, n_bins=15) == pytest.approx(total, abs=1e-12)


def test_ece_zero_for_perfect_calibration_and_bad_labels():
    # Always confident (1.0) and always right.
    assert expected_calibration_error(np.eye(3)[[0, 1, 2, 1]], [0, 1, 2, 1]) == 0.0
    with pytest.raises(ValueError, match="labels"):
        expected_calibration_error(np.eye(3), [0, 1])


# ---------------------------------------------------------------------------------------------- entropy


def test_predictive_entropy_closed_forms():
    probs = np.array([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0],
                      [0.7, 0.1, 0.1, 0.1]])
    expected = [math.log(4), 0.0, math.log(2), -(0.7 * math.log(0.7) + 0.3 * math.log(0.1))]
    np.testing.assert_allclose(predictive_entropy(probs), expected, rtol=0, atol=1e-14)
    # Tensors (float32) and unnormalised rows (renormalised).
    np.testing.assert_allclose(predictive_entropy(torch.tensor([[2.0, 2.0]])), [math.log(2)], atol=1e-7)


def test_predictive_entropy_rejects_bad_shapes():
    with pytest.raises(ValueError, match="shape"):
        predictive_entropy(np.ones(3))
    with pytest.raises(ValueError, match="non-negative"):
        predictive_entropy([[1.5, -0.5]])
