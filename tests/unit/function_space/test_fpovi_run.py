"""f-POVI through the run loop: bit-identical resume from a serialised checkpoint, classification on iris,
the particle layout (MAP noise in the target's slot), function_posterior targets, and clear errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from fpovi_support import X3, Y3, build, regression_target_spec

from inference_core import errors
from inference_core.catalog import METHODS, resolve
from inference_core.spec import validate_job_spec
from inference_core.targets import BuildContext, build_target
from inference_core.training import build_method
from tests.support.resume import straight_stopped_resumed

FPOVI = ["fsvgd", "fwsgld", "fpisgld"]


def job(name: str, target: dict[str, Any], options: dict[str, Any] | None = None, steps: int = 12,
        n: int = 8) -> dict[str, Any]:
    return {"method": name, "target": target, "num_particles": n, "steps": steps, "seed": 5,
            "options": {"extra_points": 10, **(options or {})}, "checkpoint_every": 4,
            "eval": {"ksd": False, "mmd": False}}




@pytest.mark.parametrize("name", FPOVI)
def test_resume_from_a_serialised_checkpoint_is_bit_identical(name: str) -> None:
    straight, first, resumed = straight_stopped_resumed(job(name, regression_target_spec()))
    assert resumed.steps_completed == 12
    assert torch.equal(resumed.particles, straight.particles)
    assert not torch.equal(straight.particles, first.particles)


def accuracy(method) -> float:
    """Training accuracy of the particle-averaged class probabilities."""
    target = method.target
    probs = torch.softmax(target.forward(method.particles(), target.X), -1).mean(0)
    return float((probs.argmax(-1) == target.y).float().mean())


@pytest.mark.parametrize("name", FPOVI)
def test_classification_on_iris_improves_accuracy(name: str) -> None:
    target = {"kind": "bnn", "task": "classification", "dataset": "sklearn:iris", "standardize": True,
              "hidden": [16], "prior_std_scaling": "fan_out", "batch_size": 32}
    method = build_method(validate_job_spec(job(name, target, {"extra_points": 20}, n=10)))
    before = accuracy(method)
    for _ in range(150):
        info = method.step()
    after = accuracy(method)
    assert "noise_std" not in info and np.isfinite(info["function_force_norm"])
    assert before < 0.8 and after > 0.9, (before, after)
    assert method.particles().shape == (10, method.target.dim)


@pytest.mark.parametrize(("noise", "slot"), [({"type": "inverse_gamma_std"}, "log_noise_std"),
                                             ({"type": "gamma_precision"}, "log_noise_precision")])
def test_particles_carry_the_map_noise_in_the_target_slot(noise: dict, slot: str) -> None:
    method, target = build("fsvgd", regression_target_spec(noise=noise), {"extra_points": 10})
    assert torch.allclose(method.noise_std(), torch.full((6,), 0.5, dtype=torch.float64))
    for _ in range(5):
        method.step()
    particles = method.particles()
    assert particles.shape == (6, target.dim)
    log_std = method.noise_std().log()
    expected = log_std if slot == "log_noise_std" else -2 * log_std
    assert torch.equal(target.network.extra(particles, slot), expected)
    assert torch.equal(particles[:, : target.network.n_weights], method.weights.detach())
    assert not torch.allclose(log_std, torch.full_like(log_std, np.log(0.5)))  # the MAP step moved σ
    assert torch.isfinite(target.log_prob(particles)).all()


def test_fixed_noise_keeps_its_std() -> None:
    method, _ = build("fwsgld", regression_target_spec(noise={"type": "fixed", "std": 0.3}), {"extra_points": 10})
    for _ in range(3):
        info = method.step()
    assert info["noise_std"] == pytest.approx(0.3)
    assert torch.allclose(method.noise_std(), torch.full((6,), 0.3, dtype=torch.float64))


def test_function_posterior_with_a_bnn_prior_runs_and_fits() -> None:
    target = {"kind": "function_posterior", "dataset": {"X": X3.tolist(), "y": Y3.tolist()}, "standardize": True,
              "prior": {"type": "bnn", "hidden": [16], "prior_std_scaling": "fan_out"},
              "likelihood": {"noise_std": 0.3}}
    method = build_method(validate_job_spec(job("fpisgld", target, n=8)))
    X, y = method.target.X, method.target.y
    before = float((method.target.forward(method.particles(), X)[..., 0].mean(0) - y).square().mean())
    for _ in range(200):
        method.step()
    after = float((method.target.forward(method.particles(), X)[..., 0].mean(0) - y).square().mean())
    assert method.particles().shape == (8, method.target.dim)
    assert after < 0.5 * before, (before, after)


def test_catalog_entries() -> None:
    for name in FPOVI:
        info = METHODS[name]
        assert info.family == "function_space" and info.target_kinds == {"bnn", "function_posterior"}
        assert resolve(info.builder).name == name
        info.schema.model_validate({})


@pytest.mark.parametrize(
    ("options", "message"),
    [({"prior_points": 3}, "prior_points"), ({"extra_points": -1}, "extra_points"),
     ({"eigen_floor": 0}, "eigen_floor"), ({"pullback": "exact"}, "pullback"), ({"no_such_option": 1}, "no_such")],
)
def test_bad_options_are_clear_errors(options: dict, message: str) -> None:
    with pytest.raises(errors.MethodOptionsInvalid, match=message):
        validate_job_spec(job("fsvgd", regression_target_spec(), options))


@pytest.mark.parametrize(
    ("target", "message"),
    [({"kind": "gaussian", "mean": [0.0, 0.0], "cov": [[1.0, 0.0], [0.0, 1.0]]}, "does not accept target kind 'gaussian'"),
     ({"kind": "function_posterior", "dataset": {"X": X3[:, :1].tolist(), "y": Y3.tolist()},
       "prior": {"type": "gp"}}, "'gp' prior"),
     ({**regression_target_spec(), "prior_std": None, "weight_precision_prior": {"a0": 1, "b0": 0.1},
       "prior_std_scaling": "none"}, "hierarchical")],
)
def test_unsupported_targets_are_clear_errors(target: dict, message: str) -> None:
    with pytest.raises(errors.MethodUnsupportedForTarget, match=message):
        build_method(validate_job_spec(job("fsvgd", target)))


def test_a_weight_space_target_built_directly_is_refused() -> None:
    target = build_target({"kind": "gaussian", "mean": [0.0], "cov": [[1.0]]}, BuildContext())
    info = METHODS["fsvgd"]
    with pytest.raises(errors.MethodUnsupportedForTarget, match="'bnn' or 'function_posterior'"):
        resolve(info.builder)(target, info.schema.model_validate({}), 4, 0, torch.device("cpu"))
