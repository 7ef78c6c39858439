"""The robustness suite's problems (issue 14): real posteriors written as `expression` targets.

Each `Problem` is a plain expression target spec (`dim`, `params` holding the data, `log_prob`) plus a name, a
description and one name per coordinate. References live in `references/<name>.json` (make_references.py):
closed form where one exists (`closed_form` below), else a long NUTS run.

Sources and conventions:
- funnel: Neal 2003 ("Slice sampling", §8), v ~ N(0, 3²), x_i | v ~ N(0, e^v); closed form: sd(x_i)² = E e^v = e^{9/2}.
- ill_gaussian_50 / rotated_gaussian_20: Gaussians whose marginal means/sds are exact.
- eight_schools_*: Rubin 1981; BDA3 §5.5 data. μ ~ N(0, 5²), τ ~ HalfCauchy(0, 5) (the Stan/PyMC classic),
  written in s = log τ with the log-Jacobian s (p(s) = p_τ(e^s)·e^s), so the support is all of R^10.
  Non-centred: θ_j = μ + τ η_j, η_j ~ N(0, 1); centred: θ_j ~ N(μ, τ²) directly (the funnel-shaped one).
- diabetes_regression: Efron et al. 2004 diabetes data (scikit-learn `load_diabetes(scaled=False)`, 442 × 10),
  raw unstandardised features, so posterior scales range over ~3 orders of magnitude and the intercept is
  strongly correlated with the slopes.
- breast_cancer_logistic: Wolberg et al. 1995 (scikit-learn `load_breast_cancer`, 569 × 30), standardised.
- hierarchical_logistic: the same data with the prior precision sampled (w ~ N(0, α⁻¹I), α ~ Exp(1), in log α):
  the Bayesian logistic regression of Kang's SVGD speed-up paper (§5.2; docs/reproduction.md), d = 32.
- ar2: a simulated AR(2) series (seed and true values below; no download), conditional likelihood.
- mixture / mixture_naive: two-component 1-D Gaussian mixture over simulated data, means ordered through a
  log gap (so there is one mode, not two label-swapped ones); the same density written
  stably (logaddexp + log_sigmoid) and naively as log(w e^a + (1 − w) e^b), which underflows in float32
  far from the data as written; the compiler's log-sum-exp rewrite (expression/stabilize.py) keeps it finite.
- mixture_unequal_10, student_t_20, rotated_gaussian_100, regression_noise_31 (added 2026-11-26, closed form):
  separated modes of unequal mass, heavy tails, as many dimensions as the default 100 particles, and a noise
  scale estimated jointly with many coefficients (its joint mode is far from its mean).
- seeds_random_effects, stochastic_volatility, negbin_salmonella (added 2026-11-27, issue 41; long-NUTS
  references with bulk ESS ≥ 2,000): a random-effect (varying-intercept) logistic regression on Crowder's seeds
  (BUGS Examples Vol. 1), Kim, Shephard & Chib's stochastic-volatility model on 97 simulated returns (100
  parameters, non-centred latent path), and a negative-binomial (NB2) regression on Breslow's 1984 Ames counts.

Two coordinate systems (issue 41): the sampler's (what the expression's x is: log τ, η, logit w, ...) and the
model's own parameters (τ, θ, w, ...). `Problem.constrain` maps draws from the first to the second (numpy, over
the last axis) and `Problem.model_names` names the result; problems written in their own parameters map by the
identity. The suite scores both (scoring.score_problem) against the references' two blocks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
import torch

SCHOOLS_Y = [28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0]
SCHOOLS_SIGMA = [15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0]
FUNNEL_DIM, FUNNEL_SCALE = 10, 3.0
AR_SEED, AR_N, AR_TRUE = 20260114, 200, {"c": 0.5, "phi1": 0.6, "phi2": -0.3, "sigma": 1.0}
MIX_SEED, MIX_N, MIX_TRUE = 20260115, 120, {"mu1": -1.0, "mu2": 2.0, "sigma": 0.8, "w": 0.35}

# half-Cauchy(0, 5) on τ = e^s, with the Jacobian s:  log p(s) = log 2/(π·5) − log(1 + (e^s/5)²) + s
_LOG_TAU = "log(2 / (pi * 5)) - log1p(square(exp(x[1]) / 5)) + x[1]"
_SCHOOLS_MODEL_NAMES = ["mu", "tau"] + [f"theta{j}" for j in range(1, 9)]


@dataclass(frozen=True)
class Problem:
    name: str
    description: str
    dim: int
    params: dict[str, Any]
    log_prob: str
    param_names: list[str]
    closed_form: dict[str, list[float]] | None = None  # {"mean": [...], "sd": [...]} when exact
    flagged: str | None = None  # why this problem is expected to fail today
    reference_from: str | None = None  # another problem whose NUTS reference this one shares
    nuts: dict[str, Any] = field(default_factory=dict)  # NUTS option overrides for its reference run
    scored: tuple[int, ...] | None = None  # coordinates the suite scores (None: all), see funnel()
    # the model's own parameters: `to_model` maps sampler coordinates [..., dim] to them [..., k] (numpy), named
    # `model_param_names`; None for both when the problem is written in its own parameters (the identity)
    to_model: Callable[[np.ndarray], np.ndarray] | None = field(default=None, compare=False)
    model_param_names: list[str] | None = None
    model_closed_form: dict[str, list[float]] | None = None  # exact model-space moments, where the map is not
    model_scored: tuple[int, ...] | None = None  # as `scored`, in the model's parameters

    def target_spec(self) -> dict[str, Any]:
        return {"kind": "expression", "dim": self.dim, "params": self.params, "log_prob": self.log_prob}

    @property
    def model_names(self) -> list[str]:
        """Names of the model's own parameters (the sampler's `param_names` when the map is the identity)."""
        return list(self.model_param_names or self.param_names)

    def constrain(self, draws: np.ndarray) -> np.ndarray:
        """The model's own parameters [..., k] (float64) of draws in the sampler's coordinates [..., dim]."""
        draws = np.asarray(draws, dtype=np.float64)
        if draws.shape[-1] != self.dim:
            raise ValueError(f"{self.name}: draws must end in {self.dim} coordinates, got {list(draws.shape)}")
        if self.to_model is None:
            return draws.copy()
        with np.errstate(over="ignore"):
            out = np.asarray(self.to_model(draws), dtype=np.float64)
        if out.shape != (*draws.shape[:-1], len(self.model_names)):
            raise AssertionError(f"{self.name}: constrain gave {list(out.shape)}")
        return out

    @property
    def scored_in_model(self) -> tuple[int, ...] | None:
        """The model-space coordinates the suite scores: `model_scored`, else `scored` when the map is the
        identity, else all (None)."""
        if self.model_scored is not None:
            return self.model_scored
        return self.scored if self.to_model is None else None

    @property
    def model_exact(self) -> dict[str, list[float]] | None:
        """Exact model-space means and sds: `model_closed_form`, or `closed_form` under the identity map."""
        if self.model_closed_form is not None:
            return self.model_closed_form
        return self.closed_form if self.to_model is None else None


# ---- maps from the sampler's coordinates to the model's own parameters (numpy, over the last axis) ----------


def _exp_at(*index: int) -> Callable[[np.ndarray], np.ndarray]:
    """e^x at the given coordinates (log-scale parameters), the others unchanged."""
    def to_model(x: np.ndarray) -> np.ndarray:
        out = x.copy()
        out[..., list(index)] = np.exp(x[..., list(index)])
        return out
    return to_model


def _schools_to_model(noncentred: bool) -> Callable[[np.ndarray], np.ndarray]:
    """(mu, log tau, eta or theta) → (mu, tau, theta), theta_j = mu + tau eta_j in the non-centred form."""
    def to_model(x: np.ndarray) -> np.ndarray:
        out = x.copy()
        out[..., 1] = np.exp(x[..., 1])
        if noncentred:
            out[..., 2:] = x[..., :1] + out[..., 1:2] * x[..., 2:]
        return out
    return to_model


def _mixture_to_model(x: np.ndarray) -> np.ndarray:
    """(mu1, log gap, log sigma, logit w) → (mu1, mu2 = mu1 + e^gap, sigma, w = sigmoid(logit w))."""
    from scipy.special import expit

    return np.stack([x[..., 0], x[..., 0] + np.exp(x[..., 1]), np.exp(x[..., 2]), expit(x[..., 3])], axis=-1)


def _tolist(a: np.ndarray) -> Any:
    return np.asarray(a, dtype=np.float64).tolist()


def funnel() -> Problem:
    d = FUNNEL_DIM
    sd_x = math.exp(FUNNEL_SCALE**2 / 4)  # sqrt(E e^v), v ~ N(0, 9)
    return Problem(
        "funnel", "Neal's funnel, d=10: v ~ N(0, 3^2), x_i | v ~ N(0, e^v)", d, {},
        f"log_normal(x[0], 0, {FUNNEL_SCALE}) + sum(log_normal(x[1:], 0, exp(x[0] / 2)))",
        ["v"] + [f"x{i}" for i in range(1, d)],
        closed_form={"mean": [0.0] * d, "sd": [FUNNEL_SCALE] + [sd_x] * (d - 1)},
        # Only v is scored: sd(x_i)² = E e^v is carried by rare large v (var(e^v) / (E e^v)² = e^9 - 1 ≈ 8100),
        # so even 20,000 exact draws miss sd(x_i) by |log ratio| 0.1-0.5, beyond the 0.25 bar.
        scored=(0,),
    )


def ill_gaussian() -> Problem:
    d = 50
    sd = np.logspace(-1, 1, d)  # sds 0.1 .. 10: covariance condition number 1e4
    mean = np.where(np.arange(d) % 2 == 0, 1.0, -1.0) * sd  # one sd off the origin, alternating sign
    return Problem(
        "ill_gaussian_50", "diagonal Gaussian, d=50, sds log-spaced 0.1..10 (condition number 1e4)", d,
        {"m": _tolist(mean), "s": _tolist(sd)}, "sum(log_normal(x, m, s))", [f"x{i}" for i in range(d)],
        closed_form={"mean": _tolist(mean), "sd": _tolist(sd)},
    )


def _rotated_gaussian(name: str, description: str, eig: np.ndarray, rng: np.random.Generator,
                      draw_mean: Any) -> Problem:
    """N(mean, Q diag(eig) Qᵀ) with Q a Haar-distributed rotation drawn first from `rng`, then the mean
    (`draw_mean(rng, d)`); written with its precision, the marginal moments exact."""
    d = len(eig)
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    q = q * np.sign(np.diag(r))
    precision = q @ np.diag(1 / eig) @ q.T
    mean = draw_mean(rng, d)
    return Problem(
        name, description, d, {"m": _tolist(mean), "P": _tolist((precision + precision.T) / 2)},
        "-0.5 * dot(x - m, P @ (x - m))", [f"x{i}" for i in range(d)],
        closed_form={"mean": _tolist(mean), "sd": _tolist(np.sqrt(np.diag(q @ np.diag(eig) @ q.T)))},
    )


def rotated_gaussian() -> Problem:
    return _rotated_gaussian(
        "rotated_gaussian_20", "correlated Gaussian, d=20, variances log-spaced 0.1..10 under a fixed random "
        "rotation (seed 14)", np.logspace(-1, 1, 20), np.random.default_rng(14),
        lambda rng, d: rng.normal(0.0, 1.0, d))


def eight_schools_noncentered() -> Problem:
    return Problem(
        "eight_schools_noncentered", "eight schools, non-centred: mu, log tau, eta_1..8 (theta = mu + tau eta)",
        10, {"y": SCHOOLS_Y, "sigma": SCHOOLS_SIGMA},
        "log_normal(x[0], 0, 5) + " + _LOG_TAU + " + sum(log_normal(x[2:], 0, 1))"
        " + sum(log_normal(y, x[0] + exp(x[1]) * x[2:], sigma))",
        ["mu", "log_tau"] + [f"eta{j}" for j in range(1, 9)],
        nuts={"target_accept_prob": 0.9},
        to_model=_schools_to_model(noncentred=True), model_param_names=_SCHOOLS_MODEL_NAMES,
    )


def eight_schools_centered() -> Problem:
    return Problem(
        "eight_schools_centered", "eight schools, centred: mu, log tau, theta_1..8 (funnel between log tau and "
        "theta); reference = the non-centred NUTS draws mapped to theta", 10,
        {"y": SCHOOLS_Y, "sigma": SCHOOLS_SIGMA},
        "log_normal(x[0], 0, 5) + " + _LOG_TAU + " + sum(log_normal(x[2:], x[0], exp(x[1])))"
        " + sum(log_normal(y, x[2:], sigma))",
        ["mu", "log_tau"] + [f"theta{j}" for j in range(1, 9)],
        reference_from="eight_schools_noncentered",
        to_model=_schools_to_model(noncentred=False), model_param_names=_SCHOOLS_MODEL_NAMES,
    )


def diabetes_regression() -> Problem:
    from sklearn.datasets import load_diabetes

    data = load_diabetes(scaled=False)
    names = ["intercept"] + [f"b_{n}" for n in data.feature_names] + ["log_sigma"]
    # alpha ~ N(0, 200^2), beta_j ~ N(0, 100^2) (weak on the raw scale), sigma ~ HalfNormal(100) in log sigma
    # with its Jacobian.
    return Problem(
        "diabetes_regression", "linear regression on the raw (unstandardised) diabetes data, 442 x 10; "
        "intercept, 10 slopes, log sigma (badly scaled, intercept-slope correlations)", 12,
        {"X": _tolist(data.data), "y": _tolist(data.target)},
        "log_normal(x[0], 0, 200) + sum(log_normal(x[1:11], 0, 100))"
        " + log_normal(exp(x[11]), 0, 100) + x[11]"
        " + sum(log_normal(y, x[0] + X @ x[1:11], exp(x[11])))",
        names, nuts={"full_mass": True},
        to_model=_exp_at(11), model_param_names=names[:11] + ["sigma"],
    )


def _breast_cancer() -> tuple[dict[str, Any], list[str]]:
    """The standardised breast-cancer data as expression params, and the names intercept, w_<feature>."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    X = (data.data - data.data.mean(0)) / data.data.std(0)
    return {"X": _tolist(X), "y": _tolist(data.target)}, ["intercept"] + [f"w_{n}" for n in data.feature_names]


