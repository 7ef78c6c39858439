"""Importance weights of a sampler's draws against an unnormalised target: diagnostics and corrections.

With draws x_s ~ q (s = 1..S), exact log q(x_s) and the target's unnormalised log p̃(x_s), the log weights are
lw_s = log p̃(x_s) − log q(x_s). Everything here is float64 numpy.

* PSIS (Vehtari, Simpson, Gelman, Yao & Gabry, "Pareto smoothed importance sampling", JMLR 2024, Algorithm 1):
  the M = ceil(min(S/5, 3√S)) largest weights are replaced by the expected order statistics of a generalized
  Pareto distribution fitted to the exceedances over the (M+1)-th largest weight, then truncated at the largest
  raw weight. The fit is Zhang & Stephens (2009)'s empirical-Bayes estimate with the weakly informative prior
  of Vehtari et al. (App. C: k̂ shrunk towards 0.5 with weight 10). The shape k̂ is the diagnostic:
  k̂ < min(1 − 1/log10(S), 0.7) (the sample-size-dependent threshold, §3.2.2) means the smoothed estimate is
  reliable; k̂ > 0.7 means no practical S makes it so.
* ESS of self-normalised weights: (Σ w)² / Σ w² (of the smoothed weights, as Vehtari et al. §3.1).
* Evidence: Ẑ = mean(w) is unbiased for Z = ∫p̃; its log has the delta-method s.e. sd(w)/(√S · mean(w)).
  The ELBO is mean(lw) ≤ log Z (s.e. sd(lw)/√S).
* Corrections: Pareto-smoothed importance resampling (multinomial, with replacement) and independence
  Metropolis–Hastings with q as proposal (Tierney 1994): from state x, x' ~ q is accepted with probability
  min(1, w(x')/w(x)); the chain has p as its stationary law whenever p ≪ q.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Vehtari et al.'s practical upper limit for k̂ (above it the estimate's convergence is too slow to be useful)
KHAT_LIMIT = 0.7
#: finite log weights all within this of each other are equal up to float64 rounding (psis_smooth)
EQUAL_LOG_WEIGHTS = 1e-9
#: fewer draws than this leave a tail of 4 or fewer for the GPD fit (k̂ = inf)
MIN_TAIL_DRAWS = 25


def khat_threshold(s: int) -> float:
    """min(1 − 1/log10(S), 0.7): the largest k̂ for which S draws give a reliable PSIS estimate (§3.2.2)."""
    return min(1.0 - 1.0 / math.log10(s), KHAT_LIMIT) if s > 10 else 0.0


def gpd_fit(exceedances: np.ndarray) -> tuple[float, float]:
    """(k̂, σ̂) of a generalized Pareto distribution with location 0 fitted to positive exceedances: Zhang &
    Stephens (2009) — a posterior mean of θ = −k/σ over a grid of m = 30 + ⌊√n⌋ quantile-based values with
    the profile likelihood as weights — then k̂ shrunk towards 0.5 with the prior weight 10 (Vehtari et al.)."""
    x = np.sort(np.asarray(exceedances, dtype=np.float64))
    n = x.size
    prior_bs, prior_k = 3.0, 10.0
    m = 30 + int(math.sqrt(n))
    b = 1.0 - np.sqrt(m / (np.arange(1, m + 1) - 0.5))
    b /= prior_bs * x[int(n / 4 + 0.5) - 1]
    b += 1.0 / x[-1]
    k = np.log1p(-b[:, None] * x).mean(axis=1)
    profile = n * (np.log(-b / k) - k - 1.0)
    with np.errstate(over="ignore"):  # exp overflow → weight 0 for grid points far below the best
        weights = 1.0 / np.exp(profile - profile[:, None]).sum(axis=1)
    keep = weights >= 10 * np.finfo(float).eps
    weights, b = weights[keep] / weights[keep].sum(), b[keep]
    b_post = float(np.sum(b * weights))
    k_post = float(np.log1p(-b_post * x).mean())
    sigma = -k_post / b_post
    k_post = (n * k_post + prior_k * 0.5) / (n + prior_k)
    return k_post, sigma


def _gpd_quantile(p: np.ndarray, k: float, sigma: float) -> np.ndarray:
    if abs(k) < np.finfo(float).eps:
        return -sigma * np.log1p(-p)
    return sigma * np.expm1(-k * np.log1p(-p)) / k


def tail_size(s: int) -> int:
    """M = ceil(min(S/5, 3√S)) (Vehtari et al., §3)."""
    return int(math.ceil(min(0.2 * s, 3.0 * math.sqrt(s))))


def psis_smooth(log_weights: np.ndarray) -> tuple[np.ndarray, float]:
    """(normalised smoothed log weights [S], k̂) — k̂ = inf when the tail has 4 values or fewer (S < 25) or is
    degenerate, −inf when the finite weights are equal up to rounding (q ∝ p, as for an exact Gaussian fit).
    Non-finite log weights (−inf: p̃ = 0) stay weightless."""
    lw = np.asarray(log_weights, dtype=np.float64).copy()
    s = lw.size
    finite = np.isfinite(lw)
    if not finite.any():
        raise ValueError("no finite log weight: the target is zero (or undefined) at every draw")
    lw[~finite] = -np.inf
    lw -= lw[finite].max()
    if finite.sum() >= MIN_TAIL_DRAWS and lw[finite].min() > -EQUAL_LOG_WEIGHTS:  # q ∝ p up to rounding: a
        return lw - _logsumexp(lw), -math.inf  # bounded tail, and no GPD to fit (it would divide by the zero spread)
    m = tail_size(s)
    order = np.argsort(lw)
    cutoff = max(lw[order[-m - 1]], math.log(np.finfo(float).tiny))
    tail = np.flatnonzero(lw > cutoff)
    khat = math.inf
    if tail.size > 4:
        tail = tail[np.argsort(lw[tail])]
        exceed = np.exp(lw[tail]) - math.exp(cutoff)
        if exceed[-1] > 0:
            khat, sigma = gpd_fit(exceed)
            if math.isfinite(khat) and sigma > 0:
                smoothed = _gpd_quantile((np.arange(tail.size) + 0.5) / tail.size, khat, sigma)
                lw[tail] = np.minimum(np.log(smoothed + math.exp(cutoff)), 0.0)  # truncated at the largest raw
    return lw - _logsumexp(lw), khat


def _logsumexp(values: np.ndarray) -> float:
    top = float(np.max(values))
    if not math.isfinite(top):
        return top
    return top + math.log(float(np.exp(values - top).sum()))


def normalised_weights(log_weights: np.ndarray) -> np.ndarray:
    """Weights summing to 1 from (smoothed) log weights, without overflow."""
    weights = np.exp(log_weights - np.max(log_weights))
    return weights / weights.sum()


def ess(log_weights: np.ndarray) -> float:
    """(Σ w)² / Σ w² for unnormalised log weights (a number of draws between 1 and S)."""
    lw = np.asarray(log_weights, dtype=np.float64)
    return math.exp(2 * _logsumexp(lw) - _logsumexp(2 * lw))


@dataclass(frozen=True)
class Evidence:
    log_z: float      # log Ẑ, Ẑ = mean(w)
    log_z_se: float   # delta-method s.e. of log Ẑ
    elbo: float       # mean(lw)
    elbo_se: float


def evidence(log_weights: np.ndarray) -> Evidence:
    """Importance-weighted evidence and the ELBO from raw log weights (module docstring)."""
    lw = np.asarray(log_weights, dtype=np.float64)
    s = lw.size
    log_z = _logsumexp(lw) - math.log(s)
    relative = np.exp(lw - log_z)  # w / mean(w)
    log_z_se = float(relative.std(ddof=1)) / math.sqrt(s) if s > 1 else math.inf
    elbo = float(lw.mean()) if np.isfinite(lw).all() else -math.inf
    elbo_se = float(lw.std(ddof=1)) / math.sqrt(s) if s > 1 and math.isfinite(elbo) else math.inf
    return Evidence(log_z, log_z_se, elbo, elbo_se)


def psis_resample(log_weights: np.ndarray, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(n indices drawn with replacement with probabilities ∝ the Pareto-smoothed weights, the normalised
    smoothed log weights, k̂); seeded."""
    smoothed, khat = psis_smooth(log_weights)
    rng = np.random.Generator(np.random.PCG64(seed))
    probabilities = np.exp(smoothed)
    return rng.choice(smoothed.size, size=n, replace=True, p=probabilities / probabilities.sum()), smoothed, khat


