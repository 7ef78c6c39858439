"""The `quality` block of a finished job (issue 14; the shape the sampler certificates of issue 16 share):
numbers that say whether to trust the result, and `warnings` with stable codes when not.

General to every method whose draws live in the target's space (particles, or a generator's draws):

* Stein spread ratio. For any smooth density p with vanishing tails, integration by parts gives the Stein
  identity E_p[(x_i − m_i) ∂_i log p(x)] = −1 for every coordinate i. Over the draws, r_i² = −mean((x_i − x̄_i)
  s_i(x)) is then ≈ 1 when the draws spread like p; for a Gaussian p and draws N(m, c·Σ_p) it is exactly c, so
  r_i estimates the ratio of the draws' sd to the posterior's. Collapsed particles give r ≪ 1 (issue 14:
  exact-interaction kernel methods keep 0.26 of the spread at d = 32), over-dispersed ones r ≫ 1.
  Computed in the draws' own whitened coordinates (`stein_spread_ratios`), so a warning names "directions".
* The IMQ KSD of the final metrics, when the run computed it, and the KSD goodness-of-fit test of
  `metrics.ksd_test` (Liu, Lee & Jordan 2016; wild bootstrap): its p-value is the reference level for the KSD.

* Stranded draws: a draw far below the others in log-density. For a Gaussian posterior 2(log p(mode) − log p(x))
  is χ²_d, and the best draw is below the mode, so for exact draws Δ_i = max_j log p(x_j) − log p(x_i) exceeds
  half the χ²_d quantile at 1 − STRANDED_LEVEL/n for any of n draws with probability below STRANDED_LEVEL.
  Score-based checks miss such draws: measured on the robustness suite, `svgd` with its defaults left 12 of
  100 particles of the mixture posterior in a minor mode (Δ up to 29 nats against a threshold of 14; the
  spread ratio 1.05 and the KSD p-value 1.0 said nothing), and 3 on the AR(2) posterior; `auto`'s and
  `gpvi`'s fits of the suite reach at most Δ = 17 against 24.

The three checks run where `method.diagnostic_coordinates()` puts the draws (`checked_in`): the target's own
coordinates, or for `auto` those its particles move in (for a generator trained through the flow, the flow's
latent space), the target pulled back through its whitening and flow
(log p_z = log p(T(z)) + log|det ∂T/∂z|, an exact change of variables, so the draws fit p_z exactly when they fit
p). The Stein ratio's rms and the stranded gaps are the same in any affine coordinates (the per-direction ratios
are taken in a rotated basis); through a flow they are not, and
the latent ones are the calibrated ones where the flow makes the posterior near-Gaussian. Measured on the 11 runs
of the funnel (seeds 0-5) and centred eight schools (seeds 0, 1, 3-5) within issue 14's bars: in x 29-90 of 100
draws were "stranded" (Δ up to 67 nats: a funnel's log p falls 4.5 nats per unit of v, so exact draws spread over
~50) and the smallest direction's Stein ratio was 0.0-0.91 (scores ~10⁶ in the neck); in the flow's latent
coordinates 0 stranded (Δ ≤ 11.4) and 0.89-0.94. The miss among those seeds (centred seed 2, 8 sds off, the flow
stuck in the neck) is not stranded there either (Δ 16.3; ratio 0.75, KSD p 0.008): what flags it is `auto`'s
`not_converged` (docs/method-choice.md).

Methods add their own facts and warnings through `method.quality()` (auto: Pathfinder agreement between
starts, spread against the Pathfinder scale, convergence). Jobs on a `bnn` or `function_posterior` target also
get the predictive checks of `metrics.predictive_checks` (`predictive`: the fit against ȳ, the coverage of held-out
data), which are what sees a posterior over network weights. `checks` names the checks that ran.

The shape shared with a sampler's certificate (samplers.certificate.sampler_quality), so clients read one
format: `ksd` {statistic, pvalue, n, level, kernel, bootstrap}, `reference` {mean_error, cov_error_rel,
mmd2_reference} (the final eval metrics against the target's exact moments or draws, where it has them; null
otherwise), `verdict` and `reason`: `unreliable` when a warning is raised, else `good` where at least one check
ran and `unchecked` where none applies (no `good` that nothing vouches for); particles admit no importance
correction, so a job is `usable with correction` only through its sampler's certificate
(`with_sampler_certificate`: a job is never called better than its sampler). `trustworthy` is True only with
`good`.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import torch

from inference_core.metrics.ksd_test import ksd_test
from inference_core.metrics.next_steps import next_steps
from inference_core.metrics.predictive_checks import method_predictive_checks
from inference_core.samplers.certificate import VERDICTS

#: r below this in the root-mean-square over coordinates, or below MIN_RATIO in any coordinate → collapsed.
#: 0.8: sds more than 20 % low (the robustness suite's bar, |log sd ratio| ≤ 0.25, is a ratio of 0.78). It was
#: 0.7, and `svgd` on the non-centred eight schools (r = 0.72, actual sd ratio 0.70) passed as `good`; `auto`'s
#: and `gpvi`'s fits of the suite measure 0.93-0.99.
MEAN_RATIO_LOW = 0.8
MIN_RATIO = 0.5
#: r above this in the root-mean-square → over-dispersed (e.g. particles that never left a wide start).
MEAN_RATIO_HIGH = 1.5
#: level of the KSD goodness-of-fit test below which the job warns (strict: particles are not i.i.d. draws)
KSD_TEST_LEVEL = 0.001
#: wild-bootstrap replicates of the KSD test
KSD_BOOTSTRAP = 1000
#: final metrics that measure the draws against the target's exact facts (metrics.evaluation)
REFERENCE_ERRORS = ("mean_error", "cov_error_rel", "mmd2_reference")
#: a draw is stranded when its log p is below the best draw's by more than half the χ²_d quantile at
#: 1 − STRANDED_LEVEL/n (module docstring)
STRANDED_LEVEL = 1e-3
#: per-direction checks only with at least this many draws per dimension (see `stein_spread_ratios`)
PER_DIRECTION_MIN_DRAWS_PER_DIM = 4


def stein_spread_ratios(x: torch.Tensor, score: torch.Tensor) -> tuple[float, torch.Tensor | None]:
    """(rms, r): rms = sqrt(max(−mean_n tr((x − x̄) sᵀ)/d, 0)), and the per-direction r_i (see the module
    docstring) in coordinates u = L⁻¹(x − x̄) whitened by the draws' own covariance C = L Lᵀ (s_u = Lᵀ s),
    or None with fewer than PER_DIRECTION_MIN_DRAWS_PER_DIM draws per dimension. float64.

    The trace is the same in every linear coordinate system, so the rms needs no whitening. Per direction, raw
    coordinates of a rotated, badly scaled target mix the sample covariance's error with the precision's huge
    entries; whitened, each r_i averages O(1) terms, but the smallest of d of them is noisy unless n ≫ d (for
    100 exact draws: 0.98 at d = 2, 0.90 at d = 10, 0.66 at d = 50)."""
    x, score = x.double(), score.double()
    centred = x - x.mean(0)
    n, d = x.shape
    rms = math.sqrt(max(float(-(centred * score).sum(-1).mean()) / d, 0.0))
    if n < PER_DIRECTION_MIN_DRAWS_PER_DIM * d:
        return rms, None
    chol, info = torch.linalg.cholesky_ex(centred.T @ centred / (n - 1))
    if int(info) != 0:
        return rms, None
    whitened = torch.linalg.solve_triangular(chol, centred.T, upper=False).T
    return rms, (-(whitened * (score @ chol)).mean(0)).clamp_min(0).sqrt()


def chi2_quantile(p: float, d: int) -> float:
    """χ²_d quantile by Wilson & Hilferty (1931): d(1 − 2/(9d) + z√(2/(9d)))³, z the normal quantile; above the
    exact value for small d at these tails (d = 4, p = 1 − 1e-5: 29.7 against 28.5), so the check errs quiet."""
    z = NormalDist().inv_cdf(p)
    return d * (1 - 2 / (9 * d) + z * math.sqrt(2 / (9 * d))) ** 3


def check_stranded(log_p: torch.Tensor, d: int, report: dict[str, Any], warnings: list[dict[str, str]]) -> None:
    """`stranded_draws` (count) and `log_p_gap_max` in the report, and the warning, from the draws' log p
    (module docstring)."""
    log_p = log_p.double()
    if not bool(torch.isfinite(log_p).all()):
        return
    n = log_p.shape[0]
    gap = log_p.max() - log_p
    threshold = 0.5 * chi2_quantile(1 - STRANDED_LEVEL / n, d)
    stranded = int((gap > threshold).sum())
    report["log_p_gap_max"], report["stranded_draws"] = float(gap.max()), stranded
    if stranded:
        warnings.append({"code": "stranded_draws", "message": (
            f"{stranded} of {n} draws lie more than {threshold:.3g} nats below the best draw's log-density (up to "
            f"{float(gap.max()):.3g}): exact draws of a Gaussian posterior do so with probability < "
            f"{STRANDED_LEVEL:g}; they are stuck in a minor mode or a tail the run did not leave")})


def quality_report(method: Any, final_metrics: dict[str, float]) -> dict[str, Any]:
    report: dict[str, Any] = {}
    warnings: list[dict[str, str]] = []
    checks: list[str] = []
    if method.particles_in_target_space and method.target_space_checks:
        x, target, report["checked_in"] = method.diagnostic_coordinates()
        if x.shape[0] >= 2:
            log_p, score = target.log_prob_and_score(x)
            if bool(torch.isfinite(score).all()):
                mean_ratio, ratios = stein_spread_ratios(x, score)
                min_ratio = float(ratios.min()) if ratios is not None else math.nan
                report["spread_ratio_rms"] = mean_ratio
                report["spread_ratio_min"] = min_ratio if ratios is not None else None
                if mean_ratio < MEAN_RATIO_LOW or min_ratio < MIN_RATIO:
                    # per-direction ratios need more draws than dimensions (stein_spread_ratios)
                    smallest = f", smallest direction {min_ratio:.2f}" if ratios is not None else ""
                    warnings.append({"code": "collapsed", "message": (
                        f"the draws spread less than the target's score implies (Stein ratio rms {mean_ratio:.2f}"
                        f"{smallest}; 1 when the spread is right): standard deviations are likely underestimated")})
                if mean_ratio > MEAN_RATIO_HIGH:  # both can hold: too wide overall, collapsed in some direction
                    warnings.append({"code": "overdispersed", "message": (
                        f"the draws spread more than the target's score implies (Stein ratio rms "
                        f"{mean_ratio:.2f}): the run may not have converged")})
            else:
                warnings.append({"code": "score_nonfinite", "message": "the score is not finite at some final draws"})
    if "ksd_imq" in final_metrics and math.isfinite(final_metrics["ksd_imq"]):
        report["ksd_imq"] = final_metrics["ksd_imq"]
    report["ksd"] = None
    if "spread_ratio_rms" in report:
        test = ksd_test(x, score, bootstrap=KSD_BOOTSTRAP)
        report["ksd_test_statistic"], report["ksd_test_pvalue"] = test["ksd2"], test["pvalue"]
        report["ksd"] = {"statistic": test["ksd2"], "pvalue": test["pvalue"], "n": int(test["n"]),
                         "level": KSD_TEST_LEVEL, "kernel": "imq", "bootstrap": KSD_BOOTSTRAP}
        if test["pvalue"] < KSD_TEST_LEVEL:
            warnings.append({"code": "ksd_rejects", "message": (
                f"a KSD goodness-of-fit test tells the draws from the target (p = {test['pvalue']:.3g} < "
                f"{KSD_TEST_LEVEL}, {int(test['n'])} draws, IMQ kernel, wild bootstrap)")})
    if "spread_ratio_rms" in report:
        check_stranded(log_p, int(x.shape[1]), report, warnings)
        checks += ["spread_ratio", "ksd_test", "stranded_draws"]
    extra = dict(method.quality())
    warnings.extend(extra.pop("warnings", []))
    checks += extra.pop("checks", [])
    report.update(extra)
    predictive = method_predictive_checks(method)
    report["predictive"] = None
    if predictive is not None:
        report["predictive"], found = predictive
        warnings.extend(found)
        checks.append("predictive")
    errors = {key: final_metrics[key] for key in REFERENCE_ERRORS
              if key in final_metrics and math.isfinite(final_metrics[key])}
    report["reference"] = errors or None
    report["checks"] = checks
    return _with_verdict(report, warnings, next_steps(method, (w["code"] for w in warnings)))


def _with_verdict(report: dict[str, Any], warnings: list[dict[str, str]], steps: list[str]) -> dict[str, Any]:
    """`warnings`, `next_steps`, `verdict` and `reason`: `unreliable` with a warning, else `good` only where
    some check ran (`checks`), else `unchecked`; `trustworthy` only when `good`."""
    report["warnings"] = warnings
    report["next_steps"] = steps
    if warnings:
        report["verdict"], report["reason"] = "unreliable", "; ".join(w["message"] for w in warnings)
    elif report.get("checks"):
        report["verdict"], report["reason"] = "good", f"no warning raised by the checks run ({', '.join(report['checks'])})"
    else:
        report["verdict"] = "unchecked"
        report["reason"] = "no check applies to this method's result on this target, so nothing vouches for it"
    report["trustworthy"] = report["verdict"] == "good"
    return report


def with_sampler_certificate(report: dict[str, Any], certificate: dict[str, Any] | None,
                             method: Any) -> dict[str, Any]:
    """The job's `quality` block of a generative method, told what its sampler's certificate found
    (samplers.certificate.sampler_quality): `sampler_verdict`, the warning `sampler_unreliable` where the
    certificate calls the sampler unreliable, with `method`'s next step for it (next_steps), and a verdict never
    better than the certificate's (samplers.certificate.VERDICTS, best first; a certificate that could not be
    computed counts as `unchecked`). The job's own checks look at its last training batch of ~100 draws;
    the certificate at 2,000 fresh draws with importance weights, and sees what they miss: GPVI stuck in centred
    eight schools' neck, 11.8 sds off, passed the job's checks once (KSD p 0.002 at the 0.001 level) while the
    certificate's k̂ rejected it (docs/method-choice.md). A new dict; `report` is left as it was."""
    if not certificate:
        return report
    sampler_verdict = certificate.get("verdict") or "unchecked"
    merged = {**report, "sampler_verdict": sampler_verdict}
    warnings = list(report.get("warnings") or [])
    steps = list(report.get("next_steps") or [])
    if sampler_verdict == "unreliable":
        warnings.append({"code": "sampler_unreliable", "message": (
            f"the sampler's certificate (2,000 fresh draws) calls it unreliable: {certificate.get('reason', '')}")})
        steps += [step for step in next_steps(method, ["sampler_unreliable"]) if step not in steps]
    merged = _with_verdict(merged, warnings, steps)
    if VERDICTS.index(sampler_verdict) > VERDICTS.index(merged["verdict"]):
        merged["verdict"] = sampler_verdict
        merged["reason"] = (f"the sampler's certificate says {sampler_verdict!r} "
                            f"({certificate.get('reason') or 'no reason given'}), and a job is never called better "
                            f"than its sampler; the job's own checks: {merged['reason']}")
        merged["trustworthy"] = False
    return merged