#: the Bernoulli-logit log likelihood of the 569 labels, intercept x[0] and weights x[1:31]
_BREAST_LOGIT = " + sum(y * (x[0] + X @ x[1:31]) - softplus(x[0] + X @ x[1:31]))"


def breast_cancer_logistic() -> Problem:
    params, names = _breast_cancer()
    return Problem(
        "breast_cancer_logistic", "logistic regression on the standardised breast-cancer data, 569 x 30; "
        "intercept ~ N(0, 2.5^2), weights ~ N(0, 1)", 31, params,
        "log_normal(x[0], 0, 2.5) + sum(log_normal(x[1:], 0, 1))" + _BREAST_LOGIT, names,
    )


def hierarchical_logistic() -> Problem:
    # w ~ N(0, α⁻¹ I) over the intercept and the 30 weights, α ~ Gamma(1, rate 1) = Exp(1) in log α with its
    # Jacobian: the speed-up paper's model (docs/reproduction.md). Pathfinder's paths agree on a mode 3.6 sds
    # from the posterior mean of log α: the k̂ rule's case (docs/method-choice.md, `auto` point 6).
    params, names = _breast_cancer()
    return Problem(
        "hierarchical_logistic", "logistic regression on the standardised breast-cancer data, 569 x 30, with a "
        "sampled prior precision: intercept and weights ~ N(0, 1/alpha), alpha ~ Exp(1); parameters w, log alpha", 32,
        params, "-exp(x[31]) + x[31] + sum(log_normal(x[0:31], 0, exp(-x[31] / 2)))" + _BREAST_LOGIT,
        names + ["log_alpha"], to_model=_exp_at(31), model_param_names=names + ["alpha"],
    )


