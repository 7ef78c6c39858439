"""`auto`'s heavy tails (methods/auto/tails.py): the probe's power-law index against Student-t's whose decay is known
in closed form, the Tukey maps' log-determinants against autograd Jacobians, and `auto` on heavy-tailed posteriors
against their exact moments."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from inference_core.methods.auto.tails import (
    RadialTukey,
    TukeyTails,
    power_law_index,
    probe_tails,
)
from inference_core.preconditioning.transport import FlowTarget
from inference_core.targets import BuildContext, build_target
from inference_core.targets.whitened import WhitenedTarget
from inference_core.training import run

CPU = torch.device("cpu")


def expression(dim: int, log_prob: str, **params: list[float]) -> dict:
    return {"kind": "expression", "dim": dim, "params": params, "log_prob": log_prob}


def independent_t(dim: int, df: float, loc: np.ndarray, scale: np.ndarray) -> dict:
    return expression(dim, f"sum(log_student_t(x, {df:g}, loc, scale))", loc=loc.tolist(), scale=scale.tolist())


def multivariate_t(dim: int, df: float, loc: np.ndarray, scale: np.ndarray) -> dict:
    """An elliptical t: log p = −(ν + d)/2 · log(1 + |(x − loc)/scale|²/ν) (+ const)."""
    return expression(dim, f"-{(df + dim) / 2} * log1p(sum(square((x - loc) / scale)) / {df:g})", loc=loc.tolist(),
                      scale=scale.tolist())


def whitened(spec: dict, loc: np.ndarray, scale: np.ndarray) -> WhitenedTarget:
    target = build_target(spec, BuildContext(dtype=torch.float64))
    return WhitenedTarget(target, torch.tensor(loc), torch.diag(torch.tensor(scale)))


def probe(view: WhitenedTarget):  # noqa: ANN201
    return probe_tails(view, torch.Generator().manual_seed(0), torch.float64, CPU)


def test_the_index_fit_is_exact_for_a_student_t_and_infinite_for_light_tails() -> None:
    r = torch.tensor(4.0, dtype=torch.float64)
    for k, c in [(6.0, 6.0), (15.0, 5.0), (2.0, 1.0)]:
        inner, outer = (k * radius**2 / (c + radius**2) for radius in (r, 2 * r))  # a t's −r·g(r)
        assert float(power_law_index(inner, outer, 4.0)) == pytest.approx(k, rel=1e-12)
    gaussian, exponential = (r**2, (2 * r) ** 2), (r, 2 * r)
    assert float(power_law_index(*gaussian, 4.0)) == math.inf
    assert float(power_law_index(*exponential, 4.0)) > 10  # finite: the probe's ratio test rules it out
    rising = (torch.tensor(-1.0), torch.tensor(3.0))  # the density rises at r (another mode)
    assert float(power_law_index(*rising, 4.0)) == math.inf


def test_the_probe_tells_independent_from_elliptical_tails_and_reads_their_degrees_of_freedom() -> None:
    rng = np.random.default_rng(1)
    d, loc, scale = 10, rng.uniform(-3, 3, 10), 10 ** rng.uniform(-1, 1, 10)
    # whitened at the true location and scale: along an axis of independent t₅'s the decay is 6r²/(5 + r²) exactly
    independent = probe(whitened(independent_t(d, 5.0, loc, scale), loc, scale))
    assert independent.shape == "coordinatewise"
    torch.testing.assert_close(independent.index, torch.full((2, d), 5.0, dtype=torch.float64))
    # in every direction of a multivariate t₅ the decay is (5 + d)r²/(5 + r²): the radial index is ν
    elliptical = probe(whitened(multivariate_t(d, 5.0, loc, scale), loc, scale))
    assert elliptical.shape == "radial" and elliptical.radial_index == pytest.approx(5.0, abs=1e-6)
    assert elliptical.smallest_index == pytest.approx(5.0, abs=1e-6)
    gaussian = probe(whitened(expression(d, "sum(log_normal(x, loc, scale))", loc=loc.tolist(), scale=scale.tolist()),
                              loc, scale))
    laplace = probe(whitened(expression(d, "-sum(abs(x - loc) / scale)", loc=loc.tolist(), scale=scale.tolist()),
                             loc, scale))
    assert gaussian.shape == laplace.shape == "light"
    assert independent.evals == elliptical.evals == 2 * 3 * d + 2 * 16


def jacobian_log_det(transform: torch.nn.Module, z: torch.Tensor) -> torch.Tensor:
    return torch.stack([torch.linalg.slogdet(torch.autograd.functional.jacobian(
        lambda row: transform(row[None])[0][0], row))[1] for row in z])


def test_the_maps_log_determinants_match_autograd_and_they_are_monotone() -> None:
    generator = torch.Generator().manual_seed(3)
    z = 2.5 * torch.randn(64, 6, generator=generator, dtype=torch.float64)
    h = torch.tensor([[0.2, 0.0, 0.5, 1.0, 0.2, 0.0], [0.0, 0.3, 0.5, 0.1, 1.0, 0.0]], dtype=torch.float64)
    for transform in (TukeyTails(h), RadialTukey(0.2, 6)):
        torch.testing.assert_close(transform(z)[1], jacobian_log_det(transform, z))
    t = torch.linspace(-6, 6, 1001, dtype=torch.float64)[:, None].expand(-1, 6)
    assert bool((TukeyTails(h)(t)[0].diff(dim=0) > 0).all())
    radius = RadialTukey(0.2, 6)(t / math.sqrt(6))[0].norm(dim=-1)  # along the diagonal, through |z| = √d
    assert bool((radius[501:].diff() > 0).all())


def test_through_the_map_a_t_has_a_gaussian_tail_again() -> None:
    """Independent t₅'s seen through TukeyTails with the probe's h: the decay −r·g(r) along an axis grows like r²
    (ratio 4 per doubling) where in x it tends to the constant 6."""
    d, loc, scale = 4, np.zeros(4), np.ones(4)
    view = whitened(independent_t(d, 5.0, loc, scale), loc, scale)
    latent = FlowTarget(view, probe(view).transform())
    rows = torch.tensor([[8.0, 0, 0, 0], [16.0, 0, 0, 0]], dtype=torch.float64)
    in_x, in_z = (-rows[:, 0] * target.score(rows)[:, 0] for target in (view, latent))
    assert float(in_x[1] / in_x[0]) < 1.1  # 6·256/261 against 6·64/69
    # in z: ν h z² + O(log z) with ν h = 1: 3.87 per doubling from 8 to 16, 4 in the limit
    assert 3.7 < float(in_z[1] / in_z[0]) < 4.0


def moments_error(particles: torch.Tensor, mean: np.ndarray, sd: np.ndarray) -> tuple[float, float]:
    x = particles.double().numpy()
    return (float(np.abs((x.mean(0) - mean) / sd).max()), float(np.abs(np.log(x.std(0, ddof=1) / sd)).max()))


def test_auto_meets_the_bars_on_a_multivariate_t_that_the_linear_whitening_misses() -> None:
    """10-d multivariate t₅, scales 0.1-10: its sds are √(5/3) × the scales. Through the linear whitening SVGD stopped
    at step 100 with the sds 0.37-0.40 too small (log units; seeds 0-2) and called the run `good`; through the radial
    map 0.13, 0.13 and 0.16 (seeds 0-2; 0.17-0.21 before the herding of seeds 0-1's 300 particles kept the target's
    moments)."""
    rng = np.random.default_rng(5)
    d, loc, scale = 10, rng.uniform(-3, 3, 10), 10 ** rng.uniform(-1, 1, 10)
    result = run({"method": "auto", "seed": 2, "steps": 1000, "target": multivariate_t(d, 5.0, loc, scale)})
    mean_error, sd_error = moments_error(result.particles, loc, scale * math.sqrt(5 / 3))
    assert mean_error <= 0.15 and sd_error <= 0.25, (mean_error, sd_error)
    quality = result.quality
    assert quality["transport"] == "tails" and quality["tails"] == "radial" and quality["checked_in"] == "tails_latent"
    assert quality["tail_index"] == pytest.approx(5.0, abs=0.2) and quality["verdict"] == "good", quality


def test_the_herded_particles_keep_the_heavy_tailed_spread_of_the_ensemble() -> None:
    """20 independent t₅'s, seed 2: `auto` moves 300 particles through the tail map and herds 100. The 300's sds are
    0.11 off in log units; herded by the Gaussian kernel alone, 0.19 (seeds 2-3: 0.19 and 0.16); with the target
    coordinates' moments in the kernel, as through the linear whitening, 0.12 (and 0.09). Pathfinder's k̂ here sits at
    the default oversampling threshold (0.69 on AMD EPYC, above 0.7 on Intel Xeon), so the test lowers it."""
    rng = np.random.default_rng(5)
    d, loc, scale = 20, rng.uniform(-3, 3, 20), 10 ** rng.uniform(-1, 1, 20)
    result = run({"method": "auto", "seed": 2, "steps": 1000, "target": independent_t(d, 5.0, loc, scale),
                  "options": {"oversample_khat_above": 0.5}})
    assert result.quality["transport"] == "tails" and result.quality["ensemble_size"] == 500, result.quality
    mean_error, sd_error = moments_error(result.particles, loc, scale * math.sqrt(5 / 3))
    assert mean_error <= 0.1 and sd_error <= 0.15, (mean_error, sd_error)


def test_tails_too_heavy_for_a_standard_deviation_are_flagged() -> None:
    """10 independent t₃'s: no fourth moment, and 100 particles' sds come out 0.29-0.33 too small (seeds 0-2): the
    means are right, the job says the sds are not."""
    rng = np.random.default_rng(5)
    d, loc, scale = 10, rng.uniform(-3, 3, 10), 10 ** rng.uniform(-1, 1, 10)
    result = run({"method": "auto", "seed": 2, "steps": 1000, "target": independent_t(d, 3.0, loc, scale)})
    mean_error, _ = moments_error(result.particles, loc, scale * math.sqrt(3))
    assert mean_error <= 0.15, mean_error
    quality = result.quality
    assert quality["tails"] == "coordinatewise" and quality["tail_index"] == pytest.approx(3.0, abs=0.1), quality
    assert [w["code"] for w in quality["warnings"]] == ["heavy_tails"] and not quality["trustworthy"], quality
