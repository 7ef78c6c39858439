"""`auto`'s MALA engine (inference_core/methods/auto/mala.py): the chains leave a non-Gaussian target invariant
(closed-form moments), the importance-resampled start corrects a proposal that misses the target, the step size
adapts to MALA's optimal acceptance, the stopping rule, stuck chains, and resume through the checkpoint's bytes."""

from __future__ import annotations

import math

import pytest
import torch

from inference_core.methods.auto.mala import WEIGHTS_GAP_WARN, LatentMALA, check_due, ess_wanted
from inference_core.methods.baselines.mcmc import chain_diagnostics
from inference_core.schemas.auto import MALAOptions
from inference_core.serialization import state_from_bytes, state_to_bytes
from inference_core.targets import build_target
from inference_core.targets.base import BuildContext

#: x₀ ~ Gamma(3, 1) through its log (z₀ = log x₀: density ∝ exp(3 z₀ − e^{z₀})), z₁ | z₀ ~ N(z₀ + 1, 0.5²):
#: skewed, correlated, and 1.5-2.4 sds off N(0, I) in mean
SKEWED = "3 * x[0] - exp(x[0]) + log_normal(x[1], x[0] + 1, 0.5)"


def skewed_moments() -> tuple[torch.Tensor, torch.Tensor]:
    """Closed form: E log Gamma(3) = ψ(3), Var = ψ'(3); z₁ = z₀ + 1 + 0.5 ε."""
    mean0, var0 = torch.special.digamma(torch.tensor(3.0, dtype=torch.float64)), math.pi**2 / 6 - 1 - 1 / 4
    return (torch.stack([mean0, mean0 + 1]),
            torch.tensor([math.sqrt(var0), math.sqrt(var0 + 0.25)], dtype=torch.float64))


def skewed_target():  # noqa: ANN201
    return build_target({"kind": "expression", "dim": 2, "log_prob": SKEWED}, BuildContext(dtype=torch.float64))


def run_chains(options: MALAOptions, steps: int, seed: int = 0) -> LatentMALA:
    chains = LatentMALA(skewed_target(), options, 100, seed, torch.device("cpu"), torch.float64)
    for _ in range(steps):
        chains.step()
    return chains


def test_the_chains_draw_the_target_and_the_step_adapts_to_the_optimal_acceptance() -> None:
    """400 chains, 100 warm-up and 300 kept transitions: the pooled draws' means and sds within 0.05 sds / 0.05 in
    log units of the closed form (their Monte Carlo error is about 0.01), acceptance near 0.574, one evaluation a
    chain a transition after the proposals' and the starts'."""
    options = MALAOptions(chains=400, warmup_steps=100, ess_per_particle=100)
    chains = run_chains(options, 400)
    draws = chains.stored_draws().reshape(-1, 2)
    mean, sd = skewed_moments()
    assert ((draws.mean(0) - mean) / sd).abs().max() < 0.05, draws.mean(0)
    assert (draws.std(0) / sd).log().abs().max() < 0.05, draws.std(0)
    assert abs(chains.accept_rate - 0.574) < 0.1, chains.accept_rate
    assert chains.grad_evals == options.proposals + 400 + 400 * 400
    assert chains.quality()["kept_per_chain"] == 300


def test_the_resampled_start_is_closer_to_the_target_than_the_proposal() -> None:
    """Before any transition the starts (PSIS-resampled from N(0, I)) already carry the target's mean, which N(0, I)
    misses by 1-2 sds; k̂ is reported."""
    chains = LatentMALA(skewed_target(), MALAOptions(chains=2000, proposals=20_000), 100, 0, torch.device("cpu"),
                        torch.float64)
    mean, sd = skewed_moments()
    assert (mean / sd).abs().min() > 0.5  # N(0, I)'s mean is far off
    assert ((chains.position.mean(0) - mean) / sd).abs().max() < 0.1, chains.position.mean(0)
    assert 0 < chains.quality()["start_khat"] < 1  # 0.70: N(0, I) misses a tail, but the weights have a mean


def test_the_run_stops_at_the_first_check_with_enough_ess_and_herds_num_particles_draws() -> None:
    """Converged at the first check (every 10 kept transitions) where the kept draws' bulk ESS reaches 10 × 100; at
    the check before it had not; split R-hat is reported, not required."""
    options = MALAOptions(warmup_steps=50, check_every=10)
    chains = LatentMALA(skewed_target(), options, 100, 0, torch.device("cpu"), torch.float64)
    while chains.converged_step is None and chains.step_count < 2000:  # as the run loop does
        chains.step()
    assert chains.converged_step == chains.step_count
    quality = chains.quality()
    assert quality["ess_bulk_min"] >= 1000 and quality["rhat_max"] > 1.0
    assert chains.converged_step == 50 + quality["kept_per_chain"] and quality["kept_per_chain"] % 10 == 0
    earlier = chain_diagnostics(chains.stored_draws()[:, :-10])
    assert earlier["ess_bulk_min"] < 1000, earlier
    assert chains.particles().shape == (100, 2)