@cache
def ar_series() -> np.ndarray:
    """AR(2) y_t = c + φ1 y_{t−1} + φ2 y_{t−2} + σ ε_t, 500 burn-in steps dropped (seed AR_SEED)."""
    rng = np.random.default_rng(AR_SEED)
    t = AR_TRUE
    y = np.zeros(AR_N + 500)
    for i in range(2, len(y)):
        y[i] = t["c"] + t["phi1"] * y[i - 1] + t["phi2"] * y[i - 2] + t["sigma"] * rng.standard_normal()
    return y[500:]


def ar2() -> Problem:
    n = AR_N
    return Problem(
        "ar2", f"AR(2) on a simulated series of {n} points (seed {AR_SEED}, c=0.5, phi=(0.6, -0.3), sigma=1), "
        "likelihood conditional on the first two; c ~ N(0, 10^2), phi ~ N(0, 1), sigma ~ HalfNormal(5) in log sigma",
        4, {"y": _tolist(ar_series())},
        "log_normal(x[0], 0, 10) + sum(log_normal(x[1:3], 0, 1)) + log_normal(exp(x[3]), 0, 5) + x[3]"
        f" + sum(log_normal(y[2:{n}], x[0] + x[1] * y[1:{n - 1}] + x[2] * y[0:{n - 2}], exp(x[3])))",
        ["c", "phi1", "phi2", "log_sigma"], to_model=_exp_at(3), model_param_names=["c", "phi1", "phi2", "sigma"],
    )


