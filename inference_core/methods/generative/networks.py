"""Auxiliary networks of the generative methods: GPVI's helpers and the KSD critic. All are initialised
from a `torch.Generator` (never the global RNG), so a method's construction is a pure function of its seed."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn.utils import skip_init

from inference_core.samplers.generator import ACTIVATIONS, init_linear_


def _linear(fan_in: int, fan_out: int, generator: torch.Generator) -> nn.Linear:
    layer = skip_init(nn.Linear, fan_in, fan_out)
    init_linear_(layer.weight, layer.bias, generator)
    return layer


class MLP(nn.Module):
    """act(... act(x W_0ᵀ + b_0) ...) W_Lᵀ + b_L: widths [in, *hidden, out], no activation on the output."""

    def __init__(self, widths: Sequence[int], activation: str, generator: torch.Generator):
        super().__init__()
        self.activation = ACTIVATIONS[activation]
        self.layers = nn.ModuleList(_linear(a, b, generator) for a, b in zip(widths[:-1], widths[1:], strict=True))

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x)


class PairwiseHelper(nn.Module):
    """h_η(z'[:k], w) ≈ (A(z') + λI)^{-T} w (GPVI Appendix B.1; ALF's InverseMVPAlgorithm network).

    Each input gets its own linear layer + ReLU of width `width`; the two are concatenated (2·width) and
    go through `layers` ReLU layers of width 2·width and a linear output of size k.
    """

    def __init__(self, k: int, width: int, layers: int, generator: torch.Generator):
        super().__init__()
        self.noise_branch = _linear(k, width, generator)
        self.vector_branch = _linear(k, width, generator)
        self.trunk = MLP([2 * width] + [2 * width] * layers + [k], "relu", generator)

    def forward(self, z_prefix: Tensor, w: Tensor) -> Tensor:
        hidden = torch.cat([torch.relu(self.noise_branch(z_prefix)), torch.relu(self.vector_branch(w))], dim=-1)
        return self.trunk(hidden)


class MatrixHelper(nn.Module):
    """P_η(z'[:k]) ≈ (A(z') + λI)^{-T}, a k×k matrix per noise point (the `matrix` helper).

    The output layer starts at zero weight and identity bias, so P starts at I.
    """

    def __init__(self, k: int, width: int, layers: int, generator: torch.Generator):
        super().__init__()
        self.k = k
        self.net = MLP([k] + [width] * layers + [k * k], "relu", generator)
        with torch.no_grad():
            last = self.net.layers[-1]
            last.weight.zero_()
            last.bias.copy_(torch.eye(k).reshape(-1))

    def forward(self, z_prefix: Tensor) -> Tensor:
        return self.net(z_prefix).reshape(*z_prefix.shape[:-1], self.k, self.k)
