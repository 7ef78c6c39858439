"""`auto`'s opt-in neural transport (inference_core/preconditioning/transport.py): the coupling flow's log-det
against a float64 autograd Jacobian, the identity start, the fit against a funnel's exact transport, and
`auto` with `transport: "flow"` on a funnel (closed form), and where `transport: "auto"` chooses the flow (its resume
is in test_auto_method.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor

from inference_core.methods.auto.mala import WEIGHTS_GAP_WARN
from inference_core.preconditioning.transport import (
    CHAINS_BATCH_START,
    CouplingFlow,
    FlowTarget,
    batch_schedule,
    fit_flow,
)
from inference_core.spec import validate_job_spec
from inference_core.targets import build_target
from inference_core.targets.base import BuildContext
from inference_core.training import build_method, run


def perturbed_flow(dim: int, seed: int = 0) -> CouplingFlow:
    flow = CouplingFlow(dim, layers=4, hidden=16, generator=torch.Generator().manual_seed(seed)).double()
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for parameter in flow.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=torch.float64) * 0.5)
    return flow


def test_the_log_det_is_that_of_the_autograd_jacobian() -> None:
    flow = perturbed_flow(5)
    z = torch.randn(6, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    _, log_det = flow(z)
    for row, expected in zip(z, log_det, strict=True):
        jacobian = torch.autograd.functional.jacobian(lambda v: flow(v[None])[0][0], row)
        sign, reference = torch.linalg.slogdet(jacobian)
        assert float(sign) > 0
        assert abs(float(reference) - float(expected)) < 1e-10


def test_a_fresh_flow_is_the_identity() -> None:
    flow = CouplingFlow(7, layers=3, hidden=8, generator=torch.Generator().manual_seed(0)).double()
    z = torch.randn(4, 7, dtype=torch.float64)
    x, log_det = flow(z)
    assert torch.equal(x, z) and torch.equal(log_det, torch.zeros(4, dtype=torch.float64))


def test_the_inverse_undoes_the_flow_and_gives_the_pushforward_density() -> None:
    """log q(x) of T_#N(0, I) by the inverse against the change of variables computed forwards, with the
    log-det from a float64 autograd Jacobian."""
    flow = perturbed_flow(4, seed=3)
    z = torch.randn(5, 4, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    x, _ = flow(z)
    back = x
    for layer in reversed(flow.layers):
        back, _ = layer.inverse(back)
    assert torch.allclose(back, z, atol=1e-12)
    for row, log_q in zip(z, flow.log_density(x), strict=True):
        jacobian = torch.autograd.functional.jacobian(lambda v: flow(v[None])[0][0], row)
        expected = (torch.distributions.Normal(0.0, 1.0).log_prob(row).sum() - torch.linalg.slogdet(jacobian)[1])
        assert abs(float(log_q) - float(expected)) < 1e-10


def test_the_sticking_the_landing_gradient_vanishes_draw_by_draw_where_the_flow_is_exact() -> None:
    """Roeder et al. (2017): where q = p the STL estimate of the reverse-KL gradient is zero for every draw, while
    the plain reparameterised one is zero only on average. The flow's only exact point here is its start (the
    identity) against N(0, I): one draw's gradient under each estimator."""
    base = build_target({"kind": "expression", "dim": 3, "log_prob": "sum(log_normal(x, 0, 1))"},
                        BuildContext(dtype=torch.float64))
    flow = CouplingFlow(3, layers=2, hidden=8, generator=torch.Generator().manual_seed(0)).double()
    z = torch.randn(1, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    def gradient(stl: bool) -> Tensor:
        flow.zero_grad()
        x, log_det = flow(z)
        loss = flow.log_density(x, frozen=True) - base.log_prob(x) if stl else -(base.log_prob(x) + log_det)
        loss.sum().backward()
        return torch.cat([p.grad.flatten() for p in flow.parameters()])

    assert float(gradient(stl=True).abs().max()) < 1e-12
    assert float(gradient(stl=False).abs().max()) > 1e-3


def test_the_fit_learns_a_funnel_s_transport() -> None:
    """v ~ N(0, 1.5²), x | v ~ N(0, e^v): T(z) = (1.5 z₀, e^{0.75 z₀} z₁) is exact and one coupling holds it.
    After the fit, the flow's own draws have v's sd and log|x|'s spread of the funnel (exact draws as reference)."""
    base = build_target({"kind": "expression", "dim": 2,
                         "log_prob": "log_normal(x[0], 0, 1.5) + log_normal(x[1], 0, exp(x[0] / 2))"},
                        BuildContext(dtype=torch.float64))
    flow = CouplingFlow(2, layers=4, hidden=32, generator=torch.Generator().manual_seed(0)).double()
    losses = fit_flow(base, flow, batches=[64] * 1500, lr=3e-3, generator=torch.Generator().manual_seed(1))
    assert np.mean(losses[-100:]) < np.mean(losses[:100])
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        x, _ = flow(torch.randn(20000, 2, generator=generator, dtype=torch.float64))
    v = torch.randn(20000, generator=generator, dtype=torch.float64) * 1.5
    exact = torch.stack([v, torch.exp(v / 2) * torch.randn(20000, generator=generator, dtype=torch.float64)], -1)
    assert abs(math.log(float(x[:, 0].std()) / 1.5)) < 0.1
    log_abs = lambda a: a[:, 1].abs().log()  # noqa: E731
    assert abs(float(log_abs(x).std() - log_abs(exact).std())) < 0.1
    # the latent target is p(T(z)) |det ∂T/∂z|, evaluated through the flow
    latent = FlowTarget(base, flow)
    z = torch.randn(5, 2, dtype=torch.float64)
    pushed, log_det = flow(z)
    assert torch.allclose(latent.log_prob(z), base.log_prob(pushed) + log_det)


@pytest.mark.parametrize("engine", ["nuts", "svgd", "mala"])
def test_auto_with_the_flow_meets_the_bars_on_a_funnel(engine: str) -> None:
    """Neal's funnel in 3-D, v ~ N(0, 1.5²), x_i | v ~ N(0, e^v): closed form sd(x_i) = e^{1.5²/4}. Through the flow
    `auto` meets issue 14's bars on v and on the x_i with either engine (measured seeds 0-3 with the
    sticking-the-landing fit: SVGD v within 0.04 / 0.03, the x_i's log sd 0.10-0.17 off, 0.26 on seed 3 (its sd
    rests on rare large v), stopped at 100-200 steps; NUTS v within 0.03 / 0.06, the x_i's 0.10-0.14, converged at
    400-900 transitions; with the linear whitening the x_i's sd was 0.28-0.30 off in log units, not converged at
    1,000 steps). The flow's evaluations are counted, and the chains' convergence is reported."""
    options = {"transport": "flow", "flow": {"steps": 500, "batch": 32}, "engine": engine}
    target = {"kind": "expression", "dim": 3,
              "log_prob": "log_normal(x[0], 0, 1.5) + sum(log_normal(x[1:], 0, exp(x[0] / 2)))"}
    result = run({"method": "auto", "seed": 0, "steps": 1000, "target": target, "options": options})
    x = result.particles.double().numpy()
    assert x.shape == (100, 3)
    v_mean, v_sd = abs(x[:, 0].mean()) / 1.5, abs(math.log(x[:, 0].std(ddof=1) / 1.5))
    x_sd = float(np.abs(np.log(x[:, 1:].std(0, ddof=1) / math.exp(1.5**2 / 4))).max())
    assert v_mean <= 0.15 and v_sd <= 0.25 and x_sd <= 0.25, (v_mean, v_sd, x_sd)
    quality = result.quality
    assert quality["transport"] == "flow" and quality["engine"] == engine and quality["trustworthy"], quality
    steps = result.steps_completed
    assert steps < 1000 and result.final_metrics["converged_step"] == steps
    moved = 4 * steps if engine == "nuts" else 100 * steps  # NUTS: at least one gradient a transition a chain
    # `batch_start: "auto"`: the fit's batch grows from 16 to 32 where MALA chains move in the flow's latent space
    fitted = sum(batch_schedule(500, 32, CHAINS_BATCH_START if engine == "mala" else None))
    assert fitted == (24 * 500 if engine == "mala" else 32 * 500)
    assert result.final_metrics["grad_evals"] >= fitted + moved
    if engine == "nuts":
        chains = quality["chains"]
        assert chains["rhat_max"] < 1.01 and chains["ess_bulk_min"] >= 100, chains
        assert chains["kept_per_chain"] == steps - 200  # after the 200 warm-up transitions
    if engine == "mala":
        chains = quality["chains"]
        assert chains["ess_bulk_min"] >= 1000 and chains["stuck_chains"] == 0, chains
        assert chains["weights_gap_mean"] < 0.75 and chains["weights_gap_log_sd"] < 0.75, chains
        assert chains["kept_per_chain"] == steps - 100 and chains["chains"] == 200


def test_chains_through_a_poorly_fitted_flow_are_flagged() -> None:
    """A deep 3-d funnel (v ~ N(0, 3²)) through a flow fitted in 5 steps: the MALA chains' v comes out 0.27 too
    narrow in log sd (seed 0) and the importance-weighted proposals disagree with them by more than WEIGHTS_GAP_WARN,
    so the job says `estimates_disagree` and is `unreliable` (it does not converge either)."""
    target = {"kind": "expression", "dim": 3,
              "log_prob": "log_normal(x[0], 0, 3) + sum(log_normal(x[1:], 0, exp(x[0] / 2)))"}
    options = {"transport": "flow", "engine": "mala", "flow": {"steps": 5, "batch": 32}}
    result = run({"method": "auto", "seed": 0, "steps": 1000, "target": target, "options": options})
    v_log_sd = abs(math.log(float(result.particles.double()[:, 0].std()) / 3))
    assert v_log_sd > 0.15, v_log_sd  # a miss by the bars' measure
    quality = result.quality
    assert "estimates_disagree" in {w["code"] for w in quality["warnings"]}, quality["warnings"]
    assert quality["verdict"] == "unreliable" and not quality["trustworthy"]
    assert max(quality["chains"]["weights_gap_mean"], quality["chains"]["weights_gap_log_sd"]) > WEIGHTS_GAP_WARN


HIERARCHICAL_LOGISTIC = {"kind": "bayesian_logistic_regression", "dataset": "sklearn:breast_cancer",
                         "standardize": True, "bias": True, "prior": {"a0": 1.0, "b0": 1.0}}


def test_transport_auto_fits_the_flow_where_paths_end_far_apart_or_the_gaussian_misses_mass() -> None:
    """The default `transport: "auto"`: the suite's funnel, where no Pathfinder path settles (each still gains
    down the neck at its last iteration), gets the flow whatever its k̂ or the paths' spread, and `engine: "auto"`
    moves it by 200 MALA chains; the hierarchical logistic regression of docs/reproduction.md (w ~ N(0, α⁻¹I), log α
    sampled), whose paths agree, gets it from k̂ > 1 (1.01-1.69 on seeds 0-9) and moves 3 × 100 particles by SVGD; the
    rotated Gaussian (k̂ ≈ 0) keeps the linear whitening, 100 particles and no flow evaluations."""
    from benchmarks.robustness import problems as suite

    targets = {name: suite.problems()[name].target_spec() for name in ("funnel", "rotated_gaussian_20")}
    targets["hierarchical"] = HIERARCHICAL_LOGISTIC
    chosen, chosen_shift = {}, {}
    for name, target in targets.items():
        spec = {"method": "auto", "seed": 0, "steps": 1, "target": target, "options": {"flow": {"steps": 5, "batch": 4}}}
        method = build_method(validate_job_spec(spec))
        chosen[name] = (method.transport, method.found.start_disagreement(), method.khat, method.ensemble_size,
                        any(method.found.settled), method.engine)
        chosen_shift[name] = method.importance.shift_sd
        assert (method.flow_target is not None) == (method.transport == "flow")
    funnel, hierarchical, gaussian = chosen["funnel"], chosen["hierarchical"], chosen["rotated_gaussian_20"]
    assert funnel[0] == "flow" and not funnel[4] and funnel[5] == "mala" and funnel[3] == 200, chosen
    assert hierarchical[0] == "flow" and hierarchical[1] < 0.5 and hierarchical[2] > 1 and hierarchical[3] == 500, chosen
    assert hierarchical[5] == "svgd" and gaussian[5] == "svgd", chosen
    assert chosen_shift["hierarchical"] > 1, chosen_shift
    assert gaussian[0] == "linear" and gaussian[1] < 10 and gaussian[2] < 0.5 and gaussian[3] == 100, chosen


def test_heavy_tails_alone_take_the_tail_map_not_the_flow() -> None:
    """The README's example: a Student-t coordinate, whose tails no Gaussian covers, puts Pathfinder's k̂ above 1 on
    seed 2 (2.99; 0.15-2.99 on seeds 0-7), but the importance-weighted mean stays within 0.2 of the Gaussian's sds
    of its mean: no mass missed on one side, so no flow (`flow_shift_above`). The tail probe finds the t₄ along one
    axis (both sides) and puts Tukey's h there (methods/auto/tails.py). It oversamples (k̂ > 0.7)."""
    target = {"kind": "expression", "dim": 3, "log_prob": "log_normal(x[0], 3, 0.01) + log_normal(x[1], 100 * x[0], 2)"
              " + log_student_t(x[2], 4, x[1] / 100, 1)"}
    method = build_method(validate_job_spec({"method": "auto", "seed": 2, "steps": 1, "target": target}))
    assert method.khat > 1 and method.importance.shift_sd < 0.5, method.importance
    assert method.transport == "tails" and not method.flow_losses and method.ensemble_size == 500
    probe = method.tail_probe
    assert probe.shape == "coordinatewise" and int(torch.isfinite(probe.index).sum()) == 2, probe
    assert float(probe.index[torch.isfinite(probe.index)].min()) == pytest.approx(4.0, abs=0.1)


def test_auto_meets_the_bars_on_a_hierarchical_logistic_regression() -> None:
    """32-d: 30 standardised features and a bias, w ~ N(0, α⁻¹I), α ~ Gamma(1, 1), θ = [w, log α]. Pathfinder's
    Gaussian sits 3.6 sds from the posterior mean in log α; through the linear whitening `auto` had not converged
    by 3,000 steps (worst 0.38 sd in the mean, 0.60 in log sd, on seed 0). The k̂ rule fits the flow: against the
    stored NumPyro NUTS reference (2,000 draws, benchmarks/breast_cancer_nuts_reference.npz) issue 14's bars are
    met, converged and called `good` (measured seeds 0-5: all six met them at steps 100-300, worst 0.10 / 0.20, all
    `good`; with the flow's fit before the sticking-the-landing gradient, 5 of 6, seed 5 not converged and called
    `unreliable`)."""
    reference = np.load(Path(__file__).resolve().parents[3] / "benchmarks" / "breast_cancer_nuts_reference.npz")
    ref = reference["samples"]
    result = run({"method": "auto", "seed": 0, "steps": 1000, "target": HIERARCHICAL_LOGISTIC})
    x = result.particles.double().numpy()
    mean_error = float(np.abs((x.mean(0) - ref.mean(0)) / ref.std(0)).max())
    sd_error = float(np.abs(np.log(x.std(0, ddof=1) / ref.std(0, ddof=1))).max())
    assert mean_error <= 0.15 and sd_error <= 0.25, (mean_error, sd_error)
    quality = result.quality
    assert quality["transport"] == "flow" and quality["pathfinder_khat"] > 1 and quality["converged_step"], quality
    # the paths' mode is 4.05 particle sds from their mean: inside a 32-d mass (`starts_disagree` asks for 7.9)
    assert 3 < quality["start_outside_sd"] < 7 and quality["verdict"] == "good", quality


def test_a_funnel_shaped_fit_within_the_bars_is_called_good() -> None:
    """Centred eight schools (the suite's problem, seed 0): through the flow `auto` meets the bars against the NUTS
    reference. Its paths run down the neck without settling (all four at the iteration cap), and
    in x 29 of the 100 particles lie more than the χ² threshold below the best one's log p (the centred prior puts
    −8 log τ in it), so the job had said `starts_disagree` and `stranded_draws`: `unreliable`. Checked where the
    particles move (the flow's latent coordinates) and with only settled paths' modes counted, it says `good`; the
    two modes of test_auto_method.py still say `starts_disagree`."""
    from benchmarks.robustness import problems as suite
    from benchmarks.robustness.scoring import load_reference, score
    from inference_core.metrics.quality import check_stranded

    problem, reference = suite.problems()["eight_schools_centered"], load_reference("eight_schools_centered")
    result = run({"method": "auto", "seed": 0, "steps": 3000, "target": problem.target_spec()})
    x = result.particles.double()
    assert score(x.numpy(), reference["mean"], reference["sd"])["pass"]
    quality = result.quality
    assert quality["transport"] == "flow" and quality["checked_in"] == "flow_latent", quality
    assert quality["unsettled_paths"] == 4, quality
    assert quality["stranded_draws"] == 0 and quality["verdict"] == "good", quality
    in_x: dict = {}
    check_stranded(build_target(problem.target_spec(), BuildContext(dtype=torch.float64)).log_prob(x), 10, in_x, [])
    assert in_x["stranded_draws"] > 10, in_x
