"""PSIS, ESS, evidence and IMH (metrics/importance.py) against independent references: scipy's maximum-
likelihood generalized Pareto fit, weights with a known Pareto tail, closed-form normalisers, exact moments."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats as st

from inference_core.metrics import importance


@pytest.mark.parametrize("shape", [0.1, 0.3, 0.5, 0.8])
def test_gpd_fit_agrees_with_scipy_maximum_likelihood(shape: float) -> None:
    rng = np.random.default_rng(7)
    x = st.genpareto.rvs(shape, scale=2.0, size=400, random_state=rng)
    khat, sigma = importance.gpd_fit(x)
    mle_shape, _, mle_scale = st.genpareto.fit(x, floc=0)
    n = x.size  # our k̂ is shrunk towards 0.5 with prior weight 10: undo it before comparing
    raw_k = (khat * (n + 10) - 5.0) / n
    assert abs(raw_k - mle_shape) < 0.05
    assert abs(sigma / mle_scale - 1) < 0.1


@pytest.mark.parametrize("tail", [0.3, 0.6, 0.9])
def test_khat_recovers_a_known_pareto_tail(tail: float) -> None:
    """w = U^(−k), U uniform: P(w > t) = t^(−1/k), an exact Pareto tail of shape k. One k̂ from M = 300 tail
    values has an s.d. of about (1 + k)/√M ≈ 0.09, so the mean over 5 independent sets is checked."""
    khats = [importance.psis_smooth(-tail * np.log(np.random.default_rng(seed).random(10_000)))[1]
             for seed in range(5)]
    assert abs(np.mean(khats) - tail) < 0.08


def test_khat_of_gaussian_weights_orders_by_the_variance_ratio() -> None:
    """q = N(0, 1), p = N(0, σ²): the weights' tail shape is 1 − 1/σ² (slowly varying factor: k̂ is biased
    at finite S, but must be small for σ² < 1 and grow with σ²)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(4000)
    khats = [importance.psis_smooth(st.norm.logpdf(x, scale=math.sqrt(v)) - st.norm.logpdf(x))[1]
             for v in (0.5, 1.5, 3.0)]
    assert khats[0] < 0 and khats[0] < khats[1] < khats[2] and khats[2] > 0.5


def test_thresholds_and_tail_size() -> None:
    assert importance.khat_threshold(100) == pytest.approx(0.5)
    assert importance.khat_threshold(1000) == pytest.approx(1 - 1 / 3)
    assert importance.khat_threshold(10**6) == 0.7
    assert importance.tail_size(100) == 20 and importance.tail_size(10_000) == 300


def test_ess_extremes_and_smoothing_keeps_bounded_weights() -> None:
    assert importance.ess(np.zeros(50)) == pytest.approx(50)
    assert importance.ess(np.array([0.0, -50, -50, -50])) == pytest.approx(1, abs=1e-12)
    lw = np.log(np.random.default_rng(1).uniform(0.5, 1.0, 1000))  # bounded weights: a short tail, k̂ < 0
    smoothed, khat = importance.psis_smooth(lw)
    assert khat < 0 and np.exp(smoothed).sum() == pytest.approx(1)
    assert np.exp(smoothed).max() <= np.exp(lw - np.log(np.exp(lw).sum())).max() * (1 + 1e-9)
    # q ∝ p: weights equal up to rounding (here 1e-15 apart), uniform after smoothing, k̂ = −inf (no GPD to fit)
    equal = 1.8378770664093453 + np.random.default_rng(2).integers(-3, 4, 1000) * 4e-16
    smoothed, khat = importance.psis_smooth(equal)
    assert khat == -math.inf and np.allclose(np.exp(smoothed), 1e-3)


def test_evidence_of_a_known_normaliser() -> None:
    """q = N(0, 2²), p̃ = 7·N(0, 1): log Z = log 7 within 3 s.e.; the ELBO is below it."""
    rng = np.random.default_rng(5)
    x = 2 * rng.standard_normal(5000)
    lw = math.log(7) + st.norm.logpdf(x) - st.norm.logpdf(x, scale=2)
    ev = importance.evidence(lw)
    assert abs(ev.log_z - math.log(7)) < 3 * ev.log_z_se and ev.log_z_se < 0.02
    assert ev.elbo < math.log(7)


def test_resampling_and_imh_recover_the_target_moments() -> None:
    """q = N(0, 2²) proposals for p = N(1, 1): corrected draws have mean 1 and variance 1."""
    rng = np.random.default_rng(11)
    x = 2 * rng.standard_normal(40_000)
    lw = st.norm.logpdf(x, loc=1) - st.norm.logpdf(x, scale=2)
    index, _, khat = importance.psis_resample(lw, 10_000, seed=4)
    assert khat < 0.5
    assert abs(x[index].mean() - 1) < 0.05 and abs(x[index].var() - 1) < 0.06
    chain, rate = importance.independence_mh(lw, seed=4)
    kept = x[chain[20_000::2]]
    assert 0.3 < rate < 0.9
    assert abs(kept.mean() - 1) < 0.06 and abs(kept.var() - 1) < 0.08
    again, rate_again = importance.independence_mh(lw, seed=4)
    assert np.array_equal(chain, again) and rate == rate_again


def test_weightless_draws_are_never_chosen() -> None:
    lw = np.array([-np.inf, 0.0, -np.inf, 0.5, -1.0] * 10)
    chain, _ = importance.independence_mh(lw, seed=0)
    assert np.isfinite(lw[chain]).all()
    index, _, _ = importance.psis_resample(lw, 200, seed=0)
    assert np.isfinite(lw[index]).all()
