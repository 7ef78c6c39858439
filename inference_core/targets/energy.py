"""The four 2-D energy potentials of Rezende & Mohamed 2015 (Variational Inference with Normalizing Flows,
Table 1), p(z) ∝ exp(−U(z)), as used in GPVI's appendix D.1 ("Energy potentials"):

    w1(z) = sin(2π z1 / 4),   w2(z) = 3 exp(−½ ((z1 − 1) / 0.6)²),   w3(z) = 3 σ((z1 − 1) / 0.3),
    σ(t) = 1 / (1 + e^{−t})

    U1(z) = ½ ((‖z‖ − 2) / 0.4)² − ln( e^{−½((z1 − 2)/0.6)²} + e^{−½((z1 + 2)/0.6)²} )
    U2(z) = ½ ((z2 − w1(z)) / 0.4)²
    U3(z) = −ln( e^{−½((z2 − w1(z))/0.35)²} + e^{−½((z2 − w1(z) + w2(z))/0.35)²} )
    U4(z) = −ln( e^{−½((z2 − w1(z))/0.4)²} + e^{−½((z2 − w1(z) + w3(z))/0.35)²} )

`log_prob` is −U(z): unnormalised (the ln of a sum is computed with logaddexp, which is the same function,
only without overflow). The score is autograd's.

U2, U3 and U4 are not normalisable on R²: exp(−U) does not decay along z1 (it is periodic or tends to a
constant). Their plots (Rezende & Mohamed Fig. 3a, GPVI Figs. 4–7) show the box [−4, 4]². The reference
(normaliser, mean, covariance, samples) is therefore that of p restricted to the box B = [−4, 4]² for all
four; for U1, which is proper, the mass outside B is below 1e-6 (a 5σ radial margin), so it is also the R²
reference to that accuracy. Samplers on U2–U4 are not confined to B by `log_prob`.

Reference numerics (computed once per potential, cached, float64 on CPU):
- normaliser, mean, covariance: midpoint rule on a 2048 × 2048 grid of B (cell 8/2048 ≈ 0.0039); the
  integrand is smooth, the error is O(h²): relative error below 1e-5 for the normaliser and the moments
  (checked in tests against an independent Gauss–Legendre rule and a dblquad integration);
- samples: exact draws from the piecewise-constant density on a 1024 × 1024 grid of B (a cell by its
  midpoint mass, then uniform within the cell). This is an approximation of the box density, with moment
  errors O(h²) ≈ 1e-5, far below Monte Carlo error for any practical n.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor

from inference_core.schemas.targets import EnergyTargetSpec
from inference_core.targets.base import BuildContext, Reference, Target

BOX_HALF_WIDTH = 4.0
MOMENT_GRID = 2048
SAMPLE_GRID = 1024
NAMES = ("U1", "U2", "U3", "U4")


def _w1(z1: Tensor) -> Tensor:
    return torch.sin(2 * math.pi * z1 / 4)


def _w2(z1: Tensor) -> Tensor:
    return 3 * torch.exp(-0.5 * ((z1 - 1) / 0.6) ** 2)


def _w3(z1: Tensor) -> Tensor:
    return 3 * torch.sigmoid((z1 - 1) / 0.3)


def potential(name: str, z: Tensor) -> Tensor:
    """U(z) for z [n, 2] → [n] (Rezende & Mohamed 2015, Table 1)."""
    z1, z2 = z[..., 0], z[..., 1]
    if name == "U1":
        radius = torch.linalg.vector_norm(z, dim=-1)
        ring = 0.5 * ((radius - 2) / 0.4) ** 2
        return ring - torch.logaddexp(-0.5 * ((z1 - 2) / 0.6) ** 2, -0.5 * ((z1 + 2) / 0.6) ** 2)
    if name == "U2":
        return 0.5 * ((z2 - _w1(z1)) / 0.4) ** 2
    if name == "U3":
        residual = z2 - _w1(z1)
        return -torch.logaddexp(-0.5 * (residual / 0.35) ** 2, -0.5 * ((residual + _w2(z1)) / 0.35) ** 2)
    if name == "U4":
        residual = z2 - _w1(z1)
        return -torch.logaddexp(-0.5 * (residual / 0.4) ** 2, -0.5 * ((residual + _w3(z1)) / 0.35) ** 2)
    raise ValueError(f"unknown energy potential {name!r}; known: {', '.join(NAMES)}")


def _grid_log_density(name: str, cells: int) -> tuple[Tensor, Tensor]:
    """Midpoints c [cells] of the box partition and −U at the grid of midpoints [cells (z1), cells (z2)]."""
    h = 2 * BOX_HALF_WIDTH / cells
    centres = -BOX_HALF_WIDTH + (torch.arange(cells, dtype=torch.float64) + 0.5) * h
    z1, z2 = torch.meshgrid(centres, centres, indexing="ij")
    points = torch.stack([z1.reshape(-1), z2.reshape(-1)], dim=-1)
    log_density = -torch.cat([potential(name, chunk) for chunk in points.split(1 << 20)])
    return centres, log_density.reshape(cells, cells)


@functools.cache
def grid_reference(name: str) -> tuple[float, tuple[float, float], tuple[tuple[float, float], ...]]:
    """(log normaliser over the box, mean, covariance) of exp(−U) restricted to the box, by the midpoint
    rule on MOMENT_GRID² cells. Plain floats, so the cache holds no tensors."""
    centres, log_density = _grid_log_density(name, MOMENT_GRID)
    h = 2 * BOX_HALF_WIDTH / MOMENT_GRID
    shift = log_density.max()
    weights = torch.exp(log_density - shift)  # [z1, z2]
    total = weights.sum()
    log_normaliser = float(torch.log(total) + shift + 2 * math.log(h))
    marginal1, marginal2 = weights.sum(1) / total, weights.sum(0) / total
    mean1, mean2 = marginal1 @ centres, marginal2 @ centres
    var1 = marginal1 @ (centres - mean1) ** 2
    var2 = marginal2 @ (centres - mean2) ** 2
    cov12 = (centres - mean1) @ (weights / total) @ (centres - mean2)
    return (
        log_normaliser,
        (float(mean1), float(mean2)),
        ((float(var1), float(cov12)), (float(cov12), float(var2))),
    )


@functools.lru_cache(maxsize=len(NAMES))
def _sampling_cdf(name: str) -> Tensor:
    """Cumulative cell masses (row-major over [z1, z2]) of the SAMPLE_GRID² piecewise-constant density."""
    _, log_density = _grid_log_density(name, SAMPLE_GRID)
    masses = torch.exp(log_density - log_density.max()).reshape(-1)
    return torch.cumsum(masses, 0)


def grid_sample(name: str, n: int, generator: torch.Generator) -> Tensor:
    """n float64 CPU draws from the piecewise-constant grid density on the box (see module docstring)."""
    cdf = _sampling_cdf(name)
    uniforms = torch.rand(n, 3, generator=generator, dtype=torch.float64, device=generator.device).cpu()
    cells = torch.searchsorted(cdf, uniforms[:, 0] * cdf[-1], right=True).clamp_(max=cdf.numel() - 1)
    row, column = cells // SAMPLE_GRID, cells % SAMPLE_GRID
    h = 2 * BOX_HALF_WIDTH / SAMPLE_GRID
    z1 = -BOX_HALF_WIDTH + (row.to(torch.float64) + uniforms[:, 1]) * h
    z2 = -BOX_HALF_WIDTH + (column.to(torch.float64) + uniforms[:, 2]) * h
    return torch.stack([z1, z2], dim=-1)


class EnergyTarget(Target):
    kind = "energy"

    def __init__(self, name: str, dtype: torch.dtype, device: torch.device | str):
        if name not in NAMES:
            raise ValueError(f"unknown energy potential {name!r}; known: {', '.join(NAMES)}")
        self.dim = 2
        self.name = name
        # A 0-d tensor that records dtype and device (moved by Target.to like any tensor attribute).
        self.anchor = torch.zeros((), dtype=dtype, device=device)

    def log_prob(self, x: Tensor, batch: object | None = None) -> Tensor:
        """−U(x), unnormalised (see `log_normaliser` for the box normaliser)."""
        return -potential(self.name, x)

    @property
    def log_normaliser(self) -> float:
        """log ∫_B exp(−U) over the box B = [−4, 4]² (grid estimate)."""
        return grid_reference(self.name)[0]

    def reference(self) -> Reference:
        """Moments and samples of exp(−U) restricted to [−4, 4]² (numerical; see the module docstring)."""
        _, mean, cov = grid_reference(self.name)
        dtype, device = self.anchor.dtype, self.anchor.device

        def sample(n: int, generator: torch.Generator) -> Tensor:
            return grid_sample(self.name, n, generator).to(device=device, dtype=dtype)

        return Reference(
            mean=torch.tensor(mean, dtype=dtype, device=device),
            cov=torch.tensor(cov, dtype=dtype, device=device),
            sample=sample,
        )


def build(spec: EnergyTargetSpec, context: BuildContext) -> EnergyTarget:
    return EnergyTarget(spec.name, context.dtype, context.device)
