"""`nuts` and `hmc` (Pyro's kernels): the diagnostics against independent references (scipy ranks and normal
quantiles, the AR(1) ESS in closed form), recovery of a correlated Gaussian within Monte-Carlo error with R-hat
and ESS in the metrics, the thinned draw store, bit-identical resume during and after warm-up, the caller's
global RNG left alone, bad options."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from baselines_support import GAUSSIAN, exact_moments
from scipy import stats

from inference_core import errors, run
from inference_core.methods.baselines import mcmc
from inference_core.serialization import state_from_bytes
from inference_core.spec import validate_job_spec
from inference_core.training import build_method
from tests.support.resume import StopAt

NO_EVAL = {"ksd": False, "mmd": False}


def job(name: str, options: dict, n: int = 100, steps: int = 60, **extra) -> dict:
    return {"method": name, "target": GAUSSIAN, "num_particles": n, "steps": steps, "seed": 0,
            "options": options, "eval": NO_EVAL, **extra}


# ---- diagnostics --------------------------------------------------------------------------------------------


def test_average_ranks_and_rank_normalisation_match_scipy() -> None:
    generator = torch.Generator().manual_seed(0)
    values = torch.randint(0, 6, (50, 3), generator=generator).to(torch.float64)  # many ties
    values[:, 2] = torch.randn(50, generator=generator, dtype=torch.float64)
    expected = np.stack([stats.rankdata(values[:, j].numpy(), method="average") for j in range(3)], axis=1)
    np.testing.assert_array_equal(mcmc.average_ranks(values).numpy(), expected)
    normal = stats.norm.ppf((expected - 0.375) / (50 + 0.25))
    np.testing.assert_allclose(mcmc.rank_normalise(values).numpy(), normal, rtol=1e-10, atol=1e-12)


def ar1_chains(rho: float, chains: int, length: int, dim: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randn(chains, length, dim, generator=generator, dtype=torch.float64)
    x = torch.empty_like(noise)
    x[:, 0] = noise[:, 0]
    for t in range(1, length):
        x[:, t] = rho * x[:, t - 1] + math.sqrt(1 - rho**2) * noise[:, t]
    return x


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.8])
def test_bulk_ess_of_ar1_chains_is_the_closed_form(rho: float) -> None:
    """An AR(1) chain with coefficient ρ has ESS = N (1 − ρ)/(1 + ρ) (its integrated autocorrelation time);
    the rank transform of a Gaussian chain keeps that to first order."""
    draws = ar1_chains(rho, chains=4, length=8000, dim=3, seed=1)
    expected = 4 * 8000 * (1 - rho) / (1 + rho)
    ess = mcmc.bulk_ess(draws)
    assert ((ess / expected) - 1).abs().max() < 0.12, (ess, expected)
    report = mcmc.chain_diagnostics(draws)
    assert report["rhat_max"] < 1.01
    assert abs(report["ess_min"] / expected - 1) < 0.12


def test_ess_of_antithetic_chains_is_bounded_like_arviz() -> None:
    """Chains whose draws flip sign each step (ρ₁ ≈ −0.9 and −0.99: HMC's antithetic regime) have τ < 1, where
    Pyro's estimate can go negative; with Stan's bound (S·log10 S = 6,602 here, reached by both) the bulk and
    the raw ESS equal ArviZ's (an independent implementation of Vehtari et al. 2021) to 1 % and 5 %, as for ρ = 0.5."""
    arviz = pytest.importorskip("arviz")
    for rho in (-0.99, -0.9, 0.5):
        draws = ar1_chains(rho, chains=4, length=500, dim=2, seed=4)
        ours = mcmc.bulk_ess(draws).numpy()
        theirs = np.array([float(arviz.ess(draws[..., j].numpy(), method="bulk")) for j in range(2)])
        assert (ours > 0).all()
        np.testing.assert_allclose(ours, theirs, rtol=0.01)
        raw = mcmc.capped_ess(draws).numpy()
        theirs_raw = np.array([float(arviz.ess(draws[..., j].numpy(), method="mean")) for j in range(2)])
        np.testing.assert_allclose(raw, theirs_raw, rtol=0.05)  # ArviZ splits the chains here, Pyro does not


def test_split_rhat_flags_chains_that_disagree() -> None:
    draws = ar1_chains(0.5, chains=4, length=400, dim=2, seed=2)
    draws[0] += 3.0  # one chain elsewhere
    assert mcmc.chain_diagnostics(draws)["rhat_max"] > 1.5
    trend = ar1_chains(0.5, chains=1, length=400, dim=1, seed=3) + torch.linspace(0, 6, 400)[None, :, None]
    assert mcmc.chain_diagnostics(trend)["rhat_max"] > 1.5  # one drifting chain: its halves disagree


# ---- sampling a Gaussian ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["nuts", "hmc"])
def test_recovers_a_correlated_gaussian_within_monte_carlo_error(name: str) -> None:
    result = run(job(name, {"warmup_steps": 150}, n=100_000, steps=400))
    mean, cov, _ = exact_moments()
    x = result.particles
    assert x.shape == (4 * 250, 3) and x.dtype == torch.float64  # every kept draw of 4 chains
    final = result.final_metrics
    assert final["rhat_max"] < 1.05 and final["ess_bulk_min"] > 150 and final["draws_kept"] == 250
    ess = final["ess_min"]
    sd = cov.diagonal().sqrt()
    assert ((x.mean(0) - mean).abs() < 4 * sd / math.sqrt(ess)).all(), (x.mean(0), mean, ess)
    cov_se = ((cov.diagonal()[:, None] * cov.diagonal()[None, :] + cov**2) / ess).sqrt()
    assert ((torch.cov(x.T) - cov).abs() < 4 * cov_se).all(), (torch.cov(x.T), cov)
    method = result.method
    assert 0.5 < sum(k._mean_accept_prob for k in method.kernels) / 4 < 0.99
    assert method.step_count == 400


def test_step_metrics_carry_the_chain_summaries() -> None:
    method = build_method(validate_job_spec(job("nuts", {"warmup_steps": 10, "diagnostics_every": 5})))
    seen = [method.step() for _ in range(20)]
    assert seen[0]["warmup"] == 1.0 and seen[-1]["warmup"] == 0.0
    assert all(m["step_size"] > 0 and 0 <= m["accept_prob"] <= 1 and m["potential_evals"] >= 1 for m in seen)
    # Every 5 steps once at least 4 draws per chain are kept (step 15: 5 kept).
    assert [("rhat_max" in m) for m in seen[9:]] == [False, False, False, False, False, True] + [False] * 4 + [True]
    assert seen[19]["draws_kept"] == 10.0 and seen[19]["ess_bulk_min"] > 0


# ---- the draw store and particles ---------------------------------------------------------------------------


def test_the_store_is_an_evenly_thinned_record_and_particles_interleave_chains() -> None:
    method = build_method(validate_job_spec(job("hmc", {"warmup_steps": 3, "max_draws_per_chain": 8, "chains": 2,
                                                        "num_steps": 3, "draws_returned": "num_particles"}, n=6)))
    start = method.particles()
    assert start.shape == (2, 3)  # during warm-up: the chains' current positions
    record = []
    for step in range(40):
        method.step()
        if step >= 3:
            record.append(torch.stack(method.positions))
    record = torch.stack(record, dim=1)  # [2, 37, 3]: every post-warm-up position
    stored = method.stored_draws()
    assert method.stride == 8 and torch.equal(stored, record[:, ::8])
    x = method.particles()  # 3 per chain, evenly spaced over the 5 stored, alternating chains
    index = [0, 2, 4]
    expected = torch.stack([stored[:, i] for i in index]).reshape(-1, 3)
    assert torch.equal(x, expected)
    method.options = method.options.model_copy(update={"draws_returned": "all"})  # the default: every stored draw
    assert torch.equal(method.particles(), stored.transpose(0, 1).reshape(-1, 3))


# ---- resume --------------------------------------------------------------------------------------------------

RESUME_VARIANTS = [("nuts", {}), ("hmc", {"full_mass": True, "num_steps": 5}), ("nuts", {"adapt_mass_matrix": False})]


@pytest.mark.parametrize(("name", "options"), RESUME_VARIANTS, ids=["nuts", "hmc-dense", "nuts-no-mass"])
def test_resume_during_and_after_warmup_is_bit_identical(name: str, options: dict) -> None:
    # warm-up 40: windows [0, 5] (step size only), [6, 35] (mass matrix), [36, 39]; checkpoints at 20 and 40.
    spec = job(name, {"warmup_steps": 40, "chains": 2, **options}, steps=60, checkpoint_every=20)
    straight = run(spec)
    hooks = StopAt(50)
    run(spec, hooks=hooks)
    assert sorted(hooks.checkpoints) == [20, 40]
    for step in (20, 40):
        resumed = run(spec, resume_state=state_from_bytes(hooks.checkpoints[step]))
        assert torch.equal(resumed.particles, straight.particles)
        for a, b in zip(resumed.method.kernels, straight.method.kernels, strict=True):
            assert a.step_size == b.step_size
            masses_a, masses_b = (k._adapter.mass_matrix_adapter.inverse_mass_matrix for k in (a, b))
            assert all(torch.equal(masses_a[key], masses_b[key]) for key in masses_b)


def test_the_callers_global_rng_is_left_alone() -> None:
    method = build_method(validate_job_spec(job("nuts", {"warmup_steps": 5})))
    torch.manual_seed(123)
    before = torch.get_rng_state()
    for _ in range(3):
        method.step()
    assert torch.equal(torch.get_rng_state(), before)


# ---- options and targets ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "options"), [
    ("nuts", {"chains": 0}), ("nuts", {"warmup_steps": -1}), ("nuts", {"max_tree_depth": 0}),
    ("nuts", {"num_steps": 5}), ("hmc", {"num_steps": 5, "trajectory_length": 1.0}), ("hmc", {"max_tree_depth": 5}),
    ("hmc", {"target_accept_prob": 1.0}), ("nuts", {"dtype": "float16"}),
])
def test_bad_options_are_clear_errors(name: str, options: dict) -> None:
    with pytest.raises(errors.MethodOptionsInvalid) as caught:
        validate_job_spec(job(name, options))
    assert "options" in caught.value.detail


