"""The one activation table, the one nn.Module MLP and its seeded initialisation, shared by the generators
(`samplers.generator`), the batched-over-weight-vectors network of the BNN targets
(`targets.models.network.MLP`, which evaluates many flat weight vectors at once and is not an nn.Module),
the KSD critics (particle and amortised) and GPVI's helpers (`methods.generative.networks`).

Every network is initialised from a `torch.Generator`, never the global RNG, so building a method is a pure
function of its seed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils import skip_init


def _gelu(x: Tensor) -> Tensor:
    return F.gelu(x)  # the exact (erf) form; the ONNX export writes the same formula


#: name → elementwise activation. `leaky_relu` has negative slope 0.01; `softplus` β = 1, threshold 20.
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": torch.relu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "softplus": F.softplus,
    "elu": F.elu,
    "leaky_relu": F.leaky_relu,
    "silu": F.silu,
    "gelu": _gelu,
}

def activation_slope(name: str, pre: Tensor, out: Tensor) -> Tensor:
    """act'(pre) elementwise, given out = act(pre): closed forms where cheap, else autograd."""
    if name == "relu":
        return (pre > 0).to(pre.dtype)
    if name == "tanh":
        return 1 - out.square()
    if name == "sigmoid":
        return out * (1 - out)
    if name == "softplus":
        return torch.sigmoid(pre)
    if name == "leaky_relu":
        return torch.where(pre > 0, 1.0, 0.01).to(pre.dtype)
    if name == "elu":
        return torch.where(pre > 0, torch.ones_like(out), out + 1)
    with torch.enable_grad():
        x = pre.detach().requires_grad_(True)
        (slope,) = torch.autograd.grad(ACTIVATIONS[name](x).sum(), x)
    return slope


#: How `MLP` draws its initial weights (both U(−1/√fan_in, 1/√fan_in), PyTorch's nn.Linear default, layer by
#: layer, weight then bias): `float64` draws in float64 then casts (the same numbers on every device and
#: dtype; generators, helpers, the amortised KSD critic); `float32` draws in float32 (the particle KSD
#: critic's initialisation, kept so its recorded runs reproduce).
InitDraw = Literal["float64", "float32"]


def init_linear_(weight: Tensor, bias: Tensor, generator: torch.Generator) -> None:
    """PyTorch's default nn.Linear initialisation, U(−1/√fan_in, 1/√fan_in) for weight and bias, drawn
    from `generator` (never the global RNG) in float64 then cast, so it is the same on every device."""
    bound = 1.0 / math.sqrt(weight.shape[1]) if weight.shape[1] > 0 else 0.0
    with torch.no_grad():
        for tensor in (weight, bias):
            draw = torch.rand(tensor.shape, generator=generator, dtype=torch.float64) * 2 - 1
            tensor.copy_(draw * bound)


def seeded_linear(fan_in: int, fan_out: int, generator: torch.Generator, draw: InitDraw = "float64") -> nn.Linear:
    """An nn.Linear (float32) initialised from `generator` (skip_init: nn.Linear's own reset would draw from,
    and so disturb, the global RNG)."""
    layer = skip_init(nn.Linear, fan_in, fan_out)
    if draw == "float64":
        init_linear_(layer.weight, layer.bias, generator)
    elif draw == "float32":
        bound = 1.0 / math.sqrt(fan_in)
        with torch.no_grad():
            nn.init.uniform_(layer.weight, -bound, bound, generator=generator)
            nn.init.uniform_(layer.bias, -bound, bound, generator=generator)
    else:
        raise ValueError(f"draw must be 'float64' or 'float32', got {draw!r}")
    return layer


class MLP(nn.Module):
    """act(... act(x W_0ᵀ + b_0) ...) W_Lᵀ + b_L: widths [in, *hidden, out], no activation on the output.

    Rows are independent (no BatchNorm or other cross-row coupling): the KSD critics rely on it, since the
    Jacobian trace of a row-coupled f would not be per-particle and Hutchinson's estimate would be biased.
    """

    def __init__(self, widths: Sequence[int], activation: str, generator: torch.Generator,
                 draw: InitDraw = "float64"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; known: {', '.join(ACTIVATIONS)}")
        if len(widths) < 2 or any(w < 1 for w in widths):
            raise ValueError(f"an MLP needs at least an input and an output width, all ≥ 1; got {list(widths)}")
        self.activation_name = activation
        self.activation = ACTIVATIONS[activation]
        self.layers = nn.ModuleList(seeded_linear(a, b, generator, draw)
                                    for a, b in zip(widths[:-1], widths[1:], strict=True))

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x)
