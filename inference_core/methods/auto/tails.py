"""Heavy tails for `auto` (`transport: "tails"`): a map that gives a Gaussian the posterior's polynomial tails.

Why SVGD needs it. With a kernel whose bandwidth follows the cloud (the median rule), the repulsion between particles
falls as 1/r when the cloud grows to radius r, and so does the kernel-averaged score of a density whose tails decay
like a power (a Student-t's score is −(ν+1)x/(ν+x²) ≈ −(ν+1)/x). Their ratio does not depend on the cloud's size, so
no spread balances them: measured on 20 independent t₅'s (suite problem `student_t_20`), the repulsion exceeded the
pull by 3-13 % at every radius and the cloud spread without bound (docs/method-choice.md, "Heavy tails"). A Gaussian's
score grows with x, and there the balance exists. Nor does the flow help: Lipschitz couplings of a Gaussian keep its
tails Gaussian (Jaini, Kobyzev, Yu & Brubaker 2020, "Tails of Lipschitz triangular flows", Theorem 4).

The maps, in Pathfinder-whitened coordinates z, both Tukey's h transform (Tukey 1977; Headrick 2007, "Tukey g-and-h"):
- coordinatewise (`TukeyTails`), for tails along the axes (independent heavy-tailed coordinates): x_i = z_i·exp(h z_i²/2)
  with h = h₊ for z_i ≥ 0 and h₋ below; monotone and smooth (slope 1 at 0 from both sides). If x_i's density falls like
  |x_i|^−(ν+1), then in z_i it falls like exp(−ν h z_i²/2): Gaussian tails for any h > 0, unit-scale ones for h = 1/ν.
- radial (`RadialTukey`), for an elliptical posterior (a multivariate t, a scale mixture of Gaussians), whose density
  falls like |x|^−(ν+d) in every direction: x = z·exp(h (|z| − √d)₊²/2), which leaves the Gaussian's body (|z| ≲ √d)
  alone and turns the radial tail |x|^−(ν+1) into exp(−ν h (|z| − √d)²/2).
SVGD runs in z, where the score grows with z again.

The probe (`probe_tails`) reads the radial log-density slope g(r) along rays from Pathfinder's mean. The decay
a(r) = −r·g(r) is r² for a Gaussian, c·r for an exponential tail and K r²/(c + r²) for a Student-t (K = ν + 1 along an
axis of independent t's, ν + d in any direction of a d-dimensional multivariate t), so two radii give K exactly for
that family (`power_law_index`) and ρ = a(2r)/a(r) is 4, 2 and towards 1. Along each axis and side at r = 4, 8 and 16,
a side with ρ below POLYNOMIAL_BELOW at both doublings (a shoulder, a plateau between two radii, does not pass) has
index ν̂ = K − 1 (from 8 and 16); along DIRECTIONS random directions at r = max(4, 2√d) and twice that, the median of
K − d is the radial index. An elliptical t's directions read ν and its axes ν + d − 1; independent t's give the
axes ν and the directions far more (every coordinate at once). So the radial map applies where the radial index is
at most RADIAL_INDEX_MAX and below the axes' median index, else the coordinatewise one where some axis side has a
power law, else none. Measured (seeds 0-5 unless given; docs/method-choice.md, point 8): multivariate t's of d = 3-20
and ν = 4-10 read ν within 0.13 (seed 0), `student_t_20`'s axes 4.9-5.0 and its directions 57-68, and the suite's
other problems on the linear path light (axis ratios at least 2.38, radial indices at least 179). Cost: 6d +
2·DIRECTIONS gradient rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from inference_core.targets.base import Target

#: where the axis probe reads the radial slope, in Pathfinder sds (each a doubling of the one before)
PROBE_RADII = (4.0, 8.0, 16.0)
#: ρ = a(2r) / a(r) below this at both doublings is a power-law tail along an axis (Gaussian 4, exponential 2, t₅
#: 1.26 and 1.07); on the suite's other problems (linear path, seeds 0-5) one axis side had ρ below it from 4 to 8
#: (non-centred eight schools, seed 0: 1.05, a shoulder), and none from 8 to 16 (that side: 3.1)
POLYNOMIAL_BELOW = 1.6
#: random directions of the radial probe
DIRECTIONS = 16
#: radial index (median over the directions) up to which the posterior is taken as elliptical with power-law tails
RADIAL_INDEX_MAX = 30.0
#: the smallest index the probe reports (h ≤ 1/MIN_INDEX): a Cauchy's is 1
MIN_INDEX = 1.0
#: rows of one probe evaluation (a model over a large dataset holds one activation per row)
PROBE_CHUNK = 128


def power_law_index(inner: Tensor, outer: Tensor, r: float) -> Tensor:
    """K of a decay a(ρ) = K ρ²/(c + ρ²) through a(r) = inner and a(2r) = outer (1/a is linear in 1/ρ²): exact for
    a Student-t; inf where the density does not fall at both radii or the fit says no power law (1/K ≤ 0, a
    Gaussian's 1/K = 0)."""
    c_over_k = (1 / inner - 1 / outer) / (1 / r**2 - 1 / (2 * r) ** 2)
    inverse = 1 / outer - c_over_k / (2 * r) ** 2
    return torch.where((inner > 0) & (outer > 0) & (inverse > 0), 1 / inverse, torch.inf)


def _decays(view: Target, directions: Tensor, radius: float, dtype: torch.dtype, device: torch.device) -> Tensor:
    """a(r) = −r·g(r) along each unit row of `directions` [m, d]; nan where log p is not finite there."""
    out = []
    for rows in directions.split(PROBE_CHUNK):
        log_p, score = view.log_prob_and_score((radius * rows).to(device=device, dtype=dtype))
        slope = (score.double().cpu() * rows).sum(-1)
        out.append(torch.where(torch.isfinite(log_p.double().cpu()), -radius * slope, torch.nan))
    return torch.cat(out)


@dataclass(frozen=True)
class TailProbe:
    ratio: Tensor  # [2, d] the larger ρ per axis side (row 0: +, row 1: −); nan where the density does not fall
    index: Tensor  # [2, d] ν̂ where the side's tail is a power law, inf elsewhere
    radial_index: float  # median over random directions of K − d: ν̂ of an elliptical posterior (inf: none)
    axis_index: float  # median over the axis sides of K − 1, power law or not (inf: none)
    evals: int  # gradient rows spent

    @property
    def shape(self) -> str:
        """'radial', 'coordinatewise' or 'light' (module docstring)."""
        if self.radial_index <= min(RADIAL_INDEX_MAX, self.axis_index):
            return "radial"
        return "coordinatewise" if bool(torch.isfinite(self.index).any()) else "light"

    @property
    def smallest_index(self) -> float:
        """The heaviest tail found: ν̂ of the map `transform` uses (inf where none)."""
        if self.shape == "radial":
            return self.radial_index
        return float(self.index.min())

    def transform(self) -> nn.Module:
        """The map for `shape` (the identity where light)."""
        if self.shape == "radial":
            return RadialTukey(1.0 / max(self.radial_index, MIN_INDEX), int(self.index.shape[1]))
        return TukeyTails(1.0 / self.index)


def probe_tails(view: Target, generator: torch.Generator, dtype: torch.dtype, device: torch.device) -> TailProbe:
    """ρ and ν̂ (module docstring) of `view`, a target in whitened coordinates; `generator` draws the random
    directions; evaluated in the `dtype` and on the `device` the job runs in."""
    d = int(view.dim)
    axes = torch.cat([torch.eye(d, dtype=torch.float64), -torch.eye(d, dtype=torch.float64)])
    decays = torch.stack([_decays(view, axes, r, dtype, device).view(2, d) for r in PROBE_RADII])
    ratios = torch.where((decays[:-1] > 0) & (decays[1:] > 0), decays[1:] / decays[:-1], torch.nan)
    k = power_law_index(decays[-2], decays[-1], PROBE_RADII[-2])
    power_law = (ratios < POLYNOMIAL_BELOW).all(0) & torch.isfinite(k)
    index = torch.where(power_law, (k - 1).clamp_min(MIN_INDEX), torch.inf)
    directions = torch.randn(DIRECTIONS, d, generator=generator, dtype=torch.float64)
    directions = directions / directions.norm(dim=-1, keepdim=True)
    radius = max(PROBE_RADII[0], 2 * math.sqrt(d))
    k_radial = power_law_index(*(_decays(view, directions, r, dtype, device) for r in (radius, 2 * radius)), radius)
    radial_index = float((k_radial - d).median())
    return TailProbe(ratios.max(0).values, index, radial_index, float((k - 1).median()),
                     2 * len(PROBE_RADII) * d + 2 * DIRECTIONS)


class TukeyTails(nn.Module):
    """x = z·exp(h z²/2) coordinatewise, h = h₊ for z ≥ 0 and h₋ below (module docstring); forward(z) → (x,
    log|det ∂x/∂z|), the interface of transport.CouplingFlow, so that transport.FlowTarget carries it."""

    def __init__(self, h: Tensor):
        super().__init__()
        self.register_buffer("h", h.clone())  # [2, d]

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        h = torch.where(z >= 0, self.h[0].to(z), self.h[1].to(z))
        half_square = 0.5 * h * z.square()
        return z * torch.exp(half_square), (half_square + torch.log1p(2 * half_square)).sum(-1)


class RadialTukey(nn.Module):
    """x = z·exp(h (|z| − √d)₊²/2) (module docstring): the radial stretch ρ(s) = s·E(s), E = e^{h(s−√d)₊²/2}, is
    smooth at s = √d (ρ′ = E·(1 + h s (s − √d)₊), 1 from both sides) and grows like e^{h s²/2}; log|det| = d·log E +
    log(1 + h s (s − √d)₊) (ρ′ radially, ρ/s = E in the d − 1 tangential directions)."""

    def __init__(self, h: float, dim: int):
        super().__init__()
        self.h = h
        self.body = math.sqrt(dim)

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        radius = z.square().sum(-1).clamp_min(1e-300).sqrt()
        excess = (radius - self.body).clamp_min(0)
        half_square = 0.5 * self.h * excess.square()
        log_det = z.shape[-1] * half_square + torch.log1p(self.h * radius * excess)
        return z * torch.exp(half_square)[:, None], log_det
