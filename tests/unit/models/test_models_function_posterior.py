"""function_posterior: prior draws against kernels, closed forms and independent numpy constructions; the
likelihood against scipy; the GP view and the BNN weight view."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from inference_core import errors
from inference_core.targets import BuildContext, build_target

CONTEXT = BuildContext(dtype=torch.float64)
RNG = np.random.default_rng(0)
X1 = np.sort(RNG.uniform(-2, 3, size=(30, 1)), axis=0)
Y1 = np.sin(X1[:, 0]) + 0.1 * RNG.normal(size=30)


def posterior(prior: dict, X=X1, y=Y1, **fields):
    spec = {"kind": "function_posterior", "dataset": {"X": X.tolist(), "y": y.tolist()}, "prior": prior, **fields}
    return build_target(spec, CONTEXT)


def rbf(A: np.ndarray, B: np.ndarray, lengthscale, variance: float) -> np.ndarray:
    diff = (A[:, None, :] - B[None, :, :]) / np.asarray(lengthscale)
    return variance * np.exp(-0.5 * (diff**2).sum(-1))


def test_gp_draws_have_the_kernel_as_covariance() -> None:
    X = RNG.normal(size=(40, 2))
    target = posterior({"type": "gp", "lengthscale": [0.7, 2.0], "variance": 1.5}, X=X, y=X[:, 0])
    points = torch.as_tensor([[0.0, 0.0], [0.5, -0.5], [1.0, 1.0], [-1.0, 2.0], [0.1, 0.0]])
    n = 40_000
    draws = target.sample_prior_functions(n, points, torch.Generator().manual_seed(0)).numpy()
    assert draws.shape == (n, 5)
    kernel = rbf(points.numpy(), points.numpy(), [0.7, 2.0], 1.5)
    # Standard error of a covariance entry is at most variance·√(2/n) ≈ 0.011.
    assert np.abs(np.cov(draws.T) - kernel).max() < 5 * 1.5 * np.sqrt(2 / n)
    assert np.abs(draws.mean(0)).max() < 5 * np.sqrt(1.5 / n)


def independent_piecewise(kind: str, n: int, x: np.ndarray, low: float, high: float, rate: float,
                          rng: np.random.Generator, values=lambda rng, size: rng.normal(size=size)) -> np.ndarray:
    """A loop-based numpy construction of the same random functions (different code, different RNG)."""
    out = np.empty((n, len(x)))
    for i in range(n):
        k = rng.poisson(rate)
        points = np.sort(rng.uniform(low, high, size=k))
        if kind == "piecewise_constant":
            levels = values(rng, k + 1)
            out[i] = levels[np.searchsorted(points, x, side="left")]
        else:
            knots = np.concatenate([[low], points, [high]])
            out[i] = np.interp(x, knots, values(rng, k + 2))
    return out


@pytest.mark.parametrize("kind", ["piecewise_constant", "piecewise_linear"])
def test_piecewise_moments_match_an_independent_construction(kind: str) -> None:
    target = posterior({"type": kind, "rate": 4.0}, domain=[[-2.0, 3.0]])
    x = np.array([-2.0, -1.2, 0.0, 0.3, 1.7, 3.0, 4.0])
    n = 30_000
    ours = target.sample_prior_functions(n, torch.as_tensor(x[:, None]), torch.Generator().manual_seed(1)).numpy()
    theirs = independent_piecewise(kind, n, x, -2.0, 3.0, 4.0, np.random.default_rng(2))
    # Means, variances and covariances agree within Monte Carlo error (entries are O(1), s.e. ≈ 0.01).
    tolerance = 6 * np.sqrt(2 / n)
    assert np.abs(ours.mean(0) - theirs.mean(0)).max() < tolerance
    assert np.abs(np.cov(ours.T) - np.cov(theirs.T)).max() < 2 * tolerance


def test_piecewise_constant_covariance_has_the_closed_form() -> None:
    """Cov(f(x), f(x')) = Var(level)·P(no change point between x and x') = s²·exp(−rate·|x − x'|/(hi − lo))."""
    target = posterior({"type": "piecewise_constant", "rate": 3.0,
                        "values": {"distribution": "normal", "mean": 1.0, "std": 2.0}}, domain=[[0.0, 1.0]])
    x = np.array([0.05, 0.2, 0.5, 0.9])
    n = 40_000
    draws = target.sample_prior_functions(n, torch.as_tensor(x[:, None]), torch.Generator().manual_seed(3)).numpy()
    expected = 4.0 * np.exp(-3.0 * np.abs(x[:, None] - x[None, :]))
    assert np.abs(np.cov(draws.T) - expected).max() < 5 * 4.0 * np.sqrt(2 / n)
    assert np.abs(draws.mean(0) - 1.0).max() < 5 * 2.0 / np.sqrt(n)


def test_piecewise_constant_draws_are_step_functions_with_poisson_many_jumps() -> None:
    target = posterior({"type": "piecewise_constant", "rate": 5.0,
                        "values": {"distribution": "uniform", "low": -1.0, "high": 2.0}}, domain=[[0.0, 1.0]])
    grid = torch.linspace(0.0, 1.0, 2001, dtype=torch.float64).unsqueeze(1)
    draws = target.sample_prior_functions(3000, grid, torch.Generator().manual_seed(4)).numpy()
    assert draws.min() >= -1.0 and draws.max() <= 2.0
    jumps = (np.diff(draws, axis=1) != 0).sum(1)  # rarely do two change points share a grid cell
    assert abs(jumps.mean() - 5.0) < 5 * np.sqrt(5.0 / 3000) and abs(jumps.var() - 5.0) < 0.6


def test_piecewise_linear_closed_form_without_interior_knots() -> None:
    """rate 0: f(x) = (1 − u)v₀ + u v₁, u = (x − lo)/(hi − lo): Cov = s²((1−u)(1−u') + u u')."""
    target = posterior({"type": "piecewise_linear", "rate": 0.0}, domain=[[-1.0, 1.0]])
    x = np.array([-1.0, -0.5, 0.0, 0.8, 1.0, 1.5])
    draws = target.sample_prior_functions(3, torch.as_tensor(x[:, None]), torch.Generator().manual_seed(5)).numpy()
    u = np.clip((x + 1.0) / 2.0, 0, 1)
    for row in draws:  # each draw is exactly the line through its end values, constant beyond hi
        np.testing.assert_allclose(row, (1 - u) * row[0] + u * row[4], rtol=1e-12, atol=1e-12)
    many = target.sample_prior_functions(40_000, torch.as_tensor(x[:, None]), torch.Generator().manual_seed(6))
    expected = np.outer(1 - u, 1 - u) + np.outer(u, u)
    assert np.abs(np.cov(many.numpy().T) - expected).max() < 5 * np.sqrt(2 / 40_000)


def test_piecewise_linear_draws_are_continuous_and_piecewise_linear() -> None:
    target = posterior({"type": "piecewise_linear", "rate": 3.0}, domain=[[0.0, 1.0]])
    grid = torch.linspace(0.0, 1.0, 2001, dtype=torch.float64).unsqueeze(1)
    draws = target.sample_prior_functions(200, grid, torch.Generator().manual_seed(7)).numpy()
    second = np.abs(np.diff(draws, n=2, axis=1))
    kinks = (second > 1e-9).sum(1)
    # Each interior knot bends the line within at most two neighbouring grid differences; K ~ Poisson(3).
    assert kinks.max() <= 2 * 15 and kinks.mean() < 2 * 3.0 + 1
    # Continuity at the domain ends: f(lo) and f(hi) are knot values, approached linearly from inside.
    ends = target.sample_prior_functions(200, torch.tensor([[0.0], [1e-12], [1.0 - 1e-12], [1.0]],
                                                          dtype=torch.float64), torch.Generator().manual_seed(7))
    torch.testing.assert_close(ends[:, 0], ends[:, 1], rtol=0, atol=1e-5)
    torch.testing.assert_close(ends[:, 3], ends[:, 2], rtol=0, atol=1e-5)


def test_log_likelihood_is_the_scaled_gaussian_log_density() -> None:
    target = posterior({"type": "gp"}, likelihood={"noise_std": 0.3}, batch_size=10)
    f = np.random.default_rng(8).normal(size=(4, 30))
    full = stats.norm(f, 0.3).logpdf(Y1[None, :]).sum(1)
    np.testing.assert_allclose(target.log_likelihood(torch.as_tensor(f)).numpy(), full, rtol=1e-12)
    batch = target.sample_batch(torch.Generator().manual_seed(0))
    rows = batch.numpy()
    scaled = 3.0 * stats.norm(f[:, rows], 0.3).logpdf(Y1[None, rows]).sum(1)  # N/B = 30/10
    np.testing.assert_allclose(target.log_likelihood(torch.as_tensor(f[:, rows]), batch).numpy(), scaled, rtol=1e-12)
    with pytest.raises(ValueError, match="one value per batch row"):
        target.log_likelihood(torch.as_tensor(f), batch)


def test_gp_view_has_the_exact_gaussian_posterior_at_the_training_inputs() -> None:
    X = np.linspace(-3, 3, 12)[:, None]  # well separated: K is well conditioned
    y = np.cos(X[:, 0])
    target = posterior({"type": "gp", "lengthscale": 0.8, "variance": 2.0}, X=X, y=y, likelihood={"noise_std": 0.4})
    assert target.dim == 12
    K = rbf(X, X, 0.8, 2.0) + 1e-8 * 2.0 * np.eye(12)
    f = np.random.default_rng(9).normal(size=(3, 12))
    expected = stats.multivariate_normal(np.zeros(12), K).logpdf(f) + stats.norm(f, 0.4).logpdf(y).sum(1)
    np.testing.assert_allclose(target.log_prob(torch.as_tensor(f)).numpy(), expected, rtol=1e-8)
    # Posterior by the information form (independent of the target's gain form).
    cov = np.linalg.inv(np.linalg.inv(K) + np.eye(12) / 0.16)
    mean = cov @ y / 0.16
    reference = target.reference()
    np.testing.assert_allclose(reference.mean.numpy(), mean, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(reference.cov.numpy(), cov, rtol=1e-6, atol=1e-8)
    score = target.score(torch.as_tensor(f)).numpy()
    np.testing.assert_allclose(score, -(f - mean) @ np.linalg.inv(cov), rtol=1e-6, atol=1e-6)


def test_piecewise_priors_have_no_density_over_function_values() -> None:
    target = posterior({"type": "piecewise_constant"})
    with pytest.raises(NotImplementedError, match="sample_prior_functions"):
        target.log_prob(torch.zeros(1, 30, dtype=torch.float64))


def test_bnn_prior_exposes_the_network_and_matches_the_bnn_target() -> None:
    fields = {"hidden": [6], "activation": "tanh", "prior_std": 0.9, "prior_std_scaling": "fan_out"}
    target = posterior({"type": "bnn", **fields}, likelihood={"noise_std": 0.2})
    bnn = build_target({"kind": "bnn", "dataset": {"X": X1.tolist(), "y": Y1.tolist()},
                        "noise": {"type": "fixed", "std": 0.2}, **fields}, CONTEXT)
    assert target.dim == bnn.dim == 19 and target.describe_layout() == bnn.describe_layout()
    theta = target.initial_particles(5, torch.Generator().manual_seed(0))
    torch.testing.assert_close(target.log_prob(theta), bnn.log_prob(theta))
    torch.testing.assert_close(target.score(theta), bnn.score(theta))
    torch.testing.assert_close(target.forward(theta, target.X), bnn.forward(theta, bnn.X))


def test_bnn_prior_function_draws_have_the_closed_form_variance() -> None:
    """One ReLU layer of width H, all parameters N(0, s²): Var f(x) = s²(1 + H·s²(‖x‖² + 1)/2)."""
    s, width = 0.7, 20
    X = RNG.normal(size=(10, 2))
    target = posterior({"type": "bnn", "hidden": [width], "activation": "relu", "prior_std": s}, X=X, y=X[:, 0])
    points = torch.as_tensor([[0.0, 0.0], [1.0, -2.0]])
    draws = target.sample_prior_functions(40_000, points, torch.Generator().manual_seed(1)).numpy()
    expected = s**2 * (1 + width * s**2 * ((points.numpy() ** 2).sum(1) + 1) / 2)
    np.testing.assert_allclose(draws.var(0), expected, rtol=0.05)


def test_domain_default_and_measurement_points() -> None:
    X = np.array([[0.0, 5.0], [1.0, 5.0], [2.0, 5.0]])
    target = posterior({"type": "gp"}, X=X, y=np.zeros(3))
    np.testing.assert_allclose(target.domain.numpy(), [[-0.2, 2.2], [4.0, 6.0]])
    points = target.sample_measurement_points(1000, torch.Generator().manual_seed(0))
    assert points.shape == (1000, 2)
    assert torch.all(points >= target.domain[:, 0]) and torch.all(points <= target.domain[:, 1])
    explicit = posterior({"type": "gp"}, X=X, y=np.zeros(3), domain=[[-1, 1], [0, 10]])
    np.testing.assert_allclose(explicit.domain.numpy(), [[-1, 1], [0, 10]])


def test_uploaded_data_is_checked_at_build_time() -> None:
    spec = {"kind": "function_posterior", "dataset": "ds_" + "b" * 32, "prior": {"type": "piecewise_linear"}}
    context = BuildContext(load_dataset=lambda _: {"X": np.ones((4, 2)), "y": np.zeros(4)})
    with pytest.raises(errors.TargetInvalid, match="needs 1-D inputs; the data has 2 features"):
        build_target(spec, context)
