"""Generative methods: bit-identical resume, samplers from methods, λ rules, options, hypernetwork init."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from inference_core import errors, run
from inference_core.catalog import METHODS
from inference_core.methods.generative.base import HYPERNETWORK_LAMBDA
from inference_core.samplers import load
from inference_core.serialization import state_from_bytes, state_to_bytes
from tests.support.resume import StopAt

# generative methods for any weight-space target (amortized_fsvgd, for network targets only: test_amortized_fsvgd.py)
GENERATIVE = sorted(name for name, info in METHODS.items() if info.family == "generative" and "gaussian" in info.target_kinds)
GAUSSIAN = {"kind": "gaussian", "mean": [0.5, -1.0, 0.2], "cov": [[1.0, 0.3, 0.0], [0.3, 2.0, 0.1], [0.0, 0.1, 0.5]]}
BLR_DATA = {"X": [[0.1 * i, (-1) ** i * 0.5, 1.0] for i in range(12)], "y": [0.3 * i - 1 for i in range(12)]}


def test_every_generative_method_is_registered() -> None:
    assert GENERATIVE == ["amortized_gfsf", "amortized_ksd", "amortized_svgd", "gpvi", "gpvi_exact"]
    assert sorted(name for name, info in METHODS.items() if info.family == "generative") == sorted(
        [*GENERATIVE, "amortized_fsvgd"])


def spec(method: str, options: dict | None = None, target: dict | None = None, steps: int = 12, **extra: Any) -> dict:
    # k = 2 < d = 3 with a hidden layer: the block form's coupling, the helper VJPs and J_φ all run.
    base = {"generator": {"hidden": [5], "noise_dim": 2, "activation": "tanh"},
            "helper_network": {"hidden_width": 6, "hidden_layers": 1},
            "critic": {"hidden": [6], "steps": 2}}
    keep = {"gpvi": {"generator", "helper_network"}, "gpvi_exact": {"generator"},
            "amortized_ksd": {"generator", "critic"}}.get(method, {"generator"})
    opts = {key: value for key, value in base.items() if key in keep}
    opts.update(options or {})
    out = {"method": method, "target": target or GAUSSIAN, "num_particles": 8, "steps": steps, "seed": 3,
           "options": opts, "checkpoint_every": 4}
    out.update(extra)
    return out




VARIANTS = [(name, {}) for name in GENERATIVE] + [
    ("gpvi", {"helper": "matrix", "helper_network": {"hidden_width": 6, "hidden_layers": 1, "probes": 3}}),
    ("gpvi", {"generator": {"hidden": [], "noise_dim": 2, "lambda": 0.8, "lambda_trainable": True}}),
    ("amortized_svgd", {"expectation": "same"}),
    ("amortized_ksd", {"critic": {"hidden": [6], "trace": "hutchinson"}}),
]


@pytest.mark.parametrize(("method", "options"), VARIANTS)
def test_a_resumed_run_is_bit_identical(method: str, options: dict) -> None:
    straight = run(spec(method, options))
    first = run(spec(method, options), hooks=StopAt(5))
    assert first.stopped == "preempted" and first.steps_completed == 5
    state = state_from_bytes(state_to_bytes(first.method.state_dict()))
    resumed = run(spec(method, options), resume_state=state)
    assert resumed.steps_completed == 12
    assert torch.equal(resumed.particles, straight.particles)
    for (name, a), b in zip(straight.method.network.state_dict().items(),
                            resumed.method.network.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert torch.equal(resumed.method.sampler().sample(50, 1), straight.method.sampler().sample(50, 1))
    # and the run moved: the generator after 12 steps is not the one after 5
    assert not torch.equal(first.method.sampler().sample(50, 1), straight.method.sampler().sample(50, 1))


def test_a_state_does_not_alias_the_live_method() -> None:
    result = run(spec("gpvi", steps=3))
    state = result.method.state_dict()
    before = state["generator"]["output.weight"].clone()
    result.method.step()
    assert torch.equal(state["generator"]["output.weight"], before)


@pytest.mark.parametrize("method", GENERATIVE)
def test_the_sampler_is_a_snapshot_of_the_generator(method: str) -> None:
    result = run(spec(method, steps=3))
    sampler = result.method.sampler()
    network = result.method.network
    z = sampler.sample_noise(20, 4)
    with torch.no_grad():
        torch.testing.assert_close(sampler.sample(20, 4), result.method.to_target(network(z)), atol=1e-5, rtol=1e-5)
    assert sampler.config["method"] == method and sampler.config["target"] == {"kind": "gaussian", "dim": 3}
    assert torch.equal(load(sampler.to_zip_bytes()).sample(20, 4), sampler.sample(20, 4))
    result.method.step()  # later training does not change the snapshot
    assert torch.equal(sampler.sample(20, 4), load(sampler.to_zip_bytes()).sample(20, 4))


def build(method: str, options: dict, target: dict | None = None):
    from inference_core.spec import validate_job_spec
    from inference_core.training import build_method

    return build_method(validate_job_spec(spec(method, options, target)))


def test_lambda_rules() -> None:
    # k = d in raw coordinates: no λ term by default (ALF), the noise is k-dimensional and f = g exactly (whitened,
    # λ = 1: test_generative_precondition)
    full = build("gpvi", {"generator": {"hidden": [4], "noise_dim": 3}, "precondition": "none"})
    assert full.network.lam_float() == 0.0 and full.network.noise_dim == 3
    z = torch.randn(5, 3)
    with torch.no_grad():
        assert torch.equal(full.network(z), full.network.output(full.network.features(z)))
    assert full.sampler().config["generator"]["lambda"] == 0.0
    # k = d with an explicit λ: f = g + λz
    explicit = build("gpvi", {"generator": {"hidden": [4], "noise_dim": 3, "lambda": 0.5}})
    with torch.no_grad():
        g_only = explicit.network.output(explicit.network.features(z))
        torch.testing.assert_close(explicit.network(z), g_only + 0.5 * z)
    # k < d: λ = 1 (paper), noise of width d
    slim = build("gpvi", {"generator": {"hidden": [4], "noise_dim": 2}})
    assert slim.network.lam_float() == 1.0 and slim.network.noise_dim == 3
    # amortised methods: λ = 0 and noise of width k
    amortised = build("amortized_svgd", {"generator": {"hidden": [4], "noise_dim": 2}})
    assert amortised.network.lam_float() == 0.0 and amortised.network.noise_dim == 2


@pytest.mark.parametrize(("method", "generator", "match"), [
    ("gpvi", {"noise_dim": 2, "lambda": 0.0}, "lambda > 0"),
    ("gpvi_exact", {"noise_dim": 2, "lambda": 0.0}, "lambda > 0"),
    ("gpvi", {"noise_dim": 4}, "exceeds the target dimension"),
    ("amortized_svgd", {"noise_dim": 3, "lambda_trainable": True}, "trainable lambda"),
])
def test_bad_generator_options_are_method_option_errors(method: str, generator: dict, match: str) -> None:
    with pytest.raises(errors.MethodOptionsInvalid, match=match):
        build(method, {"generator": {"hidden": [4], **generator}})


def test_option_schemas_reject_unknown_and_bad_fields() -> None:
    for options in [{"helper": "cubic"}, {"bandwidth": {"rule": "fixed"}}, {"generator": {"hidden": [0]}},
                    {"helper_network": {"steps": 0}}, {"surprise": 1}]:
        with pytest.raises(errors.MethodOptionsInvalid):
            run(spec("gpvi", options, steps=1))


@pytest.mark.parametrize(("helper", "layers", "hidden_layers"), [("pairwise", None, 3), ("matrix", None, 1),
                                                                  ("matrix", 2, 2), ("pairwise", 0, 0)])
def test_each_helper_has_its_default_depth_unless_given(helper: str, layers: int | None, hidden_layers: int) -> None:
    network = {} if layers is None else {"hidden_layers": layers}
    method = build("gpvi", {"helper": helper, "generator": {"hidden": [4], "noise_dim": 2},
                            "helper_network": {"hidden_width": 5, **network}})
    if helper == "matrix":  # k → 5 (× hidden_layers) → k²
        assert method.helper.net.shapes == [(5, 2)] + [(5, 5)] * (hidden_layers - 1) + [(4, 5)]
    else:  # two input branches, then hidden_layers layers of width 2·5 and the output
        assert len(method.helper.trunk.layers) == hidden_layers + 1


def test_a_trainable_lambda_moves() -> None:
    result = run(spec("gpvi", {"generator": {"hidden": [], "noise_dim": 2, "lambda": 0.8, "lambda_trainable": True,
                                             "lambda_lr": 0.05}}, steps=20))
    assert abs(result.method.network.lam_float() - 0.8) > 1e-3
    assert result.method.sampler().config["generator"]["lambda"] == pytest.approx(result.method.network.lam_float())


def test_a_bnn_hypernetwork_starts_at_the_targets_initialisation_scale() -> None:
    target = {"kind": "bnn", "dataset": BLR_DATA, "hidden": [6], "task": "regression"}
    # noise_holdout 0: the draws read out as initialised, without the held-out σ factor (test_gpvi_noise_holdout)
    method = build("gpvi", {"generator": {"hidden": [16], "noise_dim": 4}, "noise_holdout": 0}, target)
    assert method.init_matched and method.network.lam_float() == pytest.approx(HYPERNETWORK_LAMBDA)
    draws = method.sampler().sample(4000, 0).double()
    reference = method.target.initial_particles(4000, torch.Generator().manual_seed(9)).double()
    assert draws.shape == reference.shape == (4000, method.target.dim)
    # per-coordinate spread: max(s, λ) of the target's init, within sampling error
    expected = torch.maximum(reference.std(0), torch.tensor(HYPERNETWORK_LAMBDA, dtype=torch.float64))
    torch.testing.assert_close(draws.std(0), expected, atol=0.05, rtol=0.15)
    torch.testing.assert_close(draws.mean(0), reference.mean(0), atol=0.06, rtol=0)
    layout = method.sampler().config["layout"]
    assert layout[0]["name"] == "layer0.weight" and layout[-1]["name"] == "log_noise_precision"
    method.step()  # and it trains


@pytest.mark.parametrize("helper", ["pairwise", "matrix"])
def test_a_hypernetwork_for_a_ten_thousand_weight_bnn_trains_in_the_block_form(helper: str) -> None:
    """k = 16 noise inputs, d = 10,402 weights: the helper and the solves are k-sized, so a step is cheap."""
    from inference_core.spec import validate_job_spec
    from inference_core.training import build_method

    g = torch.Generator().manual_seed(0)
    X = torch.randn(64, 50, generator=g)
    target = {"kind": "bnn", "dataset": {"X": X.tolist(), "y": X[:, 0].tolist()}, "hidden": [200],
              "task": "regression"}
    method = build_method(validate_job_spec({
        "method": "gpvi", "target": target, "num_particles": 32, "steps": 2, "seed": 0,
        "options": {"helper": helper, "generator": {"hidden": [64], "noise_dim": 16}}}))
    assert method.target.dim == 50 * 200 + 200 + 200 + 1 + 1
    before = method.network.output.weight.detach().clone()
    method.step()
    method.step()
    after = method.network.output.weight.detach()
    assert torch.isfinite(after).all() and not torch.equal(before, after)
    assert method.sampler().sample(3, 0).shape == (3, method.target.dim)


def test_the_pairwise_helper_refuses_an_oversized_pair_batch() -> None:
    from inference_core.spec import validate_job_spec
    from inference_core.training import build_method

    big = {"kind": "gaussian", "mean": [0.0] * 200, "cov": torch.eye(200).tolist()}
    spec_big = {"method": "gpvi", "target": big, "num_particles": 1000, "steps": 1,
                "options": {"generator": {"hidden": [], "noise_dim": 200}, "helper": "pairwise"}}
    with pytest.raises(errors.MethodOptionsInvalid, match="helper 'matrix'"):
        build_method(validate_job_spec(spec_big))
    spec_big["options"]["helper"] = "matrix"
    assert build_method(validate_job_spec(spec_big)).helper is not None
