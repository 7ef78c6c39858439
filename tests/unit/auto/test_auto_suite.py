"""`auto` with its defaults meets issue 14's bars (worst |Δmean|/sd ≤ 0.15, worst |log sd ratio| ≤ 0.25) on the
fast problems of the robustness suite (benchmarks/robustness: closed-form or long-NUTS references, checked there
against quadrature and importance sampling), with fewer target evaluations than the references' NUTS runs
needed for one chain of 1,000 warm-up + 1,000 draws where a NUTS count is stored. The hard problems (funnel,
centred eight schools) are in the benchmark table, where `auto` misses and says so."""

from __future__ import annotations

import pytest

from benchmarks.robustness import problems as suite
from benchmarks.robustness.scoring import LOG_SD_BAR, MEAN_BAR, load_reference, score
from inference_core.training import run

FAST = ["ar2", "rotated_gaussian_20", "ill_gaussian_50", "breast_cancer_logistic", "mixture", "mixture_naive"]


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
