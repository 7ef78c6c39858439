"""`auto` with its defaults meets issue 14's bars (worst |Δmean|/sd ≤ 0.15, worst |log sd ratio| ≤ 0.25) on the
fast problems of the robustness suite (benchmarks/robustness: closed-form or long-NUTS references, checked there
against quadrature and importance sampling), with fewer target evaluations than the references' NUTS runs
needed for one chain of 1,000 warm-up + 1,000 draws where a NUTS count is stored. The slow ones (the funnel, both
eight schools and the hierarchical logistic regression, whose flow fit or 300 particles take 30-50 s) are in the
benchmark table only."""

from __future__ import annotations

import pytest

from benchmarks.robustness import problems as suite
from benchmarks.robustness.scoring import LOG_SD_BAR, MEAN_BAR, load_reference, score
from inference_core.training import run

FAST = ["ar2", "rotated_gaussian_20", "ill_gaussian_50", "breast_cancer_logistic", "mixture", "mixture_naive",
        "mixture_unequal_10", "rotated_gaussian_100", "regression_noise_31", "student_t_20"]


@pytest.mark.parametrize("name", FAST)
def test_auto_meets_the_bars(name: str) -> None:
    problem = suite.problems()[name]
    reference = load_reference(name)
    result = run({"method": "auto", "seed": 0, "steps": 1000, "target": problem.target_spec()})
    scored = score(result.particles.double().numpy(), reference["mean"], reference["sd"], problem.param_names)
    assert scored["mean_error"] <= MEAN_BAR and scored["log_sd_error"] <= LOG_SD_BAR, scored
    assert result.quality["trustworthy"], result.quality["warnings"]
    if reference.get("kind") == "nuts" and reference.get("source") is None:  # its own NUTS run was counted
        settings = reference["settings"]
        per_transition = reference["grad_evals"] / (settings["options"]["chains"] * settings["steps"])
        one_chain = 2000 * per_transition  # 1,000 warm-up + 1,000 draws at the run's average cost
        assert result.final_metrics["grad_evals"] < one_chain, (result.final_metrics["grad_evals"], one_chain)


#: the suite's problems of dimension ≤ 20 that `gpvi` meets with its defaults (measured on seeds 0-2, worst:
#: eight schools 0.13 / 0.16); the funnel and the centred eight schools it misses, as NUTS does
GPVI_FAST = ["ar2", "rotated_gaussian_20", "eight_schools_noncentered", "diabetes_regression", "mixture_naive"]


@pytest.mark.parametrize("name", GPVI_FAST)
def test_gpvi_defaults_meet_the_bars(name: str) -> None:
    """GPVI with only method and target given: whitened by Pathfinder (with its Newton steps), λ = 1, started at
    the Pathfinder Gaussian; 2000 sampler draws against the reference."""
    problem = suite.problems()[name]
    reference = load_reference(problem.reference_from or name)
    result = run({"method": "gpvi", "seed": 0, "target": problem.target_spec()})
    draws = result.method.sampler().sample(2000, 0).double().numpy()
    scored = score(draws, reference["mean"], reference["sd"], problem.param_names)
    assert scored["mean_error"] <= MEAN_BAR and scored["log_sd_error"] <= LOG_SD_BAR, scored


def test_auto_finds_the_mode_that_no_start_reached() -> None:
    """`mixture_unequal_10`, seed 2: none of Pathfinder's four paths reaches the heavy mode (0.7 of the mass), and
    without the probes `auto` put every particle in the light one, 0.50 sds off in a mean and called `good`. A
    probe finds it (`probed_modes`), the particles start in both modes' masses, and the run meets the bars."""
    problem = suite.problems()["mixture_unequal_10"]
    reference = load_reference("mixture_unequal_10")
    spec = {"method": "auto", "seed": 2, "steps": 1000, "target": problem.target_spec()}
    result = run(spec)
    scored = score(result.particles.double().numpy(), reference["mean"], reference["sd"], problem.param_names)
    assert scored["mean_error"] <= MEAN_BAR and scored["log_sd_error"] <= LOG_SD_BAR, scored
    assert result.quality["probed_modes"] == 1 and sorted(result.quality["mode_weights"])[1] > 0.65, result.quality
    alone = run({**spec, "options": {"pathfinder": {"probes": 0}}})
    assert alone.quality["mode_weights"] == [1.0]  # the failure the probes fix: one mode seen
    missed = score(alone.particles.double().numpy(), reference["mean"], reference["sd"], problem.param_names)
    assert missed["mean_error"] > 0.3, missed
