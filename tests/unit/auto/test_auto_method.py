"""`auto` end to end on closed-form posteriors (issue 14's bars: worst |Δmean|/sd ≤ 0.15 and worst |log sd
ratio| ≤ 0.25), its convergence stop, bit-identical resume; the robust start of every particle method; and the
quality block flagging a deliberately collapsed run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from inference_core import errors
from inference_core.metrics.next_steps import TRY_AUTO_FOR_PARTICLES
from inference_core.serialization import state_from_bytes, state_to_bytes
from inference_core.spec import validate_job_spec
from inference_core.training import build_method, checkpoint_state, run

MEAN_BAR, SD_BAR = 0.15, 0.25


def rotated_gaussian(d: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    cov = q @ np.diag(np.logspace(-2, 2, d) ** 2) @ q.T
    return rng.standard_normal(d) * 100, cov


def errors_against(x: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> tuple[float, float]:
    return (float(np.abs((x.mean(0) - mean) / sd).max()),
            float(np.abs(np.log(x.std(0, ddof=1) / sd)).max()))


def test_auto_meets_the_bars_on_a_badly_scaled_rotated_gaussian_and_stops_early() -> None:
    mean, cov = rotated_gaussian(20)
    result = run({"method": "auto", "seed": 0, "num_particles": 100, "steps": 2000,
                  "target": {"kind": "gaussian", "mean": mean.tolist(), "cov": cov.tolist()}})
    mean_error, sd_error = errors_against(result.particles.double().numpy(), mean, np.sqrt(np.diag(cov)))
    assert mean_error <= MEAN_BAR and sd_error <= SD_BAR, (mean_error, sd_error)
    assert result.steps_completed < 2000 and result.final_metrics["converged_step"] == result.steps_completed
    assert result.quality["trustworthy"], result.quality
    assert result.final_metrics["grad_evals"] >= 100 * result.steps_completed + result.quality["pathfinder_grad_evals"]


def test_auto_meets_the_bars_on_a_bounded_skewed_target() -> None:
    """Gamma(2, 1) in x[0] (log p = log x − x, −inf NaN-free region x ≤ 0 excluded by NaN) times N(0, 3²):
    mean (2, 0), sd (√2, 3); starting particles on the wrong side of the boundary are redrawn."""
    result = run({"method": "auto", "seed": 1, "num_particles": 100, "steps": 1000,
                  "target": {"kind": "expression", "dim": 2, "log_prob": "log(x[0]) - x[0] - x[1]**2 / 18"}})
    mean_error, sd_error = errors_against(result.particles.double().numpy(), np.array([2.0, 0.0]),
                                          np.array([math.sqrt(2), 3.0]))
    assert mean_error <= MEAN_BAR and sd_error <= SD_BAR, (mean_error, sd_error)
    assert result.quality["redrawn_starts"] > 0


FLOW = {"transport": "flow", "flow": {"steps": 30, "batch": 16}}


@pytest.mark.parametrize("options", [{"transport": "linear"}, FLOW, {**FLOW, "engine": "nuts", "chains": {
    "warmup_steps": 20, "check_every": 5, "rhat_below": 1.0001}}, {**FLOW, "engine": "mala", "mala": {
        "chains": 30, "warmup_steps": 20, "check_every": 5, "ess_per_particle": 100}}])
def test_auto_resumes_bit_identically(options: dict) -> None:
    """Through the linear whitening (this banana's Pathfinder paths end far enough apart for `transport: "auto"`
    to fit the full flow, which the second case covers at a test's size) and with the flow: a resume refits it from
    the seed, then loads the particles and whitening, or with
    `engine: "nuts"` or `"mala"` the chains, resumed after their warm-up, through the checkpoint's bytes. `grad_evals` counts
    the evaluations before the checkpoint, and the set-up (Pathfinder, the flow's fit) that the resume redid."""
    spec = {"method": "auto", "seed": 2, "num_particles": 20, "steps": 60,
            "target": {"kind": "banana", "curvature": 0.5},
            "options": {"convergence": {"min_steps": 1000}, **options}}
    straight = run(spec)
    first, counter = build_method(validate_job_spec({**spec, "steps": 30}), counted=True)
    set_up = counter.count
    for _ in range(30):
        first.step()
    checkpoint = state_from_bytes(state_to_bytes(checkpoint_state(first, counter.count)))
    resumed = run(spec, resume_state=checkpoint)
    assert torch.equal(straight.particles, resumed.particles)
    assert straight.steps_completed == resumed.steps_completed == 60
    redone = resumed.final_metrics["grad_evals"] - straight.final_metrics["grad_evals"] - set_up
    # NUTS's load also sets its kernels up again (Pyro's step-size search: a few evaluations a chain)
    assert set_up > 0 and (0 <= redone < 100 if options.get("engine") == "nuts" else redone == 0), redone


def test_convergence_checks_compare_step_t_with_t_over_2_at_25_and_75_times_powers_of_two() -> None:
    """Checks at 25·2^k and 75·2^k; each drift is the largest moment change since the check at t/2 (recomputed
    here from the stored moments); the stored moments survive the checkpoint round trip."""
    from inference_core.serialization import state_from_bytes, state_to_bytes

    method = build_method(validate_job_spec({
        "method": "auto", "seed": 0, "num_particles": 30, "steps": 300,
        "target": {"kind": "gaussian", "mean": [1.0, -2.0], "cov": [[1.0, 0.5], [0.5, 2.0]]},
        "options": {"convergence": {"min_steps": 10_000}}}))
    seen = [step for step in range(1, 301) if "moment_drift" in method.step()]
    assert seen == [25, 50, 75, 100, 150, 200, 300]
    now, earlier = method.checked[300], method.checked[150]
    expected = max(((now[0] - earlier[0]) / now[1].exp()).abs().max(), (now[1] - earlier[1]).abs().max())
    assert method.last_drift == pytest.approx(float(expected), rel=1e-12)
    restored = state_from_bytes(state_to_bytes(method.state_dict()))["checked"]
    assert sorted(restored) == seen and all(torch.equal(restored[k], method.checked[k]) for k in seen)


def test_particle_methods_redraw_nonfinite_starts_and_fail_only_without_any() -> None:
    spec = {"method": "svgd", "seed": 0, "num_particles": 40, "steps": 5,
            "target": {"kind": "expression", "dim": 2, "log_prob": "log(x[0]) - x[0] - 0.5 * x[1]**2"}}
    method = build_method(validate_job_spec(spec))  # about half of N(0, 1) starts have x[0] ≤ 0
    assert bool((method.particles()[:, 0] > 0).all())
    nowhere = {**spec, "target": {"kind": "expression", "dim": 3, "log_prob": "x[0] + x[2] + sqrt(-1 - x[1]**2)"}}
    with pytest.raises(errors.TargetNonFinite, match=r"log-density is nan and the score is non-finite in coordinates \[1\]"):
        build_method(validate_job_spec(nowhere))


def test_a_collapsed_run_is_flagged_and_a_good_one_is_not() -> None:
    d = 50
    gaussian = {"kind": "gaussian", "mean": [0.0] * d, "cov": np.eye(d).tolist()}
    collapsed = run({"method": "svgd", "seed": 0, "num_particles": 50, "steps": 300, "target": gaussian})
    assert not collapsed.quality["trustworthy"]
    assert [w["code"] for w in collapsed.quality["warnings"]] == ["collapsed", "ksd_rejects"]
    true_ratio = float(collapsed.particles.double().std(0).square().mean().sqrt())  # N(0, I): sd ratio = sd
    assert abs(collapsed.quality["spread_ratio_rms"] - true_ratio) < 0.1 * true_ratio
    good = run({"method": "svgd", "seed": 0, "num_particles": 100, "steps": 300,
                "target": {"kind": "gaussian", "mean": [0.0, 0.0], "cov": [[1.0, 0.3], [0.3, 2.0]]}})
    assert good.quality["trustworthy"], good.quality
    assert good.quality["ksd_test_pvalue"] > 0.05
    # the shape shared with sampler certificates (issue 16)
    assert collapsed.quality["verdict"] == "unreliable" and "spread less" in collapsed.quality["reason"]
    assert "nan" not in collapsed.quality["reason"]  # 50 draws in d = 50: no per-direction ratio to quote
    assert good.quality["verdict"] == "good" and good.quality["ksd"]["pvalue"] == good.quality["ksd_test_pvalue"]
    assert good.quality["ksd"]["level"] == 0.001
    assert good.quality["reference"] == {key: good.final_metrics[key] for key in
                                         ("mean_error", "cov_error_rel", "mmd2_reference")}
    # what the collapsed job tells the user to do works: `auto` on the same target and particle count
    assert collapsed.quality["next_steps"] == [TRY_AUTO_FOR_PARTICLES] and good.quality["next_steps"] == []
    followed = run({"method": "auto", "seed": 0, "num_particles": 50, "target": gaussian})
    assert followed.quality["trustworthy"] and followed.quality["next_steps"] == [], followed.quality
    assert abs(float(followed.particles.double().std(0).log().mean())) < 0.1  # N(0, I): log sd 0


def test_a_naively_written_mixture_starts_and_fits_in_float32() -> None:
    """log(w·e^a + (1 − w)·e^b) with a, b sums over 200 points (≈ −10³ at the start): exp underflows in
    float32, so before the compiler's log-sum-exp rewrite this failed with target_nonfinite. The component
    means are fixed at ∓2, the unknowns are θ = (logit w, log σ); the posterior mean of w is near the truth."""
    rng = np.random.default_rng(0)
    y = np.where(rng.random(200) < 0.3, rng.normal(-2.0, 0.5, 200), rng.normal(2.0, 0.5, 200))
    log_prob = ("log_normal(x[0], 0, 2) + log_normal(x[1], 0, 2) + sum(log(sigmoid(x[0]) * "
                "exp(log_normal(y, -2, exp(x[1]))) + (1 - sigmoid(x[0])) * exp(log_normal(y, 2, exp(x[1])))))")
    target = {"kind": "expression", "dim": 2, "params": {"y": y.tolist()}, "log_prob": log_prob}
    for method, options in (("svgd", {}), ("auto", {"dtype": "float32"})):
        result = run({"method": method, "seed": 0, "num_particles": 50, "steps": 300, "target": target,
                      "options": options})
        w = torch.sigmoid(result.particles.double()[:, 0])
        assert abs(float(w.mean()) - 0.3) < 0.1, (method, float(w.mean()))
        sigma = torch.exp(result.particles.double()[:, 1])
        assert abs(float(sigma.mean()) - 0.5) < 0.1, (method, float(sigma.mean()))


def test_auto_refuses_targets_too_large_for_dense_whitening() -> None:
    d = 2001
    spec = {"method": "auto", "num_particles": 4, "steps": 1,
            "target": {"kind": "expression", "dim": d, "log_prob": "-0.5 * sum(x**2)"}}
    with pytest.raises(errors.MethodUnsupportedForTarget, match="up to 2000"):
        build_method(validate_job_spec(spec))


@pytest.mark.parametrize("spec", [
    {"kind": "gaussian", "mean": [1.0, -1.0], "cov": [[2.0, 0.3], [0.3, 0.5]]},  # analytic score
    {"kind": "expression", "dim": 2, "log_prob": "log(x[0]) - x[0] - x[1]**2 / 18"},  # autograd score
])
def test_log_prob_and_score_equal_the_two_calls(spec: dict) -> None:
    """`auto` reads log p from the score's pass (to send particles back into the support): it must be the
    target's own log p and score, NaN outside the support included."""
    from inference_core.targets import BuildContext, build_target

    target = build_target(spec, BuildContext(dtype=torch.float64))
    x = torch.tensor([[0.7, 0.2], [2.0, -1.0], [-0.5, 0.3]], dtype=torch.float64)
    log_p, score = target.log_prob_and_score(x)
    torch.testing.assert_close(log_p, target.log_prob(x), equal_nan=True)
    torch.testing.assert_close(score, target.score(x), equal_nan=True)


def two_far_modes(d: int = 4) -> dict:
    """Two unit Gaussians at x₀ = ±6, equal masses: 12 sds apart, farther than `flow_above`."""
    return {"kind": "gaussian_mixture", "weights": [1, 1], "covs": [np.eye(d).tolist()] * 2,
            "means": [[-6.0] + [0.0] * (d - 1), [6.0] + [0.0] * (d - 1)]}


def test_two_far_modes_keep_the_linear_whitening_and_their_masses() -> None:
    """Pathfinder's paths settle in both modes, 12 sds apart: `auto` starts the particles in their masses and
    re-whitens by the modes' pooled spread, not the flow (which put every particle in one mode, below). Measured on
    seeds 0-3: 0.02-0.03 / 0.02-0.07, shares 0.5 / 0.5."""
    result = run({"method": "auto", "seed": 0, "steps": 3000, "target": two_far_modes()})
    mean_error, sd_error = errors_against(result.particles.double().numpy(), np.zeros(4),
                                          np.array([math.sqrt(37.0), 1.0, 1.0, 1.0]))
    assert mean_error <= MEAN_BAR and sd_error <= SD_BAR, (mean_error, sd_error)
    quality = result.quality
    assert quality["transport"] == "linear" and len(quality["mode_weights"]) == 2, quality
    np.testing.assert_allclose(quality["mode_shares"], [0.5, 0.5], atol=0.05)
    assert quality["verdict"] == "good", quality


def test_the_default_probes_find_a_mode_10_sds_from_the_one_every_start_reached() -> None:
    """Two unit Gaussians 10 apart (d = 4, w = 0.5, one at the origin): on seed 0 every start's path settles at the
    origin's mode, and with 16 probes none reached the other either (0.98 sds off in a mean, called `good`; seeds
    0-15 missed on seed 0 only). With the default 32 one does, and the particles split between the modes."""
    d = 4
    target = {"kind": "gaussian_mixture", "weights": [1, 1], "covs": [np.eye(d).tolist()] * 2,
              "means": [[0.0] * d, [10.0] + [0.0] * (d - 1)]}
    result = run({"method": "auto", "seed": 0, "steps": 3000, "target": target})
    mean_error, sd_error = errors_against(result.particles.double().numpy(), np.array([5.0, 0, 0, 0]),
                                          np.array([math.sqrt(26.0), 1.0, 1.0, 1.0]))
    assert mean_error <= MEAN_BAR and sd_error <= SD_BAR, (mean_error, sd_error)
    quality = result.quality
    assert quality["probed_modes"] == 1 and len(quality["mode_weights"]) == 2, quality


def test_two_modes_that_the_particles_do_not_bridge_are_flagged() -> None:
    """The same two modes through the flow (forced): reverse KL fits one of them, SVGD's particles all stay there,
    so half the mass is missing: the job must say `starts_disagree` and `unreliable`, not `good`. (Measured on
    seeds 0-3 with the default flow: the same.)"""
    result = run({"method": "auto", "seed": 0, "steps": 300, "target": two_far_modes(),
                  "options": {"transport": "flow", "flow": {"steps": 200, "batch": 16}}})
    right = float((result.particles.double()[:, 0] > 0).double().mean())
    assert right in (0.0, 1.0), right  # the failure this test is about: one mode only
    quality = result.quality
    assert quality["start_disagreement_sd"] > 10 and quality["transport"] == "flow", quality
    assert quality["start_outside_sd"] > 8, quality  # the other mode's path, 12 sds from the particles
    assert "starts_disagree" in [w["code"] for w in quality["warnings"]]
    assert quality["verdict"] == "unreliable" and not quality["trustworthy"]


def unequal_mixture(d: int = 10, gap: float = 5.0, light: float = 0.3) -> tuple[dict, np.ndarray, np.ndarray]:
    """light·N(m₁, I) + (1 − light)·N(m₂, I), |m₂ − m₁| = gap along a random direction, written as users write
    it; its mean and marginal sds in closed form."""
    rng = np.random.default_rng(0)
    direction = rng.standard_normal(d)
    direction /= np.linalg.norm(direction)
    m1 = rng.standard_normal(d)
    m2 = m1 + gap * direction
    target = {"kind": "expression", "dim": d, "params": {"m1": m1.tolist(), "m2": m2.tolist()},
              "log_prob": f"logaddexp(log({light}) + sum(log_normal(x, m1, 1)), "
                          f"log({1 - light}) + sum(log_normal(x, m2, 1)))"}
    cov = np.eye(d) + light * (1 - light) * gap ** 2 * np.outer(direction, direction)
    return target, light * m1 + (1 - light) * m2, np.sqrt(np.diag(cov))


@pytest.mark.parametrize("seed", [0, 1])
def test_separated_modes_get_their_share_of_the_particles(seed: int) -> None:
    """Two modes 5 sds apart with masses 0.3 / 0.7 (d = 10). Pathfinder's paths settle in both; SVGD cannot move
    mass between them, so the share each mode starts with is what it keeps. Started all at the best path's
    Gaussian, 98 % of the particles ended in the heavier mode (both seeds), the means 0.5 sds off, and every
    check said `good`; started in the modes' ELBO masses (`modes.py`), the run meets the bars."""
    target, mean, sd = unequal_mixture()
    result = run({"method": "auto", "seed": seed, "steps": 3000, "target": target})
    mean_error, sd_error = errors_against(result.particles.double().numpy(), mean, sd)
    assert mean_error <= MEAN_BAR and sd_error <= SD_BAR, (mean_error, sd_error)
    quality = result.quality
    np.testing.assert_allclose(sorted(quality["mode_weights"]), [0.3, 0.7], atol=0.05)  # the ELBOs' masses
    np.testing.assert_allclose(quality["mode_shares"], quality["mode_weights"], atol=0.1)
    assert quality["verdict"] == "good", quality


def test_particles_split_unlike_the_modes_masses_are_flagged() -> None:
    """The failure above, made on purpose: every particle moved into the heavier mode. The Stein ratio and the KSD
    test cannot see mode weights; `mode_weights` must, and the job must not be called `good`."""
    from inference_core.metrics.quality import quality_report

    target, _, _ = unequal_mixture()
    result = run({"method": "auto", "seed": 0, "steps": 3000, "target": target})
    method = result.method
    heavier = int(np.argmax(result.quality["mode_weights"]))
    gaussian = method.modes.gaussians[heavier]
    x = gaussian.mean + torch.randn(method.u.shape[0], 10, dtype=torch.float64,
                                    generator=torch.Generator().manual_seed(0)) @ gaussian.root.T
    view = method.view
    with torch.no_grad():  # into the coordinates the particles move in
        method.u.copy_(torch.linalg.solve(view.root.double(), (x - view.shift.double()).T).T.to(method.u))
    quality = quality_report(method, result.final_metrics)
    assert "mode_weights" in [w["code"] for w in quality["warnings"]], quality
    assert quality["mode_shares"][heavier] > 0.95  # (Gaussian draws of one mode nearer the other: a few)
    assert quality["verdict"] == "unreliable" and not quality["trustworthy"]


@pytest.mark.parametrize(("engine", "ensemble"), [("auto", 200), ("svgd", 500)])
def test_a_100_dimensional_posterior_gets_more_particles_than_dimensions(engine: str, ensemble: int) -> None:
    """100 particles span at most 99 directions of a 100-d posterior: on this rotated Gaussian (condition number
    1e4) their sds ended 0.19 too narrow on average (log units; seeds 0-1) and 0.26-0.31 on the worst coordinate.
    Below 1.25 particles per dimension `auto` runs 200 MALA chains and herds 100 of their draws; SVGD, where asked
    for, moves `oversample` × as many particles and herds the 100 back: 0.06-0.07 on average, within the bars."""
    rng = np.random.default_rng(0)
    rotation, _ = np.linalg.qr(rng.standard_normal((100, 100)))
    cov, mean = rotation @ np.diag(np.logspace(0, -4, 100)) @ rotation.T, rng.uniform(-3, 3, 100)
    result = run({"method": "auto", "seed": 0, "steps": 3000, "options": {"engine": engine},
                  "target": {"kind": "gaussian", "mean": mean.tolist(), "cov": cov.tolist()}})
    assert result.quality["engine"] == ("mala" if engine == "auto" else engine)
    assert result.quality["ensemble_size"] == ensemble and result.particles.shape == (100, 100)
    sd = np.sqrt(np.diag(cov))
    mean_error, sd_error = errors_against(result.particles.double().numpy(), mean, sd)
    assert mean_error <= MEAN_BAR and sd_error <= SD_BAR, (mean_error, sd_error)
    collapse = float(np.log(result.particles.double().numpy().std(0, ddof=1) / sd).mean())
    assert collapse > -0.1, collapse


@pytest.mark.xfail(strict=False, reason=(
    "issue 41, a silent miss still open: on the CPU of 2026-11-29 08:30 UTC (AMD EPYC, numpy 2.4.6, scipy 1.17.1) "
    "`oversample: 1` on non-centred eight schools seed 1 left log τ's sd 0.39 off (bars 0.25) and was called `good` "
    "(spread ratio rms 0.95, KSD p = 1.0, no stranded draws); the default (oversampling) run is within the bars there"))
def test_100_particles_on_a_hierarchical_scale_are_within_the_bars_or_not_good() -> None:
    """`auto` made to keep 100 particles (`oversample: 1`) on non-centred eight schools, seed 1: within the bars, or
    its verdict is not `good` (never a silent miss). Held on two CPUs (log τ's sd 0.29 off and `unreliable`, 0.23
    and within); not on a third (the xfail's reason)."""
    from benchmarks.robustness import problems as suite
    from benchmarks.robustness.scoring import load_reference, score

    problem, reference = suite.problems()["eight_schools_noncentered"], load_reference("eight_schools_noncentered")
    result = run({"method": "auto", "seed": 1, "steps": 3000, "target": problem.target_spec(),
                  "options": {"oversample": 1}})
    scores = score(result.particles.double().numpy(), reference["mean"], reference["sd"])
    assert scores["pass"] or result.quality["verdict"] != "good", scores


def test_oversampling_fixes_a_hierarchical_scale_that_100_particles_leave_biased() -> None:
    """Non-centred eight schools, seed 1 (the suite's NUTS reference): with 100 particles SVGD's fixed point leaves
    log τ's sd too wide (log units: 0.29 on one CPU; 0.23 on another, whose BLAS rounds differently: just inside the
    bars and called `unreliable`); Pathfinder's paths disagree by 3.05 of its sds (> oversample_above), so `auto`
    moves 300 and returns the herded 100, within the bars with log τ's error at least halved. Evaluations count all
    300; a target whose paths agree (the rotated Gaussian) keeps its 100."""
    from benchmarks.robustness import problems as suite
    from benchmarks.robustness.scoring import load_reference, score

    problem, reference = suite.problems()["eight_schools_noncentered"], load_reference("eight_schools_noncentered")
    scores, results = {}, {}
    for oversample in (1, 3):
        result = run({"method": "auto", "seed": 1, "steps": 3000, "target": problem.target_spec(),
                      "options": {"oversample": oversample}})
        assert result.particles.shape == (100, 10)
        results[oversample] = result
        scores[oversample] = score(result.particles.double().numpy(), reference["mean"], reference["sd"])
    assert scores[1]["worst_sd_param"] == "1", scores[1]  # x[1] = log τ: what 100 particles get wrong
    assert scores[3]["pass"], scores[3]
    assert scores[3]["log_sd_error"] < 0.5 * scores[1]["log_sd_error"], (scores[1], scores[3])
    quality = results[3].quality
    assert quality["ensemble_size"] == 300 and results[1].quality["ensemble_size"] == 100
    # the paths' chosen means spread over more than a posterior sd (a skewed log τ), yet each lies within the
    # particles' mass: one mode, so no `starts_disagree` (the spread among the paths was the rule before)
    assert quality["start_disagreement_sd"] > 1.0 and quality["start_outside_sd"] < 4.0, quality
    assert "starts_disagree" not in [w["code"] for w in quality["warnings"]]
    steps = results[3].steps_completed
    assert results[3].final_metrics["grad_evals"] >= 300 * steps > 100 * steps
    mean, cov = rotated_gaussian(6)
    easy = build_method(validate_job_spec({"method": "auto", "seed": 0, "steps": 1, "target": {
        "kind": "gaussian", "mean": mean.tolist(), "cov": cov.tolist()}}))
    assert easy.ensemble_size == 100


def test_a_gaussian_that_misses_a_tail_oversamples_where_the_paths_agree() -> None:
    """Non-centred eight schools, seed 7: Pathfinder's paths agree but its Gaussian misses log τ's tail (k̂ 0.96 >
    `oversample_khat_above` 0.7), so `auto` moves `oversample` × 100 particles and herds 100 back. With 300 (the
    default until 2026-11-28) the 100 met the bars in log τ but not in τ itself (its sd 0.47 too wide in log units,
    called `good`: issue 41's silent miss); with 500 they meet them in both parameterisations, the model's own
    (μ, τ, θ = μ + τη) included."""
    from benchmarks.robustness import problems as suite
    from benchmarks.robustness.scoring import score_problem

    problem = suite.problems()["eight_schools_noncentered"]
    scores = {}
    for oversample in (3, 5):
        result = run({"method": "auto", "seed": 7, "steps": 3000, "target": problem.target_spec(),
                      "options": {"oversample": oversample}})
        quality = result.quality
        assert quality["start_disagreement_sd"] < 0.5 and 0.7 < quality["pathfinder_khat"] < 1.0, quality
        assert quality["ensemble_size"] == 100 * oversample and quality["transport"] == "linear", quality
        assert quality["converged_step"] and quality["verdict"] == "good", quality
        scores[oversample] = score_problem(problem, result.particles.double().numpy())
    assert scores[3]["sampler"]["pass"] and not scores[3]["model"]["pass"], scores[3]
    assert scores[3]["model"]["worst_sd_param"] == "tau" and scores[3]["model"]["log_sd_error"] > 0.35, scores[3]
    assert scores[5]["pass"], scores[5]


def test_a_run_stopped_early_on_eight_schools_is_flagged_and_a_converged_one_is_not() -> None:
    """Issue 41: every miss in either parameterisation is flagged. Non-centred eight schools, seed 2, capped at 50
    steps (before the moments settle): τ's sd misses the bar in the model's own parameters (0.32 in log units,
    measured) and the job says `not_converged`, `unreliable`; with the defaults the run converges, meets the bars
    in both parameterisations and is called `good`."""
    from benchmarks.robustness import problems as suite
    from benchmarks.robustness.scoring import score_problem

    problem = suite.problems()["eight_schools_noncentered"]
    early = run({"method": "auto", "seed": 2, "steps": 50, "target": problem.target_spec()})
    scored = score_problem(problem, early.particles.double().numpy())
    assert not scored["model"]["pass"], scored
    assert early.quality["verdict"] == "unreliable", early.quality
    assert "not_converged" in [w["code"] for w in early.quality["warnings"]], early.quality
    done = run({"method": "auto", "seed": 2, "steps": 3000, "target": problem.target_spec()})
    assert done.quality["converged_step"] and done.quality["verdict"] == "good", done.quality
    assert score_problem(problem, done.particles.double().numpy())["pass"]


def test_auto_takes_a_subsampled_median_for_a_large_ensemble() -> None:
    """An ensemble is `oversample` × num_particles: beyond 4,096 particles the exact median (n² distances,
    refused beyond 11,585) gives way to one over a fixed subset of 2,048, within a few % of it here (numpy's
    exact median over all distinct pairs as the reference)."""
    from inference_core.methods.auto.method import scaled_median_rule

    small, large = scaled_median_rule(2.0, 300), scaled_median_rule(2.0, 5000)
    assert small.base.method == "exact" and large.base.method == "subsample"
    x = torch.randn(5000, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    rows, cols = np.triu_indices(5000, k=1)
    xn = x.numpy()
    exact = float(np.median(((xn[rows] - xn[cols]) ** 2).sum(-1)))
    assert abs(float(large(x)) / (2.0 * exact) - 1) < 0.05
    assert float(small(x[:300])) > 0