@cache
def mixture_data() -> np.ndarray:
    rng = np.random.default_rng(MIX_SEED)
    t = MIX_TRUE
    first = rng.random(MIX_N) < t["w"]
    return np.where(first, rng.normal(t["mu1"], t["sigma"], MIX_N), rng.normal(t["mu2"], t["sigma"], MIX_N))


# The likelihood is symmetric under relabelling (mu1, mu2, w) -> (mu2, mu1, 1 - w); asymmetric priors alone
# leave the swapped mode ~0.5 % of the mass and NUTS chains started in its basin stay there (seen in a first
# reference run). So the means are ordered, as Stan's `ordered` type does: mu2 = mu1 + e^g, g = log gap, with
# the log-Jacobian g. Priors: mu1, mu2 ~ N(0, 3^2), sigma ~ HalfNormal(2) in log sigma (+ Jacobian),
# logit w ~ N(0, 1.5^2).
_MU2 = "(x[0] + exp(x[1]))"
_MIX_PRIOR = (f"log_normal(x[0], 0, 3) + log_normal({_MU2}, 0, 3) + x[1] + log_normal(exp(x[2]), 0, 2) + x[2]"
              " + log_normal(x[3], 0, 1.5)")


def _mixture(naive: bool) -> Problem:
    if naive:
        like = ("sum(log(sigmoid(x[3]) * exp(log_normal(y, x[0], exp(x[2])))"
                f" + (1 - sigmoid(x[3])) * exp(log_normal(y, {_MU2}, exp(x[2])))))")
    else:
        like = ("sum(logaddexp(log_sigmoid(x[3]) + log_normal(y, x[0], exp(x[2])),"
                f" log_sigmoid(-x[3]) + log_normal(y, {_MU2}, exp(x[2]))))")
    return Problem(
        "mixture_naive" if naive else "mixture",
        f"two-component 1-D Gaussian mixture over {MIX_N} simulated points (seed {MIX_SEED}); mu1, "
        "log gap (mu2 = mu1 + e^gap, ordered), log sigma, logit w; "
        + ("written naively as log(w e^a + (1-w) e^b)" if naive else "written with logaddexp"),
        4, {"y": _tolist(mixture_data())}, _MIX_PRIOR + " + " + like, ["mu1", "log_gap", "log_sigma", "logit_w"],
        flagged=None,  # log(w e^a + (1-w) e^b) underflowed to log 0 before the compiler's log-sum-exp rewrite
        reference_from="mixture" if naive else None,
        to_model=_mixture_to_model, model_param_names=["mu1", "mu2", "sigma", "w"],
    )