def independence_mh(log_weights: np.ndarray, seed: int) -> tuple[np.ndarray, float]:
    """(chain [S] of indices into the proposals, acceptance rate): independence Metropolis–Hastings over the
    proposals in their order, started at the first one with a finite weight; proposal t is accepted with
    probability min(1, w_t / w_state) (module docstring). Seeded: the same (weights, seed) give the same chain."""
    lw = np.asarray(log_weights, dtype=np.float64)
    finite = np.flatnonzero(np.isfinite(lw))
    if finite.size == 0:
        raise ValueError("no finite log weight: the target is zero (or undefined) at every draw")
    rng = np.random.Generator(np.random.PCG64(seed))
    log_u = np.log(rng.random(lw.size))
    state = int(finite[0])
    chain = [state] * lw.size
    accepted = 0
    # plain Python floats: a sequential loop over numpy scalars costs several times more per step
    weights, thresholds = lw.tolist(), (lw - log_u).tolist()  # accept t ⇔ log u_t < lw_t − lw_state
    current = weights[state]
    for t in range(state + 1, lw.size):
        if current < thresholds[t]:  # −inf weights are never accepted
            state, current = t, weights[t]
            accepted += 1
        chain[t] = state
    moves = max(lw.size - int(finite[0]) - 1, 1)
    return np.asarray(chain, dtype=np.int64), accepted / moves
