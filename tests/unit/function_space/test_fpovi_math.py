"""f-POVI's numerical pieces against independent references: the Gaussian prior fit (numpy float64, and the
closed-form arc-cosine covariance of a one-hidden-layer ReLU prior), the function-space score, the pull-back
(finite differences and per-particle autograd Jacobians), the extras' noise scale and the noise prior."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from fpovi_support import build, regression_target_spec
from scipy import stats

from inference_core import errors
from inference_core.methods.function_space.moments import (
    fit_gaussian,
    gaussian_log_density,
    gaussian_score,
    prior_columns,
)


def test_fit_gaussian_matches_numpy_with_the_eigenvalue_floor() -> None:
    rng = np.random.default_rng(0)
    draws = rng.normal(size=(3, 5)) @ rng.normal(size=(5, 5))  # 3 draws in 5-D: rank 2, so floors bite
    mean, precision = fit_gaussian(torch.as_tensor(draws, dtype=torch.float32), 1e-3)
    cov = np.cov(draws.T, ddof=1)
    values, vectors = np.linalg.eigh(cov)
    reference = vectors @ np.diag(1 / np.maximum(values, 1e-3)) @ vectors.T
    assert mean.dtype == torch.float64
    np.testing.assert_allclose(mean.numpy(), draws.astype(np.float32).astype(np.float64).mean(0), rtol=1e-12)
    np.testing.assert_allclose(precision.numpy(), reference, rtol=1e-5, atol=1e-6)  # float32 inputs
    f = torch.as_tensor(rng.normal(size=(4, 5)))
    centred = f.numpy() - mean.numpy()
    np.testing.assert_allclose(gaussian_log_density(f, mean, precision).numpy(),
                               -0.5 * np.einsum("ni,ij,nj->n", centred, reference, centred), rtol=1e-5)
    np.testing.assert_allclose(gaussian_score(f, mean, precision).numpy(), -centred @ reference, rtol=1e-5,
                               atol=1e-6)


def test_prior_columns_are_the_first_and_last_halves() -> None:
    assert prior_columns(10, 4).tolist() == [0, 1, 8, 9]
    assert prior_columns(3, 4).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="even"):
        prior_columns(10, 3)


def arc_cosine_covariance(points: np.ndarray) -> np.ndarray:
    """Cov(f(x), f(x')) of f = Σ_j v_j relu(w_j·x + b_j) + c with w, b ~ N(0, 1/H), v, c ~ N(0, 1) (the
    fan_out prior): 1 + (a a'/2π)(sin θ + (π − θ) cos θ), a = √(|x|² + 1), cos θ = (x·x' + 1)/(a a')
    (Cho & Saul 2009, degree-1 arc-cosine kernel); the H factors cancel."""
    lifted = np.column_stack([points, np.ones(len(points))])
    gram = lifted @ lifted.T
    norms = np.sqrt(np.diag(gram))
    cos = np.clip(gram / np.outer(norms, norms), -1, 1)
    theta = np.arccos(cos)
    return 1 + np.outer(norms, norms) / (2 * math.pi) * (np.sin(theta) + (math.pi - theta) * cos)


def test_prior_draws_have_the_closed_form_relu_covariance() -> None:
    draws_count = 100_000
    method, _ = build("fsvgd", regression_target_spec(hidden=[64]), {"prior_draws": draws_count})
    points = torch.tensor([[0.0, 0.0, 0.0], [1.0, -0.5, 0.3], [0.2, 0.8, -1.2], [-1.0, -1.0, 0.5]],
                          dtype=torch.float64)
    draws = method.prior_draws(points)
    mean, precision = fit_gaussian(draws, 1e-3)
    cov = np.linalg.inv(precision.numpy())  # every eigenvalue is well above the floor here
    reference = arc_cosine_covariance(points.numpy())
    variances = np.diag(reference)
    standard_error = np.sqrt((np.outer(variances, variances) + reference**2) / draws_count)
    assert np.all(np.abs(cov - reference) < 5 * standard_error)
    assert np.all(np.abs(mean.numpy()) < 5 * np.sqrt(variances / draws_count))


def test_function_score_is_the_scaled_likelihood_plus_the_fitted_prior_gradient() -> None:
    method, target = build("fsvgd", regression_target_spec(), {"extra_points": 5})
    generator_state = method.generator.get_state()
    batch = target.sample_batch(method.generator)
    points, n_train = method.mixed_batch(batch)
    _, y = target.rows(batch)
    values = method.function_values(method.weights.detach(), points)
    log_std = torch.log(torch.linspace(0.3, 0.8, values.shape[0], dtype=torch.float64))
    draws_state = method.generator.get_state()
    score = method.function_score(values, points, n_train, y, target.likelihood_scale(batch), log_std)

    # Reference: (N/B)(y − f)/σ² on the training columns; −P(f − m) at columns 0, 1, M−2, M−1, with the prior
    # draws repeated from the same generator state and P from numpy.
    assert n_train == 16 and points.shape[0] == 21
    reference = np.zeros(values.shape)
    sigma2 = np.exp(2 * log_std.numpy())[:, None]
    reference[:, :n_train] = (60 / 16) * (y.numpy() - values[:, :n_train].numpy()) / sigma2
    method.generator.set_state(draws_state)
    columns = [0, 1, 19, 20]
    weights, _ = method.weight_prior.sample(40, method.generator)
    draws = method.network.forward(method._padded(weights), points[columns])[..., 0].numpy()
    values_c, vectors = np.linalg.eigh(np.cov(draws.T, ddof=1))
    precision = vectors @ np.diag(1 / np.maximum(values_c, 1e-3)) @ vectors.T
    reference[:, columns] += -(values[:, columns].numpy() - draws.mean(0)) @ precision
    np.testing.assert_allclose(score.numpy(), reference, rtol=1e-9, atol=1e-9)
    method.generator.set_state(generator_state)


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_vjp_is_the_transposed_jacobian_of_the_function_values(task: str) -> None:
    if task == "regression":
        spec = regression_target_spec(activation="tanh", hidden=[7, 5])
    else:
        labels = (np.arange(60) % 3).tolist()
        spec = {**regression_target_spec(activation="tanh", hidden=[7]), "task": "classification",
                "dataset": {"X": np.random.default_rng(1).normal(size=(60, 3)).tolist(), "y": labels}}
        spec.pop("noise")
    method, target = build("fsvgd", spec, n=4)
    points = torch.as_tensor(np.random.default_rng(2).normal(size=(9, 3)))
    values = method.function_values(method.weights.detach(), points)
    direction = torch.as_tensor(np.random.default_rng(3).normal(size=tuple(values.shape)))
    pulled = method.vjp(method.function_values(method.weights, points), direction)
    assert pulled.shape == (4, method.network.n_weights)

    # (1) per particle, the explicit Jacobian of its own function values (autograd, one particle at a time).
    for i in range(4):
        def single(theta: torch.Tensor, i: int = i) -> torch.Tensor:
            return method.function_values(theta.unsqueeze(0), points)[0]

        jacobian = torch.autograd.functional.jacobian(single, method.weights.detach()[i])
        expected = (jacobian.reshape(direction[i].numel(), -1) * direction[i].reshape(-1, 1)).sum(0)
        torch.testing.assert_close(pulled[i], expected, rtol=1e-10, atol=1e-12)

    # (2) central finite differences of Σ_i <v_i, f(θ_i)> along random weight directions.
    def objective(weights: torch.Tensor) -> float:
        return float((direction * method.function_values(weights, points)).sum())

    rng = np.random.default_rng(4)
    for _ in range(3):
        u = torch.as_tensor(rng.normal(size=tuple(pulled.shape)))
        eps = 1e-6
        weights = method.weights.detach()
        fd = (objective(weights + eps * u) - objective(weights - eps * u)) / (2 * eps)
        assert abs(fd - float((pulled * u).sum())) < 1e-6 * max(1.0, abs(fd))


@pytest.mark.parametrize(("mode", "factor"), [("mse", None), ("vjp", 1.0)])
def test_pullback_moves_the_weights_along_the_scaled_vjp(mode: str, factor: float | None) -> None:
    lr = 1e-3
    method, _ = build("fsvgd", regression_target_spec(), {"pullback": mode, "optimizer": {"name": "sgd", "lr": lr}},
                      n=4)
    points = torch.as_tensor(np.random.default_rng(5).normal(size=(7, 3)))
    values = method.function_values(method.weights, points)
    direction = torch.as_tensor(np.random.default_rng(6).normal(size=tuple(values.shape)))
    expected_step = lr * (2.0 / values.numel() if factor is None else factor) * method.vjp(values, direction)
    before = method.weights.detach().clone()
    method.pullback(method.function_values(method.weights, points), direction)  # SGD: θ ← θ + lr·scale·Jᵀv
    torch.testing.assert_close(method.weights.detach() - before, expected_step, rtol=1e-9, atol=1e-15)


def test_pullback_refuses_bad_directions() -> None:
    method, _ = build("fsvgd", regression_target_spec(), n=4)
    values = method.function_values(method.weights, torch.zeros(5, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="shape of the function values"):
        method.pullback(values, torch.zeros(4, 6, dtype=torch.float64))
    with pytest.raises(errors.Diverged):
        method.pullback(values, torch.full((4, 5), float("nan"), dtype=torch.float64))


def test_extras_are_training_rows_with_the_kde_noise_scale() -> None:
    method, target = build("fsvgd", regression_target_spec(batch_size=None), {"extra_points": 5000, "ptb_scale": 2.0})
    state = method.generator.get_state()
    points, n_train = method.mixed_batch(None)
    assert n_train == 60 and points.shape == (120, 3)  # min(E, N) = 60 extra rows
    assert torch.equal(points[:60], target.X)
    # The rows are the generator's first permutation (all 60, without replacement); the rest is noise of std
    # ptb_scale/√(N·D) = 2/√180.
    rows = torch.randperm(60, generator=torch.Generator().set_state(state))
    noise = (points[60:] - target.X[rows]).numpy().ravel()
    assert abs(noise.mean()) < 4 * (2 / math.sqrt(180)) / math.sqrt(180)
    assert abs(noise.std() / (2 / math.sqrt(180)) - 1) < 0.15  # 180 samples: s.e. of a std ≈ 5 %


@pytest.mark.parametrize("noise", [{"type": "inverse_gamma_std", "alpha": 1.5, "beta": 0.2},
                                   {"type": "gamma_precision", "a0": 2.0, "b0": 0.3}])
def test_noise_prior_is_the_target_density_without_the_softplus_jacobian(noise: dict) -> None:
    method, _ = build("fsvgd", regression_target_spec(noise=noise))
    std = torch.tensor([0.3, 0.7], dtype=torch.float64)
    ours = method.noise_log_prior(std).numpy()
    if noise["type"] == "inverse_gamma_std":
        reference = stats.invgamma(1.5, scale=0.2).logpdf(std.numpy())
    else:  # density of the precision σ⁻², evaluated at σ (no Jacobian, as the code's MAP)
        reference = stats.gamma(2.0, scale=1 / 0.3).logpdf(std.numpy() ** -2)
    np.testing.assert_allclose(ours[1] - ours[0], reference[1] - reference[0], rtol=1e-10)
