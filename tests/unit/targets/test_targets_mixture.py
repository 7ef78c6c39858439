"""gaussian_mixture: log-density against scipy, normalisation on a grid, closed-form score against finite
differences, exact moments against a grid integration, the sampler against the moments and the score."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats
from scipy.special import logsumexp

from inference_core import errors
from inference_core.spec import validate_job_spec
from inference_core.targets import BuildContext, Target, build_target
from tests.unit.targets.targets_checks import (
    assert_moments_match,
    assert_stein_identities,
    finite_difference_score,
)

SPEC_2D = {
    "kind": "gaussian_mixture",
    "weights": [2.0, 1.0, 1.0],  # normalised to [0.5, 0.25, 0.25]
    "means": [[-2.0, 0.0], [2.0, 1.0], [0.5, -2.5]],
    "covs": [[[1.0, 0.3], [0.3, 0.5]], [[0.4, -0.1], [-0.1, 0.8]], [[0.3, 0.0], [0.0, 0.3]]],
}


def _random_spec(k: int, d: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    covs = []
    for _ in range(k):
        factor = rng.normal(size=(d, d))
        covs.append((factor @ factor.T / d + 0.2 * np.eye(d)).tolist())
    return {
        "kind": "gaussian_mixture",
        "weights": rng.uniform(0.2, 2.0, size=k).tolist(),
        "means": (rng.normal(size=(k, d)) * 2).tolist(),
        "covs": covs,
    }


def _scipy_log_prob(spec: dict, x: np.ndarray) -> np.ndarray:
    weights = np.asarray(spec["weights"]) / np.sum(spec["weights"])
    terms = [
        np.log(w) + stats.multivariate_normal(mean, cov).logpdf(x)
        for w, mean, cov in zip(weights, spec["means"], spec["covs"], strict=True)
    ]
    return logsumexp(np.stack(terms, axis=-1), axis=-1)


def test_log_prob_matches_scipy_and_score_matches_finite_differences() -> None:
    spec = _random_spec(k=4, d=3, seed=1)
    target = build_target(spec, BuildContext(dtype=torch.float64))
    x = torch.randn(50, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 3
    np.testing.assert_allclose(target.log_prob(x).numpy(), _scipy_log_prob(spec, x.numpy()), rtol=1e-11)
    score = target.score(x)
    torch.testing.assert_close(score, finite_difference_score(target.log_prob, x), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(score, Target.score(target, x), rtol=1e-10, atol=1e-12)  # autograd


def test_far_from_every_component_log_prob_and_score_stay_finite() -> None:
    target = build_target(SPEC_2D, BuildContext(dtype=torch.float64))
    x = torch.tensor([[300.0, -200.0], [1e3, 1e3]], dtype=torch.float64)
    np.testing.assert_allclose(target.log_prob(x).numpy(), _scipy_log_prob(SPEC_2D, x.numpy()), rtol=1e-12)
    assert torch.isfinite(target.score(x)).all()


def test_density_integrates_to_one_and_grid_moments_match_the_reference() -> None:
    target = build_target(SPEC_2D, BuildContext(dtype=torch.float64))
    axis = np.linspace(-9, 9, 901)
    h = axis[1] - axis[0]
    z1, z2 = np.meshgrid(axis, axis, indexing="ij")
    points = torch.tensor(np.stack([z1.ravel(), z2.ravel()], axis=1))
    density = torch.exp(target.log_prob(points)).numpy()
    mass = density.sum() * h * h
    assert abs(mass - 1) < 1e-2
    assert abs(mass - 1) < 1e-6  # the rule is far better than the 1 % asked for on this grid
    p = density * h * h
    grid_mean = p @ points.numpy()
    centred = points.numpy() - grid_mean
    grid_cov = (centred * p[:, None]).T @ centred
    reference = target.reference()
    np.testing.assert_allclose(reference.mean.numpy(), grid_mean, atol=1e-6)
    np.testing.assert_allclose(reference.cov.numpy(), grid_cov, atol=1e-6)


def test_weights_are_normalised() -> None:
    scaled = {**SPEC_2D, "weights": [20.0, 10.0, 10.0]}
    explicit = {**SPEC_2D, "weights": [0.5, 0.25, 0.25]}
    x = torch.randn(10, 2, dtype=torch.float64)
    a = build_target(scaled, BuildContext(dtype=torch.float64)).log_prob(x)
    b = build_target(explicit, BuildContext(dtype=torch.float64)).log_prob(x)
    torch.testing.assert_close(a, b, rtol=1e-14, atol=1e-14)


def test_sampler_matches_reference_moments_and_the_score() -> None:
    target = build_target(SPEC_2D, BuildContext(dtype=torch.float64))
    reference = target.reference()
    samples = reference.sample(200_000, torch.Generator().manual_seed(11))
    assert samples.shape == (200_000, 2) and samples.dtype == torch.float64
    assert_moments_match(samples.numpy(), reference.mean.numpy(), reference.cov.numpy())
    assert_stein_identities(target.score(samples).numpy(), samples.numpy())
    first = reference.sample(1000, torch.Generator().manual_seed(5))
    torch.testing.assert_close(reference.sample(1000, torch.Generator().manual_seed(5)), first)  # seeded


def test_float32_agrees_with_float64() -> None:
    x = torch.randn(20, 2, dtype=torch.float64) * 2
    single = build_target(SPEC_2D, BuildContext(dtype=torch.float32))
    double = build_target(SPEC_2D, BuildContext(dtype=torch.float64))
    assert single.log_prob(x.float()).dtype == torch.float32
    torch.testing.assert_close(single.log_prob(x.float()).double(), double.log_prob(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(single.score(x.float()).double(), double.score(x), rtol=1e-4, atol=1e-4)
    assert single.reference().sample(5, torch.Generator().manual_seed(0)).dtype == torch.float32


@pytest.mark.parametrize(
    ("change", "fragment", "loc"),
    [
        ({"weights": [1.0, 1.0]}, "same length", ("target",)),
        ({"weights": [1.0, 0.0, 1.0]}, "positive", ("target",)),
        ({"weights": [1.0, -1.0, 1.0]}, "positive", ("target",)),
        ({"weights": [1e308, 1e308, 1.0]}, "finite", ("target",)),
        ({"means": [[0.0, 0.0], [1.0], [2.0, 2.0]]}, "[k, d]", ("target",)),
        ({"covs": [[[1.0, 0.0], [0.0, 1.0]], [[1.0, 2.0], [2.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]]}, "covs[1] is not positive definite", ("target",)),
        ({"covs": [[[1.0, 0.5], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]]}, "covs[0] must be symmetric", ("target",)),
        ({"covs": [[[1.0]], [[1.0]], [[1.0]]]}, "covs[0] must have shape [2, 2]", ("target",)),
        ({"weights": []}, "at least 1", ("target", "weights")),
    ],
)  # fmt: skip
def test_invalid_specs_are_target_invalid(change: dict, fragment: str, loc: tuple) -> None:
    with pytest.raises(errors.TargetInvalid) as caught:
        validate_job_spec({"method": "svgd", "target": {**SPEC_2D, **change}})
    assert fragment in caught.value.detail
    assert caught.value.loc == loc
