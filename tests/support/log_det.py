"""The brute-force reference of a generator's exact log q (samplers.density): log N(z) − log|det ∂f/∂z| with the
full [d, d] Jacobian from torch.autograd.functional.jacobian of the float64 forward."""

from __future__ import annotations

import math

import torch

from inference_core.samplers import Sampler, generator_forward


def brute_force_log_q(sampler: Sampler, z: torch.Tensor, one_orientation: bool = False) -> torch.Tensor:
    """[n] float64; `one_orientation`: also assert det ∂f/∂z > 0 at every z (a generator that cannot fold)."""
    gen = sampler.config["generator"]
    tensors = {name: t.double() for name, t in sampler.tensors().items()}
    lam = float(torch.tensor(gen["lambda"], dtype=torch.float32))
    out = []
    for row in z.double():
        def f(v: torch.Tensor) -> torch.Tensor:
            return generator_forward(tensors, v[None], input_dim=gen["input_dim"], n_hidden=len(gen["hidden"]),
                                     activation=gen["activation"], lam=lam)[0]
        sign, logabs = torch.linalg.slogdet(torch.autograd.functional.jacobian(f, row))
        if one_orientation:
            assert float(sign) == 1.0, "det ∂f/∂z ≤ 0 at some z: the generator folds"
        log_normal = -0.5 * float(row.square().sum()) - 0.5 * row.numel() * math.log(2 * math.pi)
        out.append(log_normal - float(logabs))
    return torch.tensor(out, dtype=torch.float64)
