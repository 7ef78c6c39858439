"""A fully connected network evaluated for many weight vectors (particles) at once.

Each particle is one flat vector laid out by `schemas.models.mlp_layout` (per layer: weight [out, in]
row-major, then bias [out]; extra scalars last), as in ALF's `ParamNetwork`/`ParamFC` (docs/implementation-notes.md,
"Hypernetworks and BNN parameter layout"). `forward(theta[n, D], X[B, p]) -> [n, B, out]` runs one batched
matmul per layer over the particle dimension (`torch.matmul` broadcasting, then `torch.baddbmm`), never a
Python loop over particles. The object holds no tensors, so it moves with any target for free.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from inference_core.networks import ACTIVATIONS
from inference_core.schemas.models import ParameterBlock, layout_size, mlp_layout

#: The shared activation table (inference_core.networks), under this module's historical name.
ACTIVATION_FUNCTIONS = ACTIVATIONS


class MLP:
    """Architecture and parameter layout of an MLP p → hidden... → n_outputs (no activation on the output)."""

    def __init__(self, n_inputs: int, hidden: Sequence[int], n_outputs: int, activation: str,
                 extras: Sequence[str] = ()):
        if activation not in ACTIVATION_FUNCTIONS:
            raise ValueError(f"unknown activation {activation!r}; known: {', '.join(ACTIVATION_FUNCTIONS)}")
        self.sizes = [n_inputs, *hidden, n_outputs]
        self.activation_name = activation
        self.activation = ACTIVATION_FUNCTIONS[activation]
        self.layout: list[ParameterBlock] = mlp_layout(n_inputs, hidden, n_outputs, extras)
        self.dim = layout_size(self.layout)
        self.n_weights = self.dim - len(extras)  # network weights and biases come first
        self.blocks = {block.name: block for block in self.layout}

    @property
    def n_layers(self) -> int:
        return len(self.sizes) - 1

    def layer_shapes(self) -> list[tuple[int, int]]:
        """(fan_out, fan_in) per layer."""
        return [(fan_out, fan_in) for fan_in, fan_out in zip(self.sizes[:-1], self.sizes[1:], strict=True)]

    def describe_layout(self) -> list[dict]:
        """JSON-ready layout: [{"name", "shape", "offset"}, ...] (POST /v1/targets/validate returns it)."""
        return [block.as_dict() for block in self.layout]

    def unpack(self, theta: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Views (weight [n, out, in], bias [n, out]) per layer of a flat [n, D] parameter batch."""
        if theta.ndim != 2 or theta.shape[1] != self.dim:
            raise ValueError(f"weights must have shape [n, {self.dim}], got {list(theta.shape)}")
        n = theta.shape[0]
        layers = []
        for layer, (fan_out, fan_in) in enumerate(self.layer_shapes()):
            weight, bias = self.blocks[f"layer{layer}.weight"], self.blocks[f"layer{layer}.bias"]
            layers.append((
                theta[:, weight.offset: weight.offset + weight.size].reshape(n, fan_out, fan_in),
                theta[:, bias.offset: bias.offset + bias.size],
            ))
        return layers

    def extra(self, theta: Tensor, name: str) -> Tensor:
        """The extra scalar `name` of each particle, [n]."""
        return theta[:, self.blocks[name].offset]

    def forward(self, theta: Tensor, X: Tensor) -> Tensor:
        """Outputs [n, B, out] of the n networks in `theta` [n, D] on the shared inputs X [B, p]."""
        if X.ndim != 2 or X.shape[1] != self.sizes[0]:
            raise ValueError(f"inputs must have shape [B, {self.sizes[0]}], got {list(X.shape)}")
        layers = self.unpack(theta)
        # X is shared by every particle: broadcast [B, p] @ [n, p, out] instead of copying X n times.
        weight, bias = layers[0]
        out = torch.matmul(X, weight.transpose(1, 2)) + bias.unsqueeze(1)
        for weight, bias in layers[1:]:
            out = torch.baddbmm(bias.unsqueeze(1), self.activation(out), weight.transpose(1, 2))
        return out

    def initial_weights(self, n: int, generator: torch.Generator, dtype: torch.dtype,
                        device: torch.device) -> Tensor:
        """Network part [n, n_weights] of an initialisation: weights ~ N(0, 1/(fan_in + 1)), biases 0
        (the SVGD BNN init, Liu & Wang 2016, python/bayesian_nn.py)."""
        theta = torch.zeros(n, self.n_weights, dtype=torch.float64, device=generator.device)
        for layer, (_, fan_in) in enumerate(self.layer_shapes()):
            block = self.blocks[f"layer{layer}.weight"]
            noise = torch.randn(n, block.size, generator=generator, dtype=torch.float64, device=generator.device)
            theta[:, block.offset: block.offset + block.size] = noise / math.sqrt(fan_in + 1)
        return theta.to(device=device, dtype=dtype)

    def weight_prior_std(self, prior_std: float, scaling: str) -> Tensor:
        """Per-parameter prior std [n_weights] (float64): prior_std, or divided by √fan_in / √fan_out."""
        stds = torch.empty(self.n_weights, dtype=torch.float64)
        for layer, (fan_out, fan_in) in enumerate(self.layer_shapes()):
            fan = {"none": 1, "fan_in": fan_in, "fan_out": fan_out}[scaling]
            for kind in ("weight", "bias"):
                block = self.blocks[f"layer{layer}.{kind}"]
                stds[block.offset: block.offset + block.size] = prior_std / math.sqrt(fan)
        return stds
