"""`holdout_selection_every` for `amortized_fsvgd`: the generator state with the best held-out predictive
log-likelihood is kept, and the results (particles, sampler, `selected_step`) come from it where the final state is
worse on the held-out rows by more than SELECTION_Z paired standard errors. Scores are checked against a float64
recomputation (scipy); training is unchanged by the selection, the live tensors come back after a readout, and a
resumed run carries the selection bit-identically."""

from __future__ import annotations

import numpy as np
import torch
from scipy.special import logsumexp
from scipy.stats import norm

from inference_core.methods import holdout
from inference_core.methods.holdout import SELECTION_DRAWS, SELECTION_STREAM, SELECTION_Z
from inference_core.seeding import derive_seed
from tests.support.holdout import assert_resume_carries_the_selection
from tests.support.holdout import stepped as stepped_by_hand

RNG = np.random.default_rng(7)
X = np.sort(RNG.uniform(-2.0, 2.0, 120))
Y = np.sin(3 * X) + 0.3 * RNG.standard_normal(120)
STEPS, EVERY = 150, 15


def job(**options) -> dict:
    return {"method": "amortized_fsvgd", "seed": 3, "num_particles": 8, "steps": STEPS, "device": "cpu",
            "target": {"kind": "bnn", "dataset": {"X": X[:, None].tolist(), "y": Y.tolist()}, "hidden": [16],
                       "prior_std_scaling": "fan_out", "standardize": True, "batch_size": 32,
                       "noise": {"type": "inverse_gamma_std"}},
            "options": {"generator": {"hidden": [16], "noise_dim": 4}, "extra_points": 10,
                        "optimizer": {"name": "adam", "lr": 0.01}, "holdout_selection_every": EVERY, **options},
            "eval": {"ksd": False, "mmd": False}}


def stepped(spec: dict, steps: int = STEPS) -> tuple[object, dict[int, float]]:
    return stepped_by_hand(spec, steps)


def generator_copy(method) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() for name, t in method.network.state_dict().items()}


def float64_holdout_rows(method) -> np.ndarray:
    """log (1/M) Σ_i N(y_j; f_ij, σ²) per held-out row j, in float64 with scipy, for the selection's fixed draws of
    the live generator (their weights through the target's own forward) and the shared σ."""
    g = torch.Generator().manual_seed(derive_seed(method.seed, SELECTION_STREAM))
    z = torch.randn(SELECTION_DRAWS, method.noise_dim, generator=g, dtype=method.dtype)
    rows = method.holdout_rows
    Xh, yh = method.target.X.index_select(0, rows), method.target.y.index_select(0, rows).double().numpy()
    with torch.no_grad():
        f = method.target.forward(method.network(z), Xh)[..., 0].double().numpy()
    sigma = float(method.shared_log_std.detach().double().exp())
    return logsumexp(norm.logpdf(yh[None, :], loc=f, scale=sigma), axis=0) - np.log(SELECTION_DRAWS)


def test_the_best_scored_state_is_kept_and_replaces_the_final_one_only_when_clearly_better(monkeypatch) -> None:
    method, scores = stepped(job())
    assert sorted(scores) == list(range(EVERY, STEPS + 1, EVERY))
    best_step = max(scores, key=lambda s: (scores[s], -s))
    assert method.selection.step == best_step and method.selection.best == max(scores.values())
    final_rows = float64_holdout_rows(method)
    assert abs(final_rows.mean() - scores[STEPS]) < 1e-4, (final_rows.mean(), scores[STEPS])
    diff = final_rows - method.selection.rows.numpy()
    expected = bool(diff.mean() < -SELECTION_Z * diff.std(ddof=1) / np.sqrt(len(diff)))
    with method._selected() as replaced:
        assert replaced == expected
    assert method.summary_metrics() == {"selected_step": float(best_step if expected else STEPS)}

    assert best_step != STEPS, "the kept state must differ from the final one for the rest of this test"
    monkeypatch.setattr(holdout, "SELECTION_Z", -1e9)  # every kept state now replaces the live one
    live, live_batch, live_std = generator_copy(method), method.last_batch.clone(), method.shared_log_std.clone()
    with method._selected() as replaced:
        assert replaced
        assert abs(float64_holdout_rows(method).mean() - method.selection.best) < 1e-4
        kept = generator_copy(method)
        g = torch.Generator().manual_seed(derive_seed(method.seed, SELECTION_STREAM, 1))
        with torch.no_grad():
            fresh = method.network(torch.randn(method.num_particles, method.noise_dim, generator=g))
    assert all(torch.equal(live[name], t) for name, t in generator_copy(method).items())  # restored
    assert torch.equal(method.last_batch, live_batch) and torch.equal(method.shared_log_std, live_std)
    assert torch.equal(method.particles(), fresh)  # fresh draws of the kept generator
    stored = method.sampler().tensors()
    assert torch.equal(stored["output.bias"], kept["output.bias"])
    assert method.summary_metrics() == {"selected_step": float(best_step)}
    assert not torch.equal(stored["output.weight"], live["output.weight"])

    # the selection reads; it does not steer: with it off the generator is bit-identical, and nothing is selected
    plain, none = stepped(job(holdout_selection_every=0))
    assert none == {} and plain.selection.state is None and plain.summary_metrics() == {}
    assert all(torch.equal(live[name], t) for name, t in generator_copy(plain).items())


def test_a_resumed_run_carries_the_selection() -> None:
    assert_resume_carries_the_selection(job(), 2 * EVERY + 7)


def test_no_selection_without_held_out_rows() -> None:
    method, scores = stepped(job(noise_holdout=0), steps=2 * EVERY)
    assert scores == {} and method.selection.every == 0 and method.summary_metrics() == {}