def mixture() -> Problem:
    return _mixture(naive=False)


def mixture_unequal_10() -> Problem:
    """Two separated modes with unequal masses, written the obvious way: 0.3·N(m₁, I) + 0.7·N(m₂, I) in 10-d,
    |m₂ − m₁| = 5 along a random direction (seed 15). The density between the modes falls to e^−3.1 of theirs,
    so particles do not cross: what each mode ends with is what it starts with."""
    d, gap, light = 10, 5.0, 0.3
    rng = np.random.default_rng(15)
    direction = rng.standard_normal(d)
    direction /= np.linalg.norm(direction)
    m1 = rng.standard_normal(d)
    m2 = m1 + gap * direction
    cov = np.eye(d) + light * (1 - light) * gap**2 * np.outer(direction, direction)
    return Problem(
        "mixture_unequal_10", "two unit-covariance Gaussian modes 5 apart with masses 0.3 / 0.7, d=10 (seed 15)",
        d, {"m1": _tolist(m1), "m2": _tolist(m2)},
        f"logaddexp(log({light}) + sum(log_normal(x, m1, 1)), log({1 - light}) + sum(log_normal(x, m2, 1)))",
        [f"x{i}" for i in range(d)],
        closed_form={"mean": _tolist(light * m1 + (1 - light) * m2), "sd": _tolist(np.sqrt(np.diag(cov)))},
    )


def student_t_20() -> Problem:
    """Heavy tails: 20 independent Student-t's with 5 degrees of freedom, scales log-uniform on 0.1..10 and
    locations uniform on ±5 (seed 16); sd = scale·√(5/3)."""
    d, df = 20, 5.0
    rng = np.random.default_rng(16)
    loc, scale = rng.uniform(-5, 5, d), 10 ** rng.uniform(-1, 1, d)
    return Problem(
        "student_t_20", "independent Student-t's, 5 degrees of freedom, scales 0.1..10, d=20 (seed 16)", d,
        {"loc": _tolist(loc), "scale": _tolist(scale)}, f"sum(log_student_t(x, {df:g}, loc, scale))",
        [f"x{i}" for i in range(d)],
        closed_form={"mean": _tolist(loc), "sd": _tolist(scale * math.sqrt(df / (df - 2)))},
    )


#: the conjugate regression's prior: β | σ² ~ N(0, σ²/λ₀ I), σ² ~ InvGamma(a₀, b₀)
REGRESSION_PRIOR = {"lambda0": 0.01, "a0": 2.0, "b0": 1.0}


