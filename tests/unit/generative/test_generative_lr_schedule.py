"""The generator's learning-rate schedule (`lr_schedule`, `lr_final_factor`; GenerativeMethod.scheduled_lr): the
rate each step takes against the half-cosine written out independently, the defaults (cosine for GPVI's BNN
hypernetworks, constant elsewhere), the rate the optimiser really applied, a constant rate without a step count,
and a resumed run that takes the same rates."""

from __future__ import annotations

import math

import pytest
import torch

from inference_core import run
from inference_core.methods.optim import cosine_lr_factor
from inference_core.serialization import state_from_bytes
from inference_core.spec import validate_job_spec
from inference_core.training import RunHooks, build_method
from tests.support.resume import StopAt
from tests.unit.generative.test_generative_coupling import figure1_target

GAUSSIAN = {"kind": "gaussian", "mean": [0.0, 1.0], "cov": [[1.0, 0.3], [0.3, 2.0]]}


def spec(target: dict, steps: int, method: str = "gpvi", **options) -> dict:
    noise_dim = min(8, len(target.get("mean", [0] * 8)))
    return {"method": method, "target": target, "num_particles": 20, "steps": steps, "seed": 0, "device": "cpu",
            "checkpoint_every": 4, "options": {"generator": {"hidden": [16], "noise_dim": noise_dim}, **options},
            "eval": {"ksd": False, "mmd": False}}


class RecordRates(RunHooks):
    def __init__(self) -> None:
        self.rates: list[float] = []

    def on_step(self, step: int, total_steps: int, metrics: dict[str, float]) -> None:
        self.rates.append(metrics["lr"])


def half_cosine(lr: float, final: float, steps: int) -> list[float]:
    """Step t (0-based) of `steps`: lr · (final + (1 − final) · (1 + cos(π t / steps)) / 2), written out here."""
    return [lr * (final + (1 - final) * (1 + math.cos(math.pi * t / steps)) / 2) for t in range(steps)]


def test_the_factor_runs_from_one_to_the_final_share_along_half_a_cosine() -> None:
    assert cosine_lr_factor(0, 100, 0.1) == 1.0
    assert cosine_lr_factor(50, 100, 0.1) == pytest.approx(0.55)
    assert cosine_lr_factor(100, 100, 0.1) == pytest.approx(0.1)
    assert cosine_lr_factor(250, 100, 0.1) == pytest.approx(0.1)  # past the end it stays at the floor
    assert cosine_lr_factor(25, 100, 0.0) == pytest.approx((1 + math.sqrt(0.5)) / 2)


def test_gpvi_decays_on_bnn_hypernetworks_and_keeps_the_rate_elsewhere() -> None:
    hooks = RecordRates()
    result = run(spec(figure1_target(), 10), hooks=hooks)
    assert result.method.lr_schedule == "cosine"
    assert hooks.rates == pytest.approx(half_cosine(1e-3, 0.1, 10), rel=1e-12)
    hooks = RecordRates()
    result = run(spec(GAUSSIAN, 6, precondition="none"), hooks=hooks)
    assert result.method.lr_schedule == "constant"
    assert hooks.rates == [1e-3] * 6
    assert run(spec(figure1_target(), 1, lr_schedule="constant")).method.lr_schedule == "constant"
    assert run(spec(GAUSSIAN, 1, "amortized_svgd")).method.lr_schedule == "constant"


def test_the_optimiser_applies_the_scheduled_rate() -> None:
    """The rate is the fused Adam's: its first step moves every parameter by lr · sign(g) (Adam's first update,
    m̂/√v̂ = g/|g|), so the largest move equals the scheduled rate of step 0; the last step's rate is the floor."""
    job = spec(GAUSSIAN, 8, "amortized_svgd", lr_schedule="cosine", lr_final_factor=0.25,
               optimizer={"name": "adam", "lr": 0.01})
    method = build_method(validate_job_spec(job))
    method.plan(8)
    before = [p.detach().clone() for p in method.network.generator_parameters()]
    method.step()
    moves = torch.cat([(p.detach() - b).abs().flatten() for p, b in zip(method.network.generator_parameters(),
                                                                        before, strict=True)])
    assert float(moves.max()) == pytest.approx(0.01, rel=1e-3)
    for _ in range(7):
        metrics = method.step()
    assert metrics["lr"] == pytest.approx(0.01 * cosine_lr_factor(7, 8, 0.25))
    assert method.optimizer.param_groups[0]["lr"] == metrics["lr"]


def test_a_method_stepped_without_a_step_count_keeps_its_rate() -> None:
    method = build_method(validate_job_spec(spec(figure1_target(), 50)))
    assert method.total_steps is None
    assert [method.step()["lr"] for _ in range(3)] == [1e-3] * 3


def test_a_resumed_run_takes_the_same_rates_and_ends_bit_identical() -> None:
    job = spec(figure1_target(), 12)
    straight = run(job)
    hooks = StopAt(4)
    run(job, hooks=hooks)
    rates = RecordRates()
    resumed = run(job, resume_state=state_from_bytes(hooks.checkpoints[4]), hooks=rates)
    assert rates.rates == pytest.approx(half_cosine(1e-3, 0.1, 12)[4:], rel=1e-12)
    assert torch.equal(resumed.method.sampler().sample(30, 2), straight.method.sampler().sample(30, 2))
