"""The generative methods fit closed-form posteriors in short CPU runs (linear generators, whose output law
N(b, MMᵀ) is analytic: M = W for k = d without λ, M = [W | 0] + λI otherwise).

Error norms: covariance ||MMᵀ − Σ*||_F / ||Σ*||_F (relative Frobenius); mean ||b − μ||₂ / ||μ||₂.
Targets: Gaussians with Σ* = SSᵀ, S_ij ~ N(0, 1) (GPVI paper §4.1, Table 1); 3-D Bayesian linear regression,
X ~ N(0, I), β_i ~ U(0, 1) + 5, y = Xβ + N(0, 1), 50 rows, flat prior (paper §4.2; posterior (XᵀX)⁻¹).
Tolerances are stated per test; measured errors are several times smaller (see docs/reproduction.md).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from inference_core import run


def random_cov(d: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    S = torch.randn(d, d, generator=g, dtype=torch.float64)
    return S @ S.T


def blr_dataset(seed: int = 0, n: int = 50, d: int = 3) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    beta = torch.rand(d, generator=g, dtype=torch.float64) + 5
    y = X @ beta + torch.randn(n, generator=g, dtype=torch.float64)
    return {"X": X.tolist(), "y": y.tolist()}


def output_law(method) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean b, covariance MMᵀ) of a linear generator's output, through the whitening x = shift + R u when
    the method trained in whitened coordinates (mean shift + R b, covariance R M Mᵀ Rᵀ)."""
    net = method.network
    W, b = net.output.weight.detach().double(), net.output.bias.detach().double()
    lam, k, d = net.lam_float(), net.input_dim, net.output_dim
    M = W if lam == 0 else torch.cat([W, torch.zeros(d, d - k, dtype=W.dtype)], 1) + lam * torch.eye(d, dtype=W.dtype)
    view = method.view
    if view is not method.target:
        shift, root = view.shift.double(), view.root.double()
        b, M = shift + root @ b, root @ M
    return b, M @ M.T


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.norm(a - b) / torch.linalg.norm(b))


FAST_HELPER = {"optimizer": {"lr": 1e-3}}  # the default; spelled out because the paper's Table 7 says 1e-4


def fit_gaussian(method: str, d: int, steps: int, lr: float, options: dict | None = None, n: int = 64) -> float:
    cov = random_cov(d)
    opts = {"generator": {"hidden": []}, "optimizer": {"lr": lr}, "precondition": "none", **(options or {})}
    result = run({"method": method, "target": {"kind": "gaussian", "mean": [0.0] * d, "cov": cov.tolist()},
                  "num_particles": n, "steps": steps, "seed": 0, "options": opts})
    _, learned = output_law(result.method)
    return rel(learned, cov)


@pytest.mark.parametrize(("method", "options", "d", "steps", "lr", "tol"), [
    ("gpvi_exact", {}, 2, 3000, 5e-3, 0.1),
    ("gpvi_exact", {}, 5, 3000, 1e-2, 0.1),
    ("gpvi", {"helper_network": {**FAST_HELPER, "hidden_width": 10}}, 2, 2500, 5e-3, 0.12),
    ("gpvi", {"helper": "matrix", "helper_network": FAST_HELPER}, 2, 3000, 5e-3, 0.12),
    ("gpvi", {"helper": "matrix", "helper_network": FAST_HELPER}, 5, 3000, 1e-2, 0.1),
])
def test_gpvi_fits_gaussians(method: str, options: dict, d: int, steps: int, lr: float, tol: float) -> None:
    assert fit_gaussian(method, d, steps, lr, options) < tol


def test_pairwise_gpvi_fits_the_5d_gaussian() -> None:
    assert fit_gaussian("gpvi", 5, 2500, 1e-2, {"helper_network": {**FAST_HELPER, "hidden_width": 10}}, n=48) < 0.15


@pytest.mark.parametrize(("method", "tol"), [("amortized_svgd", 0.2), ("amortized_gfsf", 0.25),
                                             ("amortized_ksd", 0.35)])
def test_amortised_methods_fit_the_2d_gaussian(method: str, tol: float) -> None:
    assert fit_gaussian(method, 2, 3000, 5e-3) < tol


@pytest.mark.parametrize(("method", "options", "lr"), [
    ("gpvi_exact", {}, 1e-2),
    ("gpvi", {"helper": "matrix", "helper_network": FAST_HELPER}, 1e-2),
    # the pairwise helper at half the rate: at 1e-2 it can fall behind the generator (seed 2: Σ error 0.49)
    ("gpvi", {"helper_network": {**FAST_HELPER, "hidden_width": 10}}, 5e-3),
])
def test_gpvi_fits_the_bayesian_linear_regression_posterior(method: str, options: dict, lr: float) -> None:
    result = run({"method": method, "num_particles": 48, "steps": 3000, "seed": 0,
                  "target": {"kind": "bayesian_linear_regression", "dataset": blr_dataset(), "noise_std": 1.0},
                  "options": {"generator": {"hidden": []}, "optimizer": {"lr": lr}, **options}})
    reference = result.method.target.reference()
    mean, cov = output_law(result.method)
    assert rel(mean, reference.mean.double()) < 0.01
    assert rel(cov, reference.cov.double()) < 0.25
    # the last training batch (what the service stores as particles) is a sample of that law
    assert result.particles.shape == (48, 3)
    assert float((result.particles.double().mean(0) - reference.mean.double()).norm()) < 0.2