def regression_noise_31() -> Problem:
    """A regression whose noise scale is estimated with its 30 coefficients (features scaled 10⁻² to 10², AR(1)-
    correlated, 200 rows, seed 3), conjugate Normal-inverse-gamma, written in (β, s = log σ²) with the Jacobian:
    β's marginal is a multivariate t with 2aₙ degrees of freedom and s = log bₙ − log Gamma(aₙ, 1), so the means
    and sds are exact (BDA3 §14.2)."""
    p, n = 30, 200
    lam0, a0, b0 = REGRESSION_PRIOR["lambda0"], REGRESSION_PRIOR["a0"], REGRESSION_PRIOR["b0"]
    rng = np.random.default_rng(3)
    scales = 10 ** rng.uniform(-2, 2, p)
    x = rng.standard_normal((n, p))
    x[:, 1:] = 0.6 * x[:, :-1] + 0.8 * x[:, 1:]
    x *= scales
    y = x @ (rng.standard_normal(p) / scales) + 0.7 * rng.standard_normal(n)
    precision = x.T @ x + lam0 * np.eye(p)
    mean = np.linalg.solve(precision, x.T @ y)
    a_n, b_n = a0 + n / 2, b0 + 0.5 * (y @ y - mean @ precision @ mean)
    beta_cov = (2 * a_n) / (2 * a_n - 2) * (b_n / a_n) * np.linalg.inv(precision)
    digamma, trigamma = (float(f(torch.tensor(a_n, dtype=torch.float64)))
                         for f in (torch.special.digamma, lambda t: torch.special.polygamma(1, t)))
    return Problem(
        "regression_noise_31", "linear regression, 30 badly scaled correlated features, 200 rows, noise variance "
        "unknown (conjugate Normal-inverse-gamma; coefficients and log sigma^2)", p + 1,
        {"X": _tolist(x), "y": _tolist(y)},
        f"sum(log_normal(y, X @ x[0:{p}], exp(0.5 * x[{p}])))"
        f" + sum(log_normal(x[0:{p}], 0, exp(0.5 * x[{p}]) / {math.sqrt(lam0):g})) - {a0:g} * x[{p}] - {b0:g} * exp(-x[{p}])",
        [f"beta{i}" for i in range(p)] + ["log_sigma2"],
        closed_form={"mean": _tolist(np.append(mean, math.log(b_n) - digamma)),
                     "sd": _tolist(np.append(np.sqrt(np.diag(beta_cov)), math.sqrt(trigamma)))},
        # σ² ~ InvGamma(aₙ, bₙ): mean bₙ/(aₙ − 1), sd bₙ/((aₙ − 1)√(aₙ − 2))
        to_model=_exp_at(p), model_param_names=[f"beta{i}" for i in range(p)] + ["sigma2"],
        model_closed_form={
            "mean": _tolist(np.append(mean, b_n / (a_n - 1))),
            "sd": _tolist(np.append(np.sqrt(np.diag(beta_cov)), b_n / ((a_n - 1) * math.sqrt(a_n - 2))))},
    )


def rotated_gaussian_100() -> Problem:
    """d = 100, as many dimensions as the default particle count: variances log-spaced 10⁻⁴..1 (condition number
    10⁴) under a random rotation (seed 17)."""
    return _rotated_gaussian(
        "rotated_gaussian_100", "correlated Gaussian, d=100, variances log-spaced 1e-4..1 under a random rotation "
        "(seed 17)", np.logspace(-4, 0, 100), np.random.default_rng(17), lambda rng, d: rng.uniform(-3, 3, d))


def mixture_naive() -> Problem:
    return _mixture(naive=True)


# ---- added 2026-11-27 (issue 41): kinds the suite lacked, published models, long-NUTS references ------------

#: Crowder (1978) Table 3, the seeds of BUGS Examples Vol. 1: r_i of n_i seeds germinated on plate i, seed type
#: x1 (0: O. aegyptiaca 75, 1: O. aegyptiaca 73) and root extract x2 (0: bean, 1: cucumber)
SEEDS_R = [10, 23, 23, 26, 17, 5, 53, 55, 32, 46, 10, 8, 10, 8, 23, 0, 3, 22, 15, 32, 3]
SEEDS_N = [39, 62, 81, 51, 39, 6, 74, 72, 51, 79, 13, 16, 30, 28, 45, 4, 12, 41, 30, 51, 7]
SEEDS_X1 = [0] * 11 + [1] * 10
SEEDS_X2 = [0] * 5 + [1] * 6 + [0] * 5 + [1] * 5


def _seeds_to_model(x: np.ndarray) -> np.ndarray:
    """(alpha0, alpha1, alpha2, alpha12, log sigma, z_1..21) → (alpha's, sigma, b_i = sigma z_i)."""
    out = x.copy()
    out[..., 4] = np.exp(x[..., 4])
    out[..., 5:] = out[..., 4:5] * x[..., 5:]
    return out


