"""Bandwidth rules against direct numpy computations; determinism; running-average checkpoints."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from inference_core.kernels import (
    FixedRule,
    MedianRule,
    RunningAverageRule,
    ScaledRule,
    bandwidth_rule_from_options,
    median_heuristic,
    median_sq_dist,
)
from inference_core.schemas.kernels import BandwidthOptions, KernelOptions

DIVISORS = {
    "log_n": math.log,
    "log_n_plus_1": lambda n: math.log(n + 1),
    "log_n_squared": lambda n: math.log(n * n),
    "none": lambda n: 1.0,
}


def numpy_median(x: np.ndarray, include_diagonal: bool) -> float:
    diff = x[:, None, :] - x[None, :, :]
    sq = (diff * diff).sum(-1)
    if include_diagonal:
        return float(np.median(sq))  # full n×n matrix, zero diagonal included
    return float(np.median(sq[np.triu_indices(len(x), 1)]))


def cloud(n, d=3, seed=0, dtype=torch.float64, offset=0.0):
    g = torch.Generator().manual_seed(seed)
    return offset + torch.randn(n, d, generator=g, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("n", [2, 3, 50, 51, 200])
@pytest.mark.parametrize("include_diagonal", [False, True])
@pytest.mark.parametrize("divisor", list(DIVISORS))
def test_exact_median_matches_numpy(n, include_diagonal, divisor):
    x = cloud(n, seed=n)
    expected = numpy_median(x.numpy(), include_diagonal) / DIVISORS[divisor](n)
    for backend in ("dense", "chunked"):
        h = median_heuristic(x, divisor=divisor, include_diagonal=include_diagonal, backend=backend)
        assert h.dim() == 0 and not h.requires_grad and h.dtype == torch.float64
        assert math.isclose(float(h), expected, rel_tol=1e-12)


def test_median_in_float32_far_from_origin_and_many_blocks():
    x = cloud(300, 5, seed=1, dtype=torch.float32, offset=1e3) * 1.0
    x = 1e3 + (x - 1e3) * 1e-2
    expected = numpy_median(x.double().numpy(), False)
    got = median_sq_dist(x, memory_budget=4096)
    assert math.isclose(got, expected, rel_tol=1e-4)


def test_median_zero_gives_unit_bandwidth_and_grad_is_detached():
    x = torch.ones(10, 2, requires_grad=True)
    h = median_heuristic(x)
    assert float(h) == 1.0 and not h.requires_grad
    assert float(median_heuristic(torch.zeros(1, 3))) == 1.0


def test_subsampled_median_is_deterministic_given_the_seed():
    x = cloud(3000, 4, seed=2)
    a = median_sq_dist(x, method="subsample", subsample_size=256, seed=7)
    b = median_sq_dist(x.clone(), method="subsample", subsample_size=256, seed=7)
    c = median_sq_dist(x, method="subsample", subsample_size=256, seed=8)
    assert a == b and a != c
    exact = median_sq_dist(x, method="exact")
    assert abs(a / exact - 1) < 0.1
    # It is the exact median of some 256 of the particles: check against numpy on the seeded subset.
    idx = torch.randperm(3000, generator=torch.Generator().manual_seed(7))[:256].sort().values
    assert math.isclose(a, numpy_median(x[idx].numpy(), False), rel_tol=1e-12)
    # Divisor uses the full n.
    h = median_heuristic(x, method="subsample", subsample_size=256, seed=7)
    assert math.isclose(float(h), a / math.log(3000), rel_tol=1e-12)
    # Subsample at least n: exact.
    assert median_sq_dist(x[:100], method="subsample", subsample_size=256) == median_sq_dist(x[:100])


def test_auto_method_switches_to_subsample_for_large_n():
    x = cloud(5000, 2, seed=3, dtype=torch.float32)
    assert median_sq_dist(x) == median_sq_dist(x, method="subsample")


def test_exact_median_refuses_unbounded_memory():
    with pytest.raises(ValueError, match="subsample"):
        median_sq_dist(torch.zeros(12000, 1), method="exact")


def test_fixed_scaled_and_median_rules():
    x = cloud(40, seed=4)
    assert float(FixedRule(0.3)(x)) == 0.3
    med = MedianRule(divisor="log_n_plus_1")
    assert math.isclose(float(med(x)), numpy_median(x.numpy(), False) / math.log(41), rel_tol=1e-12)
    assert math.isclose(float(ScaledRule(2.5, MedianRule())(x)), 2.5 * float(MedianRule()(x)), rel_tol=1e-15)
    for rule in (FixedRule(0.3), med):
        assert rule.state_dict() == {}
        with pytest.raises(ValueError):
            rule.load_state_dict({"value": 1.0})
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            FixedRule(bad)
        with pytest.raises(ValueError):
            ScaledRule(bad, med)


def trajectory(steps, seed=5):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(30, 2, generator=g, dtype=torch.float64)
    return [x * (1 + 0.3 * t) + 0.1 * torch.randn(30, 2, generator=g, dtype=torch.float64) for t in range(steps)]


def test_running_average_is_an_ema_of_the_median():
    xs = trajectory(5)
    rule = RunningAverageRule(MedianRule(), momentum=0.8)
    expected = None
    for x in xs:
        current = numpy_median(x.numpy(), False) / math.log(30)
        expected = current if expected is None else 0.8 * expected + 0.2 * current
        assert math.isclose(float(rule(x)), expected, rel_tol=1e-12)
    assert rule.steps == 5


def test_running_average_resumes_bit_identically():
    xs = trajectory(8)
    uninterrupted = RunningAverageRule(MedianRule(), momentum=0.9)
    full = [uninterrupted(x) for x in xs]

    first = RunningAverageRule(MedianRule(), momentum=0.9)
    for x in xs[:3]:
        first(x)
    state = json.loads(json.dumps(first.state_dict()))  # survives a JSON checkpoint
    resumed = RunningAverageRule(MedianRule(), momentum=0.9)
    resumed.load_state_dict(state)
    for x, expected in zip(xs[3:], full[3:], strict=True):
        assert torch.equal(resumed(x), expected)
    with pytest.raises(ValueError):
        resumed.load_state_dict({"value": 1.0})
    with pytest.raises(ValueError):
        resumed.load_state_dict({"value": "x", "steps": 1, "base": {}})


def test_rule_from_options_covers_every_rule():
    x = cloud(25, seed=6)
    exact = numpy_median(x.numpy(), True) / math.log(25)
    default = bandwidth_rule_from_options(BandwidthOptions())
    assert math.isclose(float(default(x)), numpy_median(x.numpy(), False) / math.log(25), rel_tol=1e-12)
    diag = bandwidth_rule_from_options(BandwidthOptions(include_diagonal=True))
    assert math.isclose(float(diag(x)), exact, rel_tol=1e-12)
    assert float(bandwidth_rule_from_options(BandwidthOptions(rule="fixed", value=2.0))(x)) == 2.0
    scaled = bandwidth_rule_from_options(BandwidthOptions(rule="scaled", factor=3.0, include_diagonal=True))
    assert math.isclose(float(scaled(x)), 3 * exact, rel_tol=1e-12)
    sub = bandwidth_rule_from_options(BandwidthOptions(rule="median_subsampled", subsample_size=10, seed=1))
    assert isinstance(sub, MedianRule) and sub.method == "subsample"
    avg = bandwidth_rule_from_options(BandwidthOptions(rule="running_average", momentum=0.5, average_of="scaled"))
    assert isinstance(avg, RunningAverageRule) and isinstance(avg.base, ScaledRule)
    assert avg.momentum == 0.5


def test_schema_defaults_and_validation():
    opts = KernelOptions()
    assert (opts.name, opts.backend, opts.precision) == ("rbf", "auto", "ieee")
    b = opts.bandwidth
    assert (b.rule, b.divisor, b.include_diagonal) == ("median", "log_n", False)
    with pytest.raises(ValidationError):
        BandwidthOptions(rule="fixed")
    with pytest.raises(ValidationError):
        BandwidthOptions(value=1.0)
    with pytest.raises(ValidationError):
        BandwidthOptions(momentum=1.0)
    with pytest.raises(ValidationError):
        KernelOptions(imq_beta=0.5)
    with pytest.raises(ValidationError):
        KernelOptions(unknown=1)
    with pytest.raises(ValueError):
        median_heuristic(torch.zeros(3, 2), divisor="log2")
    with pytest.raises(ValueError):
        median_heuristic(torch.zeros(3, 2), method="quantile")


def test_kernel_from_options_builds_rbf_and_imq():
    from inference_core.kernels import IMQ, RBF, kernel_from_options

    assert kernel_from_options(KernelOptions(), 2.0) == RBF(2.0)
    imq = kernel_from_options(KernelOptions(name="imq", imq_c=2.0, imq_beta=-1.0), 3.0)
    assert imq == IMQ(2.0, -1.0, 3.0)
    with pytest.raises(ValueError):
        kernel_from_options(BandwidthOptions(), 1.0)


@pytest.mark.parametrize("count", [1, 2, 7, 10])
def test_median_value_is_numpys_median_and_leaves_its_input_alone(count: int) -> None:
    from inference_core.kernels.bandwidth import median_value

    values = torch.randn(count, generator=torch.Generator().manual_seed(count), dtype=torch.float32)
    before = values.clone()
    assert median_value(values) == float(np.median(values.double().numpy()))
    assert torch.equal(values, before)


@pytest.mark.parametrize("count", [1, 2, 7, 10, 1001])
def test_the_sorting_median_of_other_devices_is_numpys_median_with_inf_padding_ignored(count: int) -> None:
    """The GPU path (one sort; kthvalue is slow on one long slice) checked on CPU values: the median of the
    `count` finite entries of a scratch tensor padded with +inf, as the distance matrix's diagonal is."""
    from inference_core.kernels.bandwidth import _median_by_sort, _select_median

    finite = torch.randn(count, generator=torch.Generator().manual_seed(count), dtype=torch.float32)
    padded = torch.cat([finite, torch.full((count // 3 + 1,), math.inf)])[torch.randperm(count + count // 3 + 1, generator=torch.Generator().manual_seed(0))]
    expected = float(np.median(finite.double().numpy()))
    assert _median_by_sort(padded, (count - 1) // 2, count // 2) == expected
    assert _select_median(padded.clone(), count) == expected  # the CPU path agrees


def test_distance_median_over_all_entries_distinct_pairs_and_the_leading_block() -> None:
    from inference_core.kernels.bandwidth import DISTANCE_MEDIAN_MAX_SIDE, bandwidth_value, distance_median

    g = torch.Generator().manual_seed(3)
    cross = torch.rand(5, 4, generator=g, dtype=torch.float64)
    assert distance_median(cross) == float(np.median(cross.numpy()))
    square = torch.rand(6, 6, generator=g, dtype=torch.float64)
    assert distance_median(square, distinct_pairs=True) == float(np.median(square.numpy()[np.triu_indices(6, 1)]))
    big = torch.rand(DISTANCE_MEDIAN_MAX_SIDE + 3, DISTANCE_MEDIAN_MAX_SIDE, generator=g)
    side = DISTANCE_MEDIAN_MAX_SIDE
    assert distance_median(big) == float(np.median(big[:side, :side].double().numpy()))
    assert bandwidth_value(2.0, "log_n", 8) == 2.0 / math.log(8)
    assert bandwidth_value(0.0, "log_n", 8) == 1.0 == bandwidth_value(float("nan"), "none", 8)
    assert bandwidth_value(float("inf"), "none", 8) == 1.0 == bandwidth_value(3.0, "log_n", 1)