def test_a_dense_mass_matrix_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mcmc, "FULL_MASS_MAX_DIM", 2)
    with pytest.raises(errors.MethodOptionsInvalid, match="full_mass"):
        build_method(validate_job_spec(job("nuts", {"full_mass": True})))


def test_a_target_without_a_density_is_refused() -> None:
    rng = np.random.default_rng(0)
    data = {"X": rng.uniform(size=(10, 1)).tolist(), "y": rng.normal(size=10).tolist()}
    target = {"kind": "function_posterior", "dataset": data, "prior": {"type": "piecewise_linear"}}
    with pytest.raises(errors.MethodUnsupportedForTarget):
        build_method(validate_job_spec({"method": "hmc", "target": target}))


@pytest.mark.parametrize(("options", "per_transition"), [
    ({"num_steps": 6, "step_size": 0.01}, 6),  # Pyro alone would make this 6 × 0.01 / ε_adapted steps
    ({"trajectory_length": 100.0, "max_num_steps": 7}, 7),  # 100 / ε capped
])
def test_hmc_leapfrog_steps_are_fixed_or_capped(options: dict, per_transition: int) -> None:
    method = build_method(validate_job_spec(job("hmc", {"warmup_steps": 30, "chains": 1, **options})))
    evals = [method.step()["potential_evals"] for _ in range(40)]
    assert evals[30:] == [float(per_transition)] * 10  # after warm-up: one gradient per leapfrog step
    assert method.kernels[0].step_size != options.get("step_size", 1.0)  # the step size did adapt