@pytest.mark.parametrize("at", [30, 80])  # during the warm-up and after it
def test_resume_through_the_checkpoints_bytes_is_bit_identical(at: int) -> None:
    options = MALAOptions(chains=20, warmup_steps=50, ess_per_particle=100)
    straight = run_chains(options, 120)
    first = run_chains(options, at)
    resumed = LatentMALA(skewed_target(), options, 100, 0, torch.device("cpu"), torch.float64)
    resumed.load_state_dict(state_from_bytes(state_to_bytes(first.state_dict())))
    for _ in range(120 - at):
        resumed.step()
    assert torch.equal(straight.stored_draws(), resumed.stored_draws())
    assert straight.grad_evals == resumed.grad_evals and straight.log_step == resumed.log_step


def test_a_chain_parked_in_a_funnels_neck_is_reported_stuck() -> None:
    """Neal's funnel in 2-D (v ~ N(0, 3²), x | v ~ N(0, e^v)): one chain put at v = −14 after the warm-up, where
    x's sd is e^−7 ≈ 10⁻³ and the bulk's step (≈ 1) is rejected, accepts (almost) nothing; the others move."""
    funnel = build_target({"kind": "expression", "dim": 2,
                           "log_prob": "log_normal(x[0], 0, 3) + log_normal(x[1], 0, exp(x[0] / 2))"},
                          BuildContext(dtype=torch.float64))
    chains = LatentMALA(funnel, MALAOptions(chains=50, warmup_steps=50), 100, 0, torch.device("cpu"), torch.float64)
    for _ in range(50):
        chains.step()
    assert chains.stuck_chains == 0  # nothing kept yet
    chains.position[0] = torch.tensor([-14.0, 0.0], dtype=torch.float64)
    chains.log_p, chains.score = chains._evaluate(chains.position)
    for _ in range(100):
        chains.step()
    assert chains.stuck_chains >= 1 and chains.accepted[0] < 0.1 * chains.accepted.double().mean()
    assert chains.quality()["stuck_chains"] == chains.stuck_chains < 5
    assert not chains.too_many_stuck  # 1 of 50 is under the 5 % the job warns at
    chains.accepted[:5] = 0  # 5 of 50
    assert chains.stuck_chains >= 5 and chains.too_many_stuck


def gaussian_latent(sd: float):  # noqa: ANN201
    return build_target({"kind": "expression", "dim": 2,
                         "log_prob": f"log_normal(x[0], 0, {sd}) + log_normal(x[1], 0, {sd})"},
                        BuildContext(dtype=torch.float64))


@pytest.mark.parametrize("sd", [1.0, 5.0])
def test_the_chains_and_the_weighted_proposals_part_where_the_proposals_cannot_see_the_mass(sd: float) -> None:
    """Latent target N(0, sd² I): at sd 1 the proposals are the target, and the two estimates agree (weights all
    equal); at sd 5, 2,000 draws of N(0, I) reach about 3.5 of its 5 sds, so the weighted proposals' sd stays near 2,
    while 300 transitions of the chains find the closed form's 5: they part by more than WEIGHTS_GAP_WARN in log sd,
    and `weights_disagree` says so."""
    chains = LatentMALA(gaussian_latent(sd), MALAOptions(), 100, 0, torch.device("cpu"), torch.float64)
    for _ in range(300):
        chains.step()
    draws = chains.stored_draws().reshape(-1, 2)
    assert (draws.std(0) / sd).log().abs().max() < 0.05, draws.std(0)  # the chains: the closed form
    gap_mean, gap_log_sd = chains.weights_gap()
    weighted_sd = torch.as_tensor(chains.weighted_moments[1])
    assert gap_log_sd == pytest.approx(float((draws.std(0, correction=0) / weighted_sd).log().abs().max()), rel=1e-9)
    quality = chains.quality()
    assert (quality["weights_gap_mean"], quality["weights_gap_log_sd"]) == (gap_mean, gap_log_sd)
    if sd == 1.0:
        assert gap_mean < 0.05 and gap_log_sd < 0.05 and not chains.weights_disagree
    else:
        assert float(weighted_sd.max()) < 2.5 and gap_log_sd > WEIGHTS_GAP_WARN and chains.weights_disagree


@pytest.mark.parametrize(("per_particle", "dim", "wanted"), [("auto", 2, 1000.0), ("auto", 10, 1000.0),
                                                             ("auto", 100, 2000.0), (4.0, 100, 400.0)])
def test_the_ess_wanted_grows_with_log_d_so_the_worst_coordinate_stays_as_precise(per_particle, dim: int,
                                                                                 wanted: float) -> None:
    """'auto' asks 10·max(1, log₁₀ d) effective draws per particle (100 particles here); a number is taken as it is."""
    assert ess_wanted(MALAOptions(ess_per_particle=per_particle), 100, dim) == pytest.approx(wanted)


def test_the_stopping_rule_checks_every_interval_then_at_a_tenth_s_growth() -> None:
    """Every 25 kept transitions up to 1,000, then only where the count grew by a tenth: 40 checks to 1,000, then
    each about 1.1× the one before, on the interval's grid (a check ranks every kept draw: fixed intervals cost
    O(m²))."""
    due = [kept for kept in range(1, 20_001) if check_due(kept, 25)]
    assert due[:40] == list(range(25, 1001, 25))
    later = due[40:]
    assert all(b >= 1.1 * a * 0.97 for a, b in zip([1000] + later, later, strict=False)), later[:10]
    assert len(later) < 40 and later[-1] > 18_000
