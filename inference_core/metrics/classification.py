"""Classification metrics of a predictive distribution: expected calibration error, AUROC of out-of-
distribution detection, predictive entropy (issue 13's held-out metrics; the GPVI paper's open-category
experiment, Ratzlaff et al. 2021 §4.4 and Appendix E, and ALF's `eval_uncertainty`).

Inputs are class probabilities [N, K] (for a Bayesian model: the softmax averaged over posterior draws, the
"soft vote" of ALF's `_classification_vote`) as numpy arrays or tensors; results are Python floats or float64
arrays. Everything is computed in float64 with numpy.
"""

from __future__ import annotations

import numpy as np


def _as_probs(probs) -> np.ndarray:
    array = np.asarray(probs.detach().cpu() if hasattr(probs, "detach") else probs, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] < 2:
        raise ValueError(f"probs must have shape [N ≥ 1, K ≥ 2], got {list(array.shape)}")
    if not np.isfinite(array).all() or (array < 0).any():
        raise ValueError("probs must be finite and non-negative")
    return array


def _as_vector(values, name: str) -> np.ndarray:
    array = np.asarray(values.detach().cpu() if hasattr(values, "detach") else values, dtype=np.float64)
    if array.ndim != 1 or array.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {list(array.shape)}")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} must be finite")
    return array


def _mid_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..N with ties given the mean of the ranks they span (scipy's `rankdata(method="average")`)."""
    unique, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    before = np.cumsum(counts) - counts  # values strictly below each distinct value
    return (before + (counts + 1) / 2)[inverse]


def predictive_entropy(probs) -> np.ndarray:
    """H[p] = −Σ_k p_k log p_k per row [N] (nats; 0·log 0 = 0). Rows are renormalised to sum to 1."""
    p = _as_probs(probs)
    p = p / p.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(p), 0.0)
    return -terms.sum(axis=1)


def expected_calibration_error(probs, labels, n_bins: int = 15) -> float:
    """ECE = Σ_m (|B_m|/N) · |acc(B_m) − conf(B_m)| (Naeini et al. 2015; Guo et al. 2017, eq. 3).

    Confidence = the largest class probability, prediction = its class (first on ties); the bins are the
    equal-width intervals ((m−1)/M, m/M] of [0, 1] (M = n_bins; the GPVI paper's Appendix E uses M = 15, as
    Guo et al.'s code), a confidence of exactly 0 falls in the first bin; empty bins count zero.
    """
    count, accuracy_sum, confidence_sum = calibration_bins(probs, labels, n_bins)
    return float(np.abs(accuracy_sum - confidence_sum).sum() / count.sum())


def calibration_bins(probs, labels, n_bins: int = 15) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per confidence bin (those of `expected_calibration_error`): the count of rows, the sum of their
    correctness (1 where the arg-max is the label) and the sum of their confidences, each [n_bins] float64."""
    p = _as_probs(probs)
    y = np.asarray(labels.detach().cpu() if hasattr(labels, "detach") else labels)
    if y.ndim != 1 or y.shape[0] != p.shape[0]:
        raise ValueError(f"labels must have shape [{p.shape[0]}], got {list(y.shape)}")
    if not isinstance(n_bins, int) or n_bins < 1:
        raise ValueError("n_bins must be a positive integer")
    confidence = p.max(axis=1)
    correct = (p.argmax(axis=1) == y).astype(np.float64)
    # Bin m holds confidences in ((m−1)/M, m/M]: ceil(c·M) − 1, clipped so that c = 0 lands in bin 0.
    bins = np.clip(np.ceil(confidence * n_bins).astype(np.int64) - 1, 0, n_bins - 1)
    return (np.bincount(bins, minlength=n_bins).astype(np.float64),
            np.bincount(bins, weights=correct, minlength=n_bins),
            np.bincount(bins, weights=confidence, minlength=n_bins))


def auroc(scores_in, scores_out) -> float:
    """Area under the ROC curve for telling outliers (positives, `scores_out`) from inliers (`scores_in`) by
    a score that should be larger on outliers (predictive entropy or variance): the Mann–Whitney statistic
    P(S_out > S_in) + ½ P(S_out = S_in), from mid-ranks of the pooled scores (ties count one half)."""
    inliers, outliers = _as_vector(scores_in, "scores_in"), _as_vector(scores_out, "scores_out")
    ranks = _mid_ranks(np.concatenate([inliers, outliers]))
    n_in, n_out = inliers.shape[0], outliers.shape[0]
    rank_sum_out = ranks[n_in:].sum()
    return float((rank_sum_out - n_out * (n_out + 1) / 2) / (n_in * n_out))
