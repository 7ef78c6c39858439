"""`holdout_selection_every`: FVI keeps the state with the best held-out predictive log-likelihood and reads its
results from it where the final state is worse by more than SELECTION_Z paired standard errors. Scores and the rule
are checked against a float64 recomputation (scipy); training is unchanged by the selection, the live tensors come
back after a readout, and a resumed run carries the selection bit-identically."""

from __future__ import annotations

import numpy as np
import torch
from scipy.special import logsumexp
from scipy.stats import norm

from inference_core.methods import holdout
from inference_core.methods.holdout import SELECTION_DRAWS, SELECTION_STREAM, SELECTION_Z, HoldoutSelection
from inference_core.seeding import derive_seed
from tests.support.holdout import assert_resume_carries_the_selection
from tests.support.holdout import stepped as stepped_by_hand

RNG = np.random.default_rng(4)
X = np.sort(RNG.uniform(-2.0, 2.0, 120))
Y = np.sin(3 * X) + 0.3 * RNG.standard_normal(120)
DISTILL, STEPS, EVERY = 60, 260, 40


def job(**options) -> dict:
    return {"method": "fvi", "seed": 2, "num_particles": 8, "steps": STEPS, "device": "cpu",
            "target": {"kind": "bnn", "dataset": {"X": X[:, None].tolist(), "y": Y.tolist()}, "hidden": [16],
                       "prior_std_scaling": "fan_out", "standardize": True, "noise": {"type": "inverse_gamma_std"}},
            "options": {"distill_steps": DISTILL, "n_basis": 8, "latent_dim": 4, "holdout_selection_every": EVERY,
                        **options},
            "eval": {"ksd": False, "mmd": False}}


def stepped(spec: dict, steps: int = STEPS) -> tuple[object, dict[int, float]]:
    return stepped_by_hand(spec, steps)


def live_copy(method) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() for name, t in method._live_state().items()}


def float64_holdout_rows(method) -> np.ndarray:
    """log (1/M) Σ_i N(y_j; f_ij, σ²) per held-out row j, in float64 with scipy, for the selection's fixed draws of
    the live state."""
    g = torch.Generator().manual_seed(derive_seed(method.seed, SELECTION_STREAM))
    eps_h = torch.randn(SELECTION_DRAWS, method.options.latent_dim, generator=g, dtype=torch.float64)
    eps_a = torch.randn(SELECTION_DRAWS, method.options.n_basis, generator=g, dtype=torch.float64)
    rows = method.holdout_rows
    Xh, yh = method.target.X.index_select(0, rows), method.target.y.index_select(0, rows).double().numpy()
    with torch.no_grad():
        f = method._functions(Xh, eps_h.float(), eps_a.float(), torch.zeros(SELECTION_DRAWS, len(rows)))
    sigma = float(method.log_noise.detach().double().exp())
    log_density = norm.logpdf(yh[None, :], loc=f.double().numpy(), scale=sigma)
    return logsumexp(log_density, axis=0) - np.log(SELECTION_DRAWS)


def test_the_best_scored_state_is_kept_and_replaces_the_final_one_only_when_clearly_better(monkeypatch) -> None:
    method, scores = stepped(job())
    assert sorted(scores) == list(range(DISTILL + EVERY, STEPS + 1, EVERY))
    best_step = max(scores, key=lambda s: (scores[s], -s))
    assert method.selection.step == best_step and method.selection.best == max(scores.values())
    final_rows = float64_holdout_rows(method)
    assert abs(final_rows.mean() - scores[STEPS]) < 1e-4, (final_rows.mean(), scores[STEPS])
    diff = final_rows - method.selection.rows.numpy()
    expected = bool(diff.mean() < -SELECTION_Z * diff.std(ddof=1) / np.sqrt(len(diff)))
    before = live_copy(method)
    with method._selected() as replaced:
        assert replaced == expected
    assert method.fit_metrics()["selected_step"] == (best_step if expected else STEPS)
    monkeypatch.setattr(holdout, "SELECTION_Z", -1e9)  # every kept state now replaces the live one
    with method._selected() as replaced:
        assert replaced
        assert abs(float64_holdout_rows(method).mean() - method.selection.best) < 1e-4
        inside = method.function_draws(method.num_particles, method.target.X)
    assert all(torch.equal(before[name], t) for name, t in method._live_state().items())  # live state restored
    assert torch.equal(method.particles(), inside)  # the same stream read from the selected state
    assert method.fit_metrics()["selected_step"] == best_step
    # the selection reads; it does not steer: with it off the live state is bit-identical
    plain, none = stepped(job(holdout_selection_every=0))
    assert none == {} and plain.selection.state is None
    assert all(torch.equal(before[name], t) for name, t in plain._live_state().items())


def test_the_sampler_and_particles_are_of_the_selected_state(monkeypatch) -> None:
    monkeypatch.setattr(holdout, "SELECTION_Z", -1e9)
    method, scores = stepped(job())
    with method._selected():
        expected = method.function_draws(method.num_particles, method.target.X)
        q_mean = method.q_mean.detach().clone()
        noise = method.predictive_noise_std()
    assert torch.equal(method.particles(), expected)
    sampler = method.sampler()
    assert torch.equal(sampler.tensors()["q.mean"], q_mean)
    assert abs(sampler.config["model"]["noise"]["std"] - noise) < 1e-6
    if method.selection.step != STEPS:  # the live state differs from the selected one
        assert not torch.equal(method.q_mean.detach(), q_mean)


def test_a_resumed_run_carries_the_selection() -> None:
    assert_resume_carries_the_selection(job(), DISTILL + 2 * EVERY + 7)


def test_holdout_selection_keeps_the_first_best_and_swaps_in_place_when_clearly_better() -> None:
    live = {"a": torch.zeros(3), "b": torch.ones(2)}
    selection = HoldoutSelection(10)
    assert not selection.due(0) and selection.due(20) and not selection.due(25)
    best_rows = torch.tensor([-1.0, -0.5, -1.5, -1.0])
    with selection.applied(live, best_rows - 9) as replaced:  # nothing kept yet: the live values
        assert not replaced and torch.equal(live["a"], torch.zeros(3))
    selection.offer(10, best_rows, live)
    live["a"] += 5.0
    selection.offer(20, best_rows.flip(0), live)  # a tie keeps the earlier state
    selection.offer(30, best_rows - 1, live)
    assert selection.step == 10 and selection.best == -1.0
    # paired differences of mean −0.025, s.e. 0.048: within one s.e., the live state stays
    noisy = best_rows + torch.tensor([-0.1, 0.1, -0.1, 0.0])
    assert not selection.replaces(noisy)
    clear = best_rows + torch.tensor([-0.3, -0.2, -0.3, -0.2])  # mean −0.25, s.e. 0.029
    assert selection.replaces(clear)
    with selection.applied(live, clear) as replaced:
        assert replaced and torch.equal(live["a"], torch.zeros(3))
    assert torch.equal(live["a"], torch.full((3,), 5.0))
    copy = HoldoutSelection(10)
    copy.load_state_dict(selection.state_dict())
    assert copy.step == 10 and torch.equal(copy.state["a"], torch.zeros(3)) and copy.replaces(clear)
    assert not HoldoutSelection(0).due(10)
