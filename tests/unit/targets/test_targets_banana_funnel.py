"""banana and funnel: closed-form log-densities against scipy constructions, normalisation on a grid,
closed-form scores against finite differences and autograd, exact moments against quadrature and an
independent Monte Carlo construction, and the exact samplers against the moments and the score."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from inference_core import errors
from inference_core.spec import validate_job_spec
from inference_core.targets import BuildContext, Target, build_target
from tests.unit.targets.targets_checks import (
    assert_moments_match,
    assert_stein_identities,
    finite_difference_score,
)

F64 = BuildContext(dtype=torch.float64)


def _points(n: int, d: int, scale: float, seed: int) -> torch.Tensor:
    return torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)) * scale


# --- banana ---------------------------------------------------------------------------------------------


def _banana_scipy(x: np.ndarray, b: float, sigma: float) -> np.ndarray:
    return (
        stats.norm.logpdf(x[:, 0], 0, sigma)
        + stats.norm.logpdf(x[:, 1], b * (x[:, 0] ** 2 - sigma**2), 1)
        + stats.norm.logpdf(x[:, 2:]).sum(1)
    )


@pytest.mark.parametrize(("dim", "curvature", "scale"), [(2, 0.03, 10.0), (4, 0.5, 2.0), (3, -0.2, 1.5)])
def test_banana_log_prob_and_score(dim: int, curvature: float, scale: float) -> None:
    target = build_target({"kind": "banana", "dim": dim, "curvature": curvature, "scale": scale}, F64)
    x = _points(40, dim, scale, seed=dim)
    np.testing.assert_allclose(
        target.log_prob(x).numpy(), _banana_scipy(x.numpy(), curvature, scale), rtol=1e-12
    )
    score = target.score(x)
    torch.testing.assert_close(score, finite_difference_score(target.log_prob, x), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(score, Target.score(target, x), rtol=1e-12, atol=1e-12)


def test_banana_defaults_are_haario_and_it_integrates_to_one_with_the_reference_moments() -> None:
    spec = validate_job_spec({"method": "svgd", "target": {"kind": "banana"}}).target
    assert spec == {"kind": "banana", "dim": 2, "curvature": 0.03, "scale": 10.0}
    target = build_target(spec, F64)
    # Grid over x1 ∈ ±7σ and x2 covering b(x1² − σ²) ± 8.
    x1 = np.linspace(-70, 70, 1401)
    x2 = np.linspace(-12, 160, 3441)
    h1, h2 = x1[1] - x1[0], x2[1] - x2[0]
    g1, g2 = np.meshgrid(x1, x2, indexing="ij")
    points = torch.tensor(np.stack([g1.ravel(), g2.ravel()], axis=1))
    p = torch.exp(target.log_prob(points)).numpy() * h1 * h2
    assert abs(p.sum() - 1) < 1e-2
    assert abs(p.sum() - 1) < 1e-5
    mean = p @ points.numpy()
    centred = points.numpy() - mean
    cov = (centred * p[:, None]).T @ centred
    reference = target.reference()
    np.testing.assert_allclose(reference.mean.numpy(), mean, atol=1e-3)
    np.testing.assert_allclose(reference.cov.numpy(), cov, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(reference.cov.numpy(), [[100.0, 0.0], [0.0, 19.0]])  # 1 + 2 b² σ⁴ = 19


def test_banana_moments_against_an_independent_monte_carlo_construction_and_the_sampler() -> None:
    dim, b, sigma = 4, 0.4, 1.5
    target = build_target({"kind": "banana", "dim": dim, "curvature": b, "scale": sigma}, F64)
    reference = target.reference()
    # independent construction, in numpy: x1 ~ N(0, σ²), x2 = b(x1² − σ²) + N(0, 1), the rest N(0, 1)
    rng = np.random.default_rng(0)
    n = 400_000
    x = rng.normal(size=(n, dim))
    x[:, 0] *= sigma
    x[:, 1] += b * (x[:, 0] ** 2 - sigma**2)
    assert_moments_match(x, reference.mean.numpy(), reference.cov.numpy())
    samples = reference.sample(200_000, torch.Generator().manual_seed(1))
    assert_moments_match(samples.numpy(), reference.mean.numpy(), reference.cov.numpy())
    assert_stein_identities(target.score(samples).numpy(), samples.numpy())


# --- funnel ---------------------------------------------------------------------------------------------


def _funnel_scipy(x: np.ndarray, sigma: float) -> np.ndarray:
    v = x[:, 0]
    return stats.norm.logpdf(v, 0, sigma) + stats.norm.logpdf(x[:, 1:], 0, np.exp(v / 2)[:, None]).sum(1)


@pytest.mark.parametrize(("dim", "scale"), [(2, 3.0), (10, 3.0), (5, 1.0)])
def test_funnel_log_prob_and_score(dim: int, scale: float) -> None:
    target = build_target({"kind": "funnel", "dim": dim, "scale": scale}, F64)
    x = _points(40, dim, 1.5, seed=dim)
    np.testing.assert_allclose(target.log_prob(x).numpy(), _funnel_scipy(x.numpy(), scale), rtol=1e-12)
    score = target.score(x)
    torch.testing.assert_close(score, finite_difference_score(target.log_prob, x), rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(score, Target.score(target, x), rtol=1e-12, atol=1e-12)


def test_funnel_integrates_to_one_on_a_grid() -> None:
    target = build_target({"kind": "funnel", "dim": 2, "scale": 1.0}, F64)
    v = np.linspace(-7, 7, 1401)
    # x covers ±60 ≥ 1.8 sd at v = 7 (mass there ~1e-12); the step 0.02 resolves the neck down to v ≈ −5
    # (sd e^{−2.5} ≈ 0.08), and p(v < −5) ~ 3e-7.
    x = np.linspace(-60, 60, 6001)
    hv, hx = v[1] - v[0], x[1] - x[0]
    gv, gx = np.meshgrid(v, x, indexing="ij")
    density = torch.exp(target.log_prob(torch.tensor(np.stack([gv.ravel(), gx.ravel()], axis=1)))).numpy()
    assert abs(density.sum() * hv * hx - 1) < 1e-2
    assert abs(density.sum() * hv * hx - 1) < 1e-6


def test_funnel_default_covariance_against_quadrature() -> None:
    spec = validate_job_spec({"method": "svgd", "target": {"kind": "funnel"}}).target
    assert spec == {"kind": "funnel", "dim": 10, "scale": 3.0}
    reference = build_target(spec, F64).reference()
    # var(x_i) = E[e^v] under v ~ N(0, 9), by adaptive quadrature (independent of the closed form e^{σ²/2})
    expected, _ = integrate.quad(
        lambda v: math.exp(v) * stats.norm.pdf(v, 0, 3), -60, 60, epsabs=0, epsrel=1e-12
    )
    cov = reference.cov.numpy()
    np.testing.assert_allclose(np.diag(cov)[1:], expected, rtol=1e-9)
    assert cov[0, 0] == pytest.approx(9.0)
    np.testing.assert_array_equal(cov - np.diag(np.diag(cov)), 0.0)
    np.testing.assert_array_equal(reference.mean.numpy(), 0.0)


def test_funnel_moments_against_an_independent_monte_carlo_construction_and_the_sampler() -> None:
    # σ = 1 keeps fourth moments small enough for a sharp Monte Carlo check of the covariance.
    dim, sigma = 4, 1.0
    target = build_target({"kind": "funnel", "dim": dim, "scale": sigma}, F64)
    reference = target.reference()
    rng = np.random.default_rng(3)
    n = 400_000
    v = rng.normal(0, sigma, size=n)
    x = np.concatenate([v[:, None], rng.normal(size=(n, dim - 1)) * np.exp(v / 2)[:, None]], axis=1)
    assert_moments_match(x, reference.mean.numpy(), reference.cov.numpy())
    samples = reference.sample(200_000, torch.Generator().manual_seed(2))
    assert_moments_match(samples.numpy(), reference.mean.numpy(), reference.cov.numpy())
    assert_stein_identities(target.score(samples).numpy(), samples.numpy())


def test_funnel_default_sampler_has_the_right_conditional_structure() -> None:
    """σ = 3: moments are too heavy-tailed for a sharp Monte Carlo check, so test the construction:
    v/σ and x_i e^{−v/2} are independent standard normals (Kolmogorov–Smirnov)."""
    target = build_target({"kind": "funnel", "dim": 3, "scale": 3.0}, F64)
    samples = target.reference().sample(50_000, torch.Generator().manual_seed(4)).numpy()
    v = samples[:, 0]
    assert stats.kstest(v / 3.0, "norm").pvalue > 1e-3
    for i in (1, 2):
        assert stats.kstest(samples[:, i] * np.exp(-v / 2), "norm").pvalue > 1e-3
    assert abs(np.corrcoef(v, samples[:, 1] * np.exp(-v / 2))[0, 1]) < 5 / math.sqrt(50_000)


# --- shared ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["banana", "funnel"])
def test_float32_agrees_with_float64(kind: str) -> None:
    spec = {"kind": kind, "dim": 3}
    x = _points(20, 3, 1.0, seed=9)
    single = build_target(spec, BuildContext(dtype=torch.float32))
    double = build_target(spec, F64)
    assert single.log_prob(x.float()).dtype == torch.float32
    torch.testing.assert_close(single.log_prob(x.float()).double(), double.log_prob(x), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(single.score(x.float()).double(), double.score(x), rtol=1e-4, atol=1e-4)
    reference = single.reference()
    assert reference.cov.dtype == torch.float32
    assert reference.sample(4, torch.Generator().manual_seed(0)).dtype == torch.float32


@pytest.mark.parametrize(
    ("target", "loc"),
    [
        ({"kind": "banana", "dim": 1}, ("target", "dim")),
        ({"kind": "banana", "scale": 0}, ("target", "scale")),
        ({"kind": "banana", "curvature": 1e3}, ("target", "curvature")),
        ({"kind": "funnel", "dim": 1}, ("target", "dim")),
        ({"kind": "funnel", "scale": -1}, ("target", "scale")),
        ({"kind": "funnel", "scale": 11}, ("target", "scale")),
        ({"kind": "funnel", "extra": 1}, ("target", "extra")),
    ],
)
def test_invalid_specs_are_target_invalid(target: dict, loc: tuple) -> None:
    with pytest.raises(errors.TargetInvalid) as caught:
        validate_job_spec({"method": "svgd", "target": target})
    assert caught.value.loc == loc
