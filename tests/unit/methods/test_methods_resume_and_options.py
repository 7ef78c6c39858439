"""Every particle method in the catalog: registered with a schema and builder, validates its options,
uses the minibatch it is given (scores only where needed), and resumes bit-identically from a serialised
checkpoint. Parametrised from catalog.METHODS, so a method added later is covered automatically."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from methods_support import blr_data

from inference_core import errors, run
from inference_core.catalog import METHODS, resolve
from inference_core.kernels import RBF
from inference_core.methods.kernel_sums import cross_median_bandwidth
from inference_core.methods.speedups import induced_ksd
from inference_core.spec import validate_job_spec
from inference_core.targets.base import Target
from inference_core.training import build_method
from tests.support.resume import straight_stopped_resumed

PARTICLE_METHODS = sorted(name for name, info in METHODS.items() if info.family == "particle")
X, Y = blr_data(50, 3, seed=2)
# Minibatches of 10 of 50 rows: the batch draws come from the method's generator, so resuming must restore it.
BLR = {"kind": "bayesian_linear_regression", "dataset": {"X": X.tolist(), "y": Y.tolist()}, "batch_size": 10}

# Variants that exercise extra state or randomness: a running-average bandwidth (rule state), the batched
# adversarial ascent (its own draws), Hutchinson probes (drawn from the generator), AdaGrad-momentum.
VARIANTS: list[tuple[str, dict[str, Any]]] = [(name, {}) for name in PARTICLE_METHODS] + [
    ("svgd", {"kernel": {"bandwidth": {"rule": "running_average"}}, "optimizer": {"name": "adagrad_momentum"}}),
    ("svgd_induced_adversarial", {"batched": True, "batch_size": 8, "ascent_steps": 3}),
    ("ksd", {"critic": {"trace": "hutchinson", "hidden": [16]}}),
    ("svgd_subset", {"kernel": {"name": "imq"}, "bandwidth": {"source": "kernel"}}),
    ("svgd", {"precondition": "pathfinder"}),  # the particles saved in whitened coordinates, the whitening redone
]


def spec(name: str, options: dict[str, Any], steps: int = 12) -> dict[str, Any]:
    base: dict[str, Any] = {"optimizer": {"lr": 0.02}, "init": {"loc": 5.0}}
    if "subset_size" in METHODS[name].schema.model_fields:
        base["subset_size"] = 7
    if name == "svgd_induced_adversarial":
        base["ascent_steps"] = 3
    if name == "ksd":
        base["critic"] = {"hidden": [16]}
    merged = {**base, **options}
    return {"method": name, "target": BLR, "num_particles": 24, "steps": steps, "seed": 5, "options": merged,
            "checkpoint_every": 4, "eval": {"ksd": False, "mmd": False}}




@pytest.mark.parametrize(("name", "options"), VARIANTS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(VARIANTS)])
def test_resume_from_a_serialised_checkpoint_is_bit_identical(name: str, options: dict[str, Any]) -> None:
    straight, first, resumed = straight_stopped_resumed(spec(name, options))
    assert resumed.steps_completed == 12
    assert torch.equal(resumed.particles, straight.particles)
    assert not torch.equal(straight.particles, first.particles)  # the particles did move after step 7


@pytest.mark.parametrize("name", PARTICLE_METHODS)
def test_registered_with_a_schema_a_builder_and_the_weight_space_kinds(name: str) -> None:
    info = METHODS[name]
    assert info.paper and info.summary
    assert "gaussian" in info.target_kinds and "function_posterior" not in info.target_kinds
    cls = resolve(info.builder)
    assert cls.name == name
    info.schema.model_validate({})  # every option has a default


@pytest.mark.parametrize("name", PARTICLE_METHODS)
def test_unknown_options_are_refused(name: str) -> None:
    with pytest.raises(errors.MethodOptionsInvalid):
        validate_job_spec({"method": name, "target": BLR, "options": {"no_such_option": 1}})


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("svgd_subset", {"subset_size": 25}, "subset_size"),
        ("svgd_induced", {"subset_size": 0}, "subset_size"),
        ("gfsf", {"eps": 0}, "eps"),
        ("ksd", {"critic": {"hidden": []}}, "hidden"),
        ("ksd", {"critic": {"trace": "approx"}}, "trace"),
        ("svgd_induced_adversarial", {"update": "everything"}, "update"),
        ("svgd_subset_cf", {"max_condition": 0.5}, "max_condition"),
    ],
)
def test_bad_options_are_clear_errors(name: str, options: dict[str, Any], message: str) -> None:
    with pytest.raises(errors.MethodOptionsInvalid, match=message):
        run({"method": name, "target": BLR, "num_particles": 24, "steps": 1, "options": options})


class RecordingTarget(Target):
    """N(0, I) whose batches are sentinels: records the rows and batch of every score call."""

    def __init__(self, dim: int):
        self.dim = dim
        self.calls: list[tuple[int, object]] = []
        self.batches: list[object] = []

    def log_prob(self, x: torch.Tensor, batch: object | None = None) -> torch.Tensor:
        return -0.5 * x.square().sum(-1)

    def score(self, x: torch.Tensor, batch: object | None = None) -> torch.Tensor:
        self.calls.append((x.shape[0], batch))
        return -x

    def sample_batch(self, generator: torch.Generator) -> object:
        token = object()
        self.batches.append(token)
        return token


@pytest.mark.parametrize("name", PARTICLE_METHODS)
def test_each_step_uses_its_batch_and_scores_only_where_needed(name: str) -> None:
    info = METHODS[name]
    extra = {"subset_size": 6} if "subset_size" in info.schema.model_fields else {}
    options = info.schema.model_validate({"critic": {"hidden": [8]}} if name == "ksd" else extra)
    target = RecordingTarget(2)
    method = resolve(info.builder)(target, options, 20, 0, torch.device("cpu"))
    for _ in range(2):
        method.step()
    assert len(target.batches) == 2
    assert all(batch in target.batches for _, batch in target.calls)
    assert {batch for _, batch in target.calls} == set(target.batches)
    rows = {r for r, _ in target.calls}
    assert rows == ({6} if name in ("svgd_subset", "svgd_subset_cf") else {20})


def test_method_state_holds_the_critic_and_the_adversarial_histories() -> None:
    ksd = build_method(validate_job_spec(spec("ksd", {})))
    ksd.step()
    state = ksd.state_dict()
    assert set(state["critic"]) == set(ksd.critic.network.state_dict()) and state["critic_optimizer"]["state"]
    adv = build_method(validate_job_spec(spec("svgd_induced_adversarial", {})))
    adv.step()
    state = adv.state_dict()
    assert state["points_history"].shape == (7, 3) and state["log_h_history"].shape == ()


def test_adversarial_ascent_raises_the_induced_ksd_and_moves_the_bandwidth() -> None:
    gauss = {"kind": "gaussian", "mean": [1.0, -2.0], "cov": [[1.0, 0.8], [0.8, 2.0]]}

    def build(**options: Any) -> Any:
        return build_method(validate_job_spec({"method": "svgd_induced_adversarial", "target": gauss,
                                               "num_particles": 40, "options": {"subset_size": 8, **options}}))

    method = build(ascent_steps=10)
    x = method.particles()
    state = method.generator.get_state()
    y0 = x[torch.randint(40, (8,), generator=method.generator)]  # the draw the step will make
    method.generator.set_state(state)
    h0 = cross_median_bandwidth(x, y0)
    start = float(induced_ksd(x, method.target.score(x), y0, RBF(h0)))
    _, info = method.direction(x, None)
    assert info["bandwidth_start"] == pytest.approx(float(h0))
    assert info["induced_ksd"] > start and info["bandwidth"] != info["bandwidth_start"]
    _, info = build(update="points").direction(x, None)
    assert info["bandwidth"] == info["bandwidth_start"]
    _, info = build(ascent_steps=0).direction(x, None)
    assert info["bandwidth"] == info["bandwidth_start"] and "induced_ksd" not in info
