"""Random draws that take an explicit torch.Generator (torch's own Gamma sampler does not), so that
initialisations are reproducible from the method's generator alone."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def sample_gamma(shape: float, n: int, generator: torch.Generator) -> Tensor:
    """n draws of Gamma(shape, rate 1), float64 on the generator's device.

    Marsaglia & Tsang 2000 ("A simple method for generating gamma variables", ACM TOMS 26(3)): for a ≥ 1,
    d = a − 1/3, c = 1/√(9d), v = (1 + cZ)³, accept d·v when log U < Z²/2 + d − dv + d log v. For a < 1 the
    boost Gamma(a) = Gamma(a + 1)·U^{1/a}. Rejection rounds repeat only over the rejected entries.
    """
    if not shape > 0 or n < 0:
        raise ValueError("sample_gamma needs shape > 0 and n >= 0")
    device = generator.device
    a = shape + 1.0 if shape < 1 else shape
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    out = torch.empty(n, dtype=torch.float64, device=device)
    pending = torch.arange(n, device=device)
    while pending.numel():
        m = pending.numel()
        z = torch.randn(m, generator=generator, dtype=torch.float64, device=device)
        u = torch.rand(m, generator=generator, dtype=torch.float64, device=device)
        v = (1 + c * z) ** 3
        safe_v = torch.where(v > 0, v, torch.ones_like(v))
        accept = (v > 0) & (torch.log(u) < 0.5 * z**2 + d - d * safe_v + d * torch.log(safe_v))
        out[pending[accept]] = d * v[accept]
        pending = pending[~accept]
    if shape < 1:
        u = torch.rand(n, generator=generator, dtype=torch.float64, device=device)
        out = out * u ** (1.0 / shape)
    # Tiny shapes can underflow to 0; keep log Gamma finite (float64's smallest normal is ~2e-308).
    return out.clamp_min(torch.finfo(torch.float64).tiny)