def seeds_random_effects() -> Problem:
    """Random-effect (plate-level, varying-intercept) logistic regression: the seeds of BUGS Examples Vol. 1
    (Crowder 1978 Table 3; Breslow & Clayton 1993), 21 plates in a 2 × 2 factorial of seed type and root extract.
    r_i ~ Binomial(n_i, logit⁻¹(α₀ + α₁ x1_i + α₂ x2_i + α₁₂ x1_i x2_i + b_i)), b_i ~ N(0, σ²), with the priors of
    Stan's example-models `seeds_stanified.stan` (α ~ N(0, 1), σ ~ HalfCauchy(0, 1); the BUGS original's
    Gamma(10⁻³, 10⁻³) precision prior is the one Gelman 2006 warns against), written non-centred (b = σ z,
    z ~ N(0, 1)) in log σ with its Jacobian; the binomial coefficients are left out (constant)."""
    eta = "(x[0] + x[1] * x1 + x[2] * x2 + x[3] * x12 + exp(x[4]) * x[5:26])"
    x1, x2 = np.asarray(SEEDS_X1, float), np.asarray(SEEDS_X2, float)
    return Problem(
        "seeds_random_effects", "random-effect logistic regression, Crowder's seeds (BUGS Vol. 1), 21 plates: "
        "alpha0, alpha1, alpha2, alpha12, log sigma, z_1..21 (plate effects b = sigma z, non-centred)", 26,
        {"r": _tolist(SEEDS_R), "n": _tolist(SEEDS_N), "x1": _tolist(x1), "x2": _tolist(x2), "x12": _tolist(x1 * x2)},
        "sum(log_normal(x[0:4], 0, 1)) + log(2 / pi) - softplus(2 * x[4]) + x[4] + sum(log_normal(x[5:26], 0, 1))"
        f" + sum(r * log_sigmoid({eta}) + (n - r) * log_sigmoid(-{eta}))",
        ["alpha0", "alpha1", "alpha2", "alpha12", "log_sigma"] + [f"z{i}" for i in range(1, 22)],
        to_model=_seeds_to_model,
        model_param_names=["alpha0", "alpha1", "alpha2", "alpha12", "sigma"] + [f"b{i}" for i in range(1, 22)],
    )


SV_SEED, SV_T, SV_TRUE = 20261127, 97, {"mu": -1.0, "phi": 0.9, "sigma": 0.4}
#: stochvol's default priors (Kastner 2016, JSS 69(5)): μ ~ N(0, 100²), (φ + 1)/2 ~ Beta(5, 1.5), σ² ~ χ²₁
SV_PRIOR = {"mu_sd": 100.0, "a_phi": 5.0, "b_phi": 1.5, "sigma_scale": 1.0}


@cache
def sv_returns() -> np.ndarray:
    """SV_T returns from the SV model itself (seed SV_SEED, true values SV_TRUE): h_1 from the stationary
    N(μ, σ²/(1 − φ²)), h_t = μ + φ(h_{t−1} − μ) + σ η_t, y_t = e^{h_t/2} ε_t."""
    rng = np.random.default_rng(SV_SEED)
    mu, phi, sigma = SV_TRUE["mu"], SV_TRUE["phi"], SV_TRUE["sigma"]
    h = np.empty(SV_T)
    h[0] = mu + sigma / math.sqrt(1 - phi**2) * rng.standard_normal()
    for t in range(1, SV_T):
        h[t] = mu + phi * (h[t - 1] - mu) + sigma * rng.standard_normal()
    return np.exp(h / 2) * rng.standard_normal(SV_T)


def _sv_to_model(x: np.ndarray) -> np.ndarray:
    """(mu, logit((phi+1)/2), log sigma, h~_1..T) → (mu, phi = tanh(z/2), sigma, h_t = mu + sigma h~_t)."""
    out = x.copy()
    out[..., 1] = np.tanh(x[..., 1] / 2)
    out[..., 2] = np.exp(x[..., 2])
    out[..., 3:] = x[..., :1] + out[..., 2:3] * x[..., 3:]
    return out


def stochastic_volatility() -> Problem:
    """The stochastic-volatility model of Kim, Shephard & Chib (1998) (the Stan User's Guide's SV model):
    y_t ~ N(0, e^{h_t}), h_t = μ + φ(h_{t−1} − μ) + σ η_t, h_1 from the stationary law, on SV_T returns simulated
    from the model (`sv_returns`, described there; no download). Priors: stochvol's defaults (SV_PRIOR). Written
    in the non-centred parameterisation of Kastner & Frühwirth-Schnatter (2014, CSDA 76): h~_t = (h_t − μ)/σ, an
    AR(1) with unit innovations, h~_1 ~ N(0, 1/(1 − φ²)); φ through z = logit((φ + 1)/2) (φ = tanh(z/2), the
    Beta prior times the Jacobian u(1 − u) is u^5 (1 − u)^1.5, u = (φ + 1)/2) and σ through log σ (+ Jacobian)."""
    t, pr = SV_T, SV_PRIOR
    d = t + 3
    h = f"(x[0] + exp(x[2]) * x[3:{d}])"
    # log of the stationary sd 1/√(1 − φ²) = 1/(2√(u(1 − u))): −log 2 − (log u + log(1 − u))/2
    stationary_sd = "0.5 * exp(-0.5 * (log_sigmoid(x[1]) + log_sigmoid(-x[1])))"
    return Problem(
        "stochastic_volatility", f"stochastic volatility (Kim, Shephard & Chib 1998) on {t} simulated returns "
        f"(seed {SV_SEED}, mu=-1, phi=0.9, sigma=0.4): mu, logit((phi+1)/2), log sigma and {t} latent "
        "log-volatilities, non-centred (h = mu + sigma h~, h~ an AR(1) with unit innovations)", d,
        {"y": _tolist(sv_returns())},
        f"log_normal(x[0], 0, {pr['mu_sd']:g})"
        f" + {pr['a_phi']:g} * log_sigmoid(x[1]) + {pr['b_phi']:g} * log_sigmoid(-x[1])"
        f" + log_normal(exp(x[2]), 0, {pr['sigma_scale']:g}) + x[2]"
        f" + log_normal(x[3], 0, {stationary_sd}) + sum(log_normal(x[4:{d}], tanh(0.5 * x[1]) * x[3:{d - 1}], 1))"
        f" + sum(log_normal(y, 0, exp(0.5 * {h})))",
        ["mu", "logit_phi", "log_sigma"] + [f"h_std{i}" for i in range(1, t + 1)],
        nuts={"target_accept_prob": 0.9},  # a short pilot at 0.8 had 2 divergences in 2,000 draws
        to_model=_sv_to_model, model_param_names=["mu", "phi", "sigma"] + [f"h{i}" for i in range(1, t + 1)],
    )


