"""The fast path of the `svgd` step as a job runs it (issue 45, item 4; benchmarks/svgd_step.py) against the
reference: the bracketed exact median (bit-identical order statistics), the reuse of the median's distance
matrix for the kernel (`kernels.chunked.stein_sums_from_sq`), the padded GEMM width, numpy's exp and the
data-major logistic-regression score.

Tolerances, relative to max |φ| of a float64 reference (autograd score, numpy median, dense direct-difference
direction): the job's φ within 2e-6 in float32 (measured 1e-6 at n = 400) and 2e-11 in float64, the same
after one SGD step (lr 1e-3, its rounding of x + lr·φ included) within 1e-5 / 1e-10; kernel-level φ within
1e-5 / 1e-10; the fast path against the old one within the same bounds; medians exactly equal (the selection is
exact whichever way it finds the order statistics)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import inference_core.kernels.bandwidth as bw
from inference_core.kernels import MedianRule, RunningAverageRule, ScaledRule, median_sq_dist
from inference_core.kernels import svgd_direction as kernels_svgd_direction
from inference_core.kernels.chunked import exp_, gemm_width, sq_dists, stein_sums_from_sq
from inference_core.kernels.common import centre
from inference_core.kernels.functions import RBF
from inference_core.methods import svgd as svgd_module
from inference_core.methods.directions import reuses_sq_dists, svgd_direction
from inference_core.spec import admit
from inference_core.training import build_method


def reference_pair(values: np.ndarray, lo: int, hi: int) -> float:
    ordered = np.sort(values.astype(np.float64), kind="stable")  # NaN last, as numpy's partition
    return 0.5 * (float(ordered[lo]) + float(ordered[hi]))


def arrays(dtype) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    size = 3 * bw.BRACKET_MIN_VALUES + 17
    out = {
        "normal": rng.standard_normal(size),
        "ties": rng.integers(0, 7, size).astype(np.float64),
        "sorted": np.sort(rng.random(size)),
        "constant": np.full(size, 2.5),
        "inf padded": np.where(rng.random(size) < 0.2, np.inf, rng.random(size)),
        "with nan": np.where(rng.random(size) < 1e-4, np.nan, rng.random(size)),
    }
    return {k: v.astype(dtype) for k, v in out.items()}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bracketed_selection_is_exact_and_leaves_its_input_alone(dtype) -> None:
    for name, values in arrays(dtype).items():
        size = values.shape[0]
        for lo, hi in [((size - 1) // 2, size // 2), (0, 1), (size - 2, size - 1), (size // 3, size // 3)]:
            expected = reference_pair(values, lo, hi)
            tensor = torch.from_numpy(values.copy())
            kept = bw._order_stat_mean(tensor, lo, hi, keep=True)
            assert np.array_equal(tensor.numpy(), values, equal_nan=True), name
            scratch = bw._order_stat_mean(torch.from_numpy(values.copy()), lo, hi)
            if kept is None:  # only where keeping the input would take a copy: NaN order statistics here
                assert math.isnan(expected), (name, lo, hi)
                kept = scratch
            for got in (kept, scratch):
                assert (got == expected) or (math.isnan(got) and math.isnan(expected)), (name, lo, hi, got, expected)


def test_a_missed_bracket_falls_back_exactly(monkeypatch) -> None:
    values = arrays(np.float32)["normal"]
    size = values.shape[0]
    lo, hi = (size - 1) // 2, size // 2
    expected = reference_pair(values, lo, hi)
    monkeypatch.setattr(bw, "BRACKET_MARGINS", (-50.0,))  # an empty bracket: every try misses
    tensor = torch.from_numpy(values.copy())
    assert bw._order_stat_mean(tensor, lo, hi, keep=True) is None
    assert torch.equal(tensor, torch.from_numpy(values))
    assert bw._order_stat_mean(tensor, lo, hi) == expected
    # The rule then returns no matrix (the step computes its direction the ordinary way), and the same median.
    x = torch.randn(500, 4, generator=torch.Generator().manual_seed(0))
    xc, _ = centre(x)
    full = sq_dists(xc, xc, True, 2**28).numpy().reshape(-1)
    median, sq = bw.median_and_sq_dists(x, include_diagonal=True, keep=True)
    assert sq is None and median == reference_pair(full, (full.size - 1) // 2, full.size // 2)


@pytest.mark.parametrize("n", [40, 600])  # 600² distances go through the bracket, 40² through one introselect
@pytest.mark.parametrize("include_diagonal", [True, False])
def test_median_and_its_matrix(n: int, include_diagonal: bool) -> None:
    x = 3.0 + torch.randn(n, 5, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
    median, sq = bw.median_and_sq_dists(x, include_diagonal=include_diagonal, keep=True)
    xc, _ = centre(x)
    expected_sq = sq_dists(xc, xc, True, 2**28)
    assert torch.equal(sq, expected_sq) and torch.all(sq.diagonal() == 0)
    full = expected_sq.numpy()
    # Without the diagonal: over the n(n-1) off-diagonal entries, as the selection always took them (the Gram
    # form may round D_ij and D_ji differently, so not over one triangle).
    values = full.reshape(-1) if include_diagonal else full[~np.eye(n, dtype=bool)]
    count = values.shape[0]
    assert median == reference_pair(values, (count - 1) // 2, count // 2) == median_sq_dist(
        x, include_diagonal=include_diagonal)
    assert median == pytest.approx(float(np.median(values)), rel=1e-14)


def test_scaled_and_running_average_rules_give_the_same_h_and_state_with_the_matrix() -> None:
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(300, 3, generator=g) for _ in range(3)]
    for make in (lambda: ScaledRule(2.0, MedianRule(include_diagonal=True)),
                 lambda: RunningAverageRule(MedianRule(), 0.7)):  # fmt: skip
        plain, fused = make(), make()
        for x in xs:
            h, sq = fused.with_sq_dists(x)
            assert torch.equal(h, plain(x)) and sq is not None and sq.shape == (300, 300)
        assert fused.state_dict() == plain.state_dict()
    assert MedianRule(subsampled=True, subsample_size=100).with_sq_dists(xs[0])[1] is None  # not over all of x


@pytest.mark.parametrize("d", [1, 2, 7, 31])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_direction_from_the_medians_matrix_matches_the_dense_reference(d: int, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(d)
    n = 700
    x = (5.0 + 0.3 * torch.randn(n, d, generator=g, dtype=torch.float64)).to(dtype)
    score = torch.randn(n, d, generator=g, dtype=torch.float64).to(dtype)
    rule = MedianRule(include_diagonal=True)
    h, sq = rule.with_sq_dists(x)
    assert reuses_sq_dists(x, "rbf") and sq is not None
    fast = svgd_direction(x, score, h, sq=sq)
    reference = kernels_svgd_direction(x.double(), score.double(), float(h), backend="dense")
    old = svgd_direction(x, score, h)  # the path without the matrix
    # float32: points at 5 ± 0.3 lose about 2.5 digits in ‖x‖² + ‖y‖² − 2 x·y (25 against distances near 0.1), so
    # the direction is good to about 280 × eps₃₂ ≈ 2e-5 of its scale; measured up to 1.2e-5 (Intel Xeon)
    tol = 5e-5 if dtype == torch.float32 else 1e-10
    scale = float(reference.abs().max())
    assert float((fast.double() - reference).abs().max()) <= tol * scale
    assert float((old.double() - reference).abs().max()) <= tol * scale


def test_the_matrix_is_ignored_where_the_fast_path_does_not_apply() -> None:
    x = torch.randn(50, 3, generator=torch.Generator().manual_seed(2))
    score = torch.randn(50, 3, generator=torch.Generator().manual_seed(3))
    assert not reuses_sq_dists(x, "imq")
    assert not reuses_sq_dists(x, "rbf", backend="dense")
    assert not reuses_sq_dists(x.requires_grad_(True), "rbf")
    x = x.detach()
    h, sq = MedianRule().with_sq_dists(x)
    kept = sq.clone()
    dense = svgd_direction(x, score, h, sq=sq, backend="dense")
    assert torch.equal(sq, kept)  # not consumed
    torch.testing.assert_close(dense, svgd_direction(x, score, h, backend="dense"))
    half = svgd_direction(x, score, h, sq=sq, entropy_weight=0.5)
    assert torch.equal(sq, kept)
    torch.testing.assert_close(half, svgd_direction(x, score, h, entropy_weight=0.5))


def test_stein_sums_from_sq_checks_its_matrix() -> None:
    x = torch.randn(10, 2)
    with pytest.raises(ValueError, match="sq must be"):
        stein_sums_from_sq(x, x, RBF(1.0), torch.zeros(10, 9))


def test_numpys_exp_and_the_gemm_width() -> None:
    values = torch.linspace(-80.0, 0.0, 100_003)
    for dtype, ulps in ((torch.float32, 3), (torch.float64, 3)):
        t = values.to(dtype)
        ours = exp_(t.clone())
        reference = torch.exp(t.double())
        spacing = torch.from_numpy(np.spacing(reference.to(dtype).numpy())).double()
        assert float(((ours.double() - reference).abs() / spacing).max()) <= ulps
    cpu = torch.device("cpu")
    assert [gemm_width(p, cpu) for p in (1, 5, 16, 17, 63, 64, 201)] == [16, 16, 16, 24, 64, 64, 208]
    assert gemm_width(63, torch.device("meta")) == 63


def logistic_spec(n: int, dtype: str, optimizer: dict) -> dict:
    return {
        "method": "svgd", "num_particles": n, "steps": 10, "seed": 0, "device": "cpu",
        "target": {"kind": "bayesian_logistic_regression", "dataset": "sklearn:breast_cancer", "standardize": True,
                   "prior_std": 1.0},
        "options": {"optimizer": optimizer, "dtype": dtype,
                    "kernel": {"bandwidth": {"include_diagonal": True}}},
    }  # fmt: skip


def reference_direction(method, x: torch.Tensor) -> torch.Tensor:
    """φ of the step in float64 from first principles: the score by autograd of log p, numpy's median of the
    full squared-distance matrix / log n, and the dense (direct differences) SVGD direction."""
    x64 = x.double().requires_grad_(True)
    target = method.target
    X, t = target.X.double(), target.y.double()
    z = x64 @ X.T
    log_p = (t * z - torch.nn.functional.softplus(z)).sum(-1) - 0.5 * x64.square().sum(-1)
    (score,) = torch.autograd.grad(log_p.sum(), x64)
    x64 = x64.detach()
    diff = x64[:, None, :] - x64[None, :, :]
    h = float(np.median(diff.square().sum(-1).numpy())) / math.log(x.shape[0])
    return kernels_svgd_direction(x64, score, h, backend="dense")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_jobs_svgd_step_matches_the_reference_and_the_old_path(dtype: str, monkeypatch) -> None:
    """The method a job builds: its direction φ, and one SGD step (displacement / lr = φ, with the step's rounding
    of x + lr·φ), against a float64 reference and against the same method with the fast path off (distances
    formed twice, as before); h bit-identical (the median is exact either way)."""
    lr = 1e-3
    n = 400  # 400² = 160,000 distances: the bracketed selection
    start = 0.1 * torch.randn(n, 31, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    out = {}
    for fast in (True, False):
        if not fast:
            monkeypatch.setattr(svgd_module, "reuses_sq_dists", lambda *a, **k: False)
        method = build_method(admit(logistic_spec(n, dtype, {"name": "sgd", "lr": lr})))
        with torch.no_grad():
            method.x.copy_(start)
            phi, info = method.direction(method.x.detach(), None)
        metrics = method.step()
        moved = (method.x.detach().double() - start.to(method.x.dtype).double()) / lr
        out[fast] = (phi.double(), moved, info["bandwidth"], metrics["bandwidth"])
    reference = reference_direction(method, start.to(method.x.dtype))
    scale = float(reference.abs().max())
    tol = 1e-5 if dtype == "float32" else 1e-10
    for phi, moved, _, _ in out.values():
        assert float((phi - reference).abs().max()) <= tol * scale / 5
        assert float((moved - reference).abs().max()) <= tol * scale
    assert float((out[True][0] - out[False][0]).abs().max()) <= tol * scale / 5
    assert out[True][2] == out[False][2] == out[True][3] == out[False][3]


def test_the_data_major_logistic_score_matches_autograd() -> None:
    spec = logistic_spec(64, "float64", {"name": "adam", "lr": 0.01})
    method = build_method(admit(spec))
    target = method.target
    x = 0.3 * torch.randn(64, 31, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    for batch in (None, target.sample_batch(torch.Generator().manual_seed(0))):
        leaf = x.clone().requires_grad_(True)
        (autograd,) = torch.autograd.grad(target.log_prob(leaf, batch).sum(), leaf)
        torch.testing.assert_close(target.score(x, batch), autograd, rtol=1e-10, atol=1e-10)
    # Differentiable where autograd records it (no in-place step on a recorded tensor): its row sums' gradient is
    # the Hessian-vector product of log p, checked against autograd of autograd.
    leaf = x.clone().requires_grad_(True)
    (hvp,) = torch.autograd.grad(target.score(leaf).sum(), leaf)
    leaf = x.clone().requires_grad_(True)
    (first,) = torch.autograd.grad(target.log_prob(leaf).sum(), leaf, create_graph=True)
    (expected,) = torch.autograd.grad(first.sum(), leaf)
    torch.testing.assert_close(hvp, expected, rtol=1e-10, atol=1e-10)


def test_the_finiteness_check_and_the_one_pass_gradient_are_the_old_ones() -> None:
    from inference_core import errors
    from inference_core.methods.base import check_direction

    for bad in (math.inf, -math.inf, math.nan):
        direction = torch.zeros(7, 3)
        direction[4, 2] = bad
        with pytest.raises(errors.Diverged):
            check_direction(direction, 1)
    check_direction(torch.full((7, 3), 3e38), 1)  # finite, however large: Σ 0·φ cannot overflow
    # The particle update writes −φ into the existing gradient: bit-identical to zero_grad + `x.grad = −φ` + Adam.
    method = build_method(admit(logistic_spec(50, "float32", {"name": "adam", "lr": 0.01})))
    x = method.x.detach().clone().requires_grad_(True)
    reference = torch.optim.Adam([x], lr=0.01, betas=(0.9, 0.999))
    g = torch.Generator().manual_seed(6)
    for _ in range(3):
        phi = torch.randn(50, 31, generator=g)
        method.pullback(method.x, phi)
        reference.zero_grad(set_to_none=False)
        x.grad = -phi
        reference.step()
        assert torch.equal(method.x.grad, -phi) and torch.equal(method.x.detach(), x.detach())
