"""Generator networks: GPVI's f(z) = g(z[:k]) + λz (Ratzlaff et al. 2021, eq. 6) and the plain amortised
generator f(z) = g(z) (λ = 0), with g an MLP k → hidden... → d whose output layer is linear.

g is split as g(u) = W φ(u) + b: φ is the hidden stack (the identity for a linear generator, `hidden=[]`)
and (W, b) the linear output layer. The GPVI methods use this split: J_g = W J_φ, so the Jacobian's top
k×k block is W[:k] J_φ and the coupling block W[k:] J_φ never has to be formed (methods/generative).

Parameter names (also the tensor names of a sampler's weights.safetensors): `hidden.{l}.weight` [out, in],
`hidden.{l}.bias` [out] for l = 0..L-1, then `output.weight` [d, H] and `output.bias` [d] (H = last hidden
width, or k). λ is a float (a trainable λ is held as `log_lambda`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn.utils import skip_init

# The shared activation table and seeded initialisation (re-exported: samplers.ACTIVATIONS is public).
from inference_core.coupling import FLOW_PREFIX, CouplingFlow
from inference_core.networks import ACTIVATIONS, init_linear_

__all__ = ["ACTIVATIONS", "GeneratorNetwork", "generator_forward", "init_linear_", "mlp_features", "parameter_shapes"]


def parameter_shapes(input_dim: int, hidden: Sequence[int], output_dim: int,
                     affine: bool = False) -> dict[str, tuple[int, ...]]:
    """Name → shape of every tensor of an MLP generator, in forward order (with `affine`, the output map
    x = shift + root·f of a generator trained in whitened coordinates last)."""
    shapes: dict[str, tuple[int, ...]] = {}
    fan_in = input_dim
    for layer, width in enumerate(hidden):
        shapes[f"hidden.{layer}.weight"] = (width, fan_in)
        shapes[f"hidden.{layer}.bias"] = (width,)
        fan_in = width
    shapes["output.weight"] = (output_dim, fan_in)
    shapes["output.bias"] = (output_dim,)
    if affine:
        shapes["affine.shift"] = (output_dim,)
        shapes["affine.root"] = (output_dim, output_dim)
    return shapes


def mlp_features(params: Sequence[tuple[Tensor, Tensor]], u: Tensor, activation: str) -> Tensor:
    """φ(u): the hidden stack act(... act(u W_0ᵀ + b_0) ...); `params` holds the hidden layers only."""
    act = ACTIVATIONS[activation]
    out = u
    for weight, bias in params:
        out = act(torch.nn.functional.linear(out, weight, bias))
    return out


def has_flow(tensors: dict[str, Tensor]) -> bool:
    return FLOW_PREFIX + "layers.0.mask" in tensors


def generator_forward(tensors: dict[str, Tensor], z: Tensor, *, input_dim: int, n_hidden: int,
                      activation: str, lam: float | Tensor, output_map: bool = True,
                      flow: CouplingFlow | None = None) -> Tensor:
    """f(z) = W φ(z[:, :k]) + b + λz (λ·z only when λ ≠ 0, and then z has the output's width); then, unless
    `output_map` is False, the flow T when the tensors hold one ("flow.*"; `flow`, when given, is it already built:
    a sampler builds it once) and shift + root·(…) when they hold an affine output ("affine.shift", "affine.root")."""
    hidden = [(tensors[f"hidden.{i}.weight"], tensors[f"hidden.{i}.bias"]) for i in range(n_hidden)]
    features = mlp_features(hidden, z[:, :input_dim], activation)
    out = torch.nn.functional.linear(features, tensors["output.weight"], tensors["output.bias"])
    if isinstance(lam, Tensor) or lam != 0.0:
        out = out + lam * z
    if not output_map:
        return out
    if flow is None and has_flow(tensors):
        flow = CouplingFlow.from_tensors(tensors)
    if flow is not None:
        out = flow(out)[0]
    if "affine.root" in tensors:
        out = torch.addmm(tensors["affine.shift"], out, tensors["affine.root"].T)
    return out


class GeneratorNetwork(nn.Module):
    """f(z) = g(z[:k]) + λz with g an MLP; noise z ∈ R^noise_dim, noise_dim = d when λ > 0, else k.

    `lam_trainable`: λ = exp(log_lambda) is a parameter (GPVI notes: optionally trained with its own
    optimiser); otherwise λ is a fixed float.
    """

    def __init__(self, *, input_dim: int, hidden: Sequence[int], output_dim: int, activation: str,
                 lam: float, lam_trainable: bool = False, generator: torch.Generator | None = None):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; known: {', '.join(ACTIVATIONS)}")
        if not (isinstance(lam, int | float) and math.isfinite(lam) and lam >= 0):
            raise ValueError(f"lambda must be a finite number >= 0, got {lam!r}")
        if lam_trainable and lam <= 0:
            raise ValueError("a trainable lambda needs an initial value > 0")
        if input_dim < 1 or output_dim < 1 or any(w < 1 for w in hidden):
            raise ValueError("generator widths must be positive")
        if lam > 0 and input_dim > output_dim:
            raise ValueError(f"the noise prefix k={input_dim} cannot exceed the output dimension {output_dim} "
                             "when lambda > 0")
        self.input_dim = int(input_dim)
        self.hidden_sizes = [int(w) for w in hidden]
        self.output_dim = int(output_dim)
        self.activation = activation
        self.lam_trainable = bool(lam_trainable)
        self.noise_dim = self.output_dim if lam > 0 else self.input_dim
        widths = [self.input_dim, *self.hidden_sizes]
        # skip_init: nn.Linear's own reset would draw from (and so disturb) the global RNG.
        self.hidden = nn.ModuleList(skip_init(nn.Linear, a, b) for a, b in zip(widths[:-1], widths[1:], strict=True))
        self.output = skip_init(nn.Linear, widths[-1], self.output_dim)
        if lam_trainable:
            self.log_lambda = nn.Parameter(torch.tensor(math.log(lam), dtype=torch.float64))
        else:
            self.register_buffer("lambda_value", torch.tensor(float(lam), dtype=torch.float64))
        generator = generator or torch.Generator().manual_seed(0)
        for layer in [*self.hidden, self.output]:
            init_linear_(layer.weight, layer.bias, generator)

    # ---- pieces --------------------------------------------------------------------------------------

    def lam(self) -> Tensor:
        """λ as a 0-dim tensor (with a graph to log_lambda when trainable)."""
        return self.log_lambda.exp() if self.lam_trainable else self.lambda_value

    def lam_float(self) -> float:
        return float(self.lam().detach())

    def hidden_params(self, detach: bool = False) -> list[tuple[Tensor, Tensor]]:
        return [(layer.weight.detach(), layer.bias.detach()) if detach else (layer.weight, layer.bias)
                for layer in self.hidden]

    def generator_parameters(self) -> list[nn.Parameter]:
        """Every parameter of g (λ excluded: it has its own optimiser)."""
        return [p for name, p in self.named_parameters() if name != "log_lambda"]

    def features(self, u: Tensor, detach: bool = False) -> Tensor:
        return mlp_features(self.hidden_params(detach), u, self.activation)

    def forward(self, z: Tensor) -> Tensor:
        if z.ndim != 2 or z.shape[1] != self.noise_dim:
            raise ValueError(f"noise must have shape [n, {self.noise_dim}], got {list(z.shape)}")
        return self.head(self.features(z[:, : self.input_dim]), z)

    def head(self, features: Tensor, z: Tensor) -> Tensor:
        """f(z) from φ(z[:k]) (`features`): W φ + b + λz."""
        out = self.output(features)
        if self.noise_dim == self.output_dim and (self.lam_trainable or float(self.lambda_value) != 0.0):
            out = out + self.lam().to(out.dtype) * z
        return out

    def tensors(self) -> dict[str, Tensor]:
        """Name → detached tensor of g, in the sampler's naming."""
        return {name: p.detach() for name, p in self.named_parameters() if name != "log_lambda"}