#: Breslow (1984) Table 1 (Margolin, Kaplan & Zeiger 1981): revertant TA98 Salmonella colonies on 3 plates at each
#: of 6 doses of quinoline (µg per plate); BUGS Examples Vol. 1 "Salm", R's aod::salmonella
SALM_DOSE = [0.0, 10.0, 33.0, 100.0, 333.0, 1000.0]
SALM_Y = [[15, 21, 29], [16, 18, 21], [16, 26, 33], [27, 41, 60], [33, 38, 41], [20, 27, 42]]


def negbin_salmonella() -> Problem:
    """An over-dispersed count regression: negative-binomial (NB2) log-linear regression of Breslow's (1984)
    Ames-assay counts on Breslow's dose-response curve, log μ_i = α + β log(dose_i + 10) + γ dose_i/1000 (the
    model of BUGS "Salm" and of aod::negbin's example), Var y = μ + ψ μ² (ψ = 1/φ, NB2's over-dispersion).
    Priors: α, β, γ ~ N(0, 10²); √ψ ~ HalfNormal(1) (the Stan prior-choice wiki's prior on the reciprocal square
    root of the NB dispersion), written in log ψ with its Jacobian ψ^{1/2}/2. The NB2 log pmf is exact:
    lgamma(y + φ) − lgamma(φ) − lgamma(y + 1) − φ log(1 + ψμ) + y (log ψμ − log(1 + ψμ))."""
    dose = np.repeat(SALM_DOSE, 3)
    y = np.asarray(SALM_Y, dtype=float).reshape(-1)
    eta = "(x[0] + x[1] * ld + x[2] * dk)"
    lpm = f"(x[3] + {eta})"  # log ψμ
    return Problem(
        "negbin_salmonella", "negative-binomial (NB2) regression, Breslow's 1984 Ames salmonella counts, 18 plates: "
        "alpha, beta (log(dose + 10)), gamma (dose / 1000), log psi (Var = mu + psi mu^2)", 4,
        {"y": _tolist(y), "ld": _tolist(np.log(dose + 10)), "dk": _tolist(dose / 1000)},
        "sum(log_normal(x[0:3], 0, 10)) + log_normal(exp(0.5 * x[3]), 0, 1) + 0.5 * x[3]"
        f" + sum(lgamma(y + exp(-x[3])) - lgamma(exp(-x[3])) - lgamma(y + 1) - exp(-x[3]) * softplus({lpm})"
        f" + y * ({lpm} - softplus({lpm})))",
        ["alpha", "beta", "gamma", "log_psi"],
        nuts={"full_mass": True},  # alpha and beta are strongly correlated (log(dose + 10) is not centred)
        to_model=_exp_at(3), model_param_names=["alpha", "beta", "gamma", "psi"],
    )


_BUILDERS = (funnel, ill_gaussian, rotated_gaussian, eight_schools_noncentered, eight_schools_centered,
             diabetes_regression, breast_cancer_logistic, hierarchical_logistic, ar2, mixture, mixture_naive,
             mixture_unequal_10, student_t_20, rotated_gaussian_100, regression_noise_31, seeds_random_effects,
             stochastic_volatility, negbin_salmonella)


@cache
def problems() -> dict[str, Problem]:
    """name → Problem, in suite order."""
    out = {}
    for build in _BUILDERS:
        problem = build()
        out[problem.name] = problem
    return out


def get(name: str) -> Problem:
    return problems()[name]


def selected(text: str) -> list[str]:
    """The problem names of a comma-separated command-line list, in its order; exits naming any unknown one."""
    names = [name for name in text.split(",") if name]
    unknown = sorted(set(names) - set(problems()))
    if unknown:
        raise SystemExit(f"unknown problems: {unknown}; known: {list(problems())}")
    return names
