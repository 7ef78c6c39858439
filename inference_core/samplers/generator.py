"""Generator networks: GPVI's f(z) = g(z[:k]) + λz (Ratzlaff et al. 2021, eq. 6) and the plain amortised
generator f(z) = g(z) (λ = 0), with g an MLP k → hidden... → d whose output layer is linear.

g is split as g(u) = W φ(u) + b: φ is the hidden stack (the identity for a linear generator, `hidden=[]`)
and (W, b) the linear output layer. The GPVI methods use this split: J_g = W J_φ, so the Jacobian's top
k×k block is W[:k] J_φ and the coupling block W[k:] J_φ never has to be formed (methods/generative).

Parameter names (also the tensor names of a sampler's weights.safetensors): `hidden.{l}.weight` [out, in],
`hidden.{l}.bias` [out] for l = 0..L-1, then `output.weight` [d, H] and `output.bias` [d] (H = last hidden
width, or k). λ is a float (a trainable λ is held as `log_lambda`).

Two structures (`structure`; GPVI issue 40):

* "residual" (the paper's eq. 6, and the only one before): f(z) = g(z[:k]) + λz, J_f = [[A + λI_k, 0], [B, λI]]
  with A = W_top J_φ. Nothing keeps det(A + λI) away from zero: on BNN hypernetworks its sign changes across draws,
  the generator folds and its log q is a branch density (measured at the λ = 0.01 of then: GPVI on the GPVI paper's
  Figure 1 BNN, d = 151, k = 32, det ∂f/∂z < 0 at 989 of 2,000 draws after 2,000 steps, 1,023 after 5,000).
* "coupling" (injective by construction): the top k outputs are t(u) = shift + exp(log_scale) ⊙ T(u), u = z[:k],
  T an affine coupling flow (`inference_core.coupling.CouplingFlow`: Real NVP, `coupling_layers` couplings whose
  nets have two tanh layers of `coupling_hidden`), and the other d − k outputs are W φ(u) + b + λ z[k:] (the MLP
  reads the noise prefix u itself, not t(u), so its Jacobian is that of the residual structure's rows past k).
  J_f = [[J_t(u), 0], [B(u), λI_{d−k}]] with J_t = diag(exp(log_scale)) J_T(u), B = W J_φ(u): block
  lower-triangular, and every coupling's Jacobian is triangular (after a permutation) with diagonal exp(s) > 0, so
      det J_f = exp(Σ log_scale) · det J_T(u) · λ^(d−k) > 0 everywhere
  and f is a bijection of R^d (u = t⁻¹(x[:k]) by the couplings' inverses, then z[k:] = (x[k:] − W φ(u) − b)/λ):
      log q(f(z)) = log N(z; 0, I) − Σ log_scale − log det J_T(u) − (d − k) log λ    exactly (samplers.density).
  It needs λ > 0 and k < d. Tensors: the residual ones with `output.weight` [d − k, H], `output.bias` [d − k],
  then `top.shift` [k], `top.log_scale` [k] and the flow's `top.flow.layers.{l}.mask` / `.net.{0,2,4}.{weight,
  bias}` (TOP_FLOW_PREFIX + CouplingFlow's state-dict names). Same target, same steps: certificate density
  "exact" (methods.generative.gpvi.DEFAULT_BNN_STRUCTURE records the rest of that comparison).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn.utils import skip_init

# The shared activation table and seeded initialisation (re-exported: samplers.ACTIVATIONS is public).
from inference_core.coupling import FLOW_PREFIX, CouplingFlow, flow_shapes
from inference_core.networks import ACTIVATIONS, init_linear_

__all__ = ["ACTIVATIONS", "STRUCTURES", "CouplingTop", "GeneratorNetwork", "generator_forward", "init_linear_",
           "mlp_features", "parameter_shapes"]

#: the generator structures (module docstring): "residual" f = g(z[:k]) + λz, "coupling" injective by construction
STRUCTURES = ("residual", "coupling")
#: a coupling generator's top-block tensors: "top.shift", "top.log_scale" and its flow's "top.flow.*"
TOP_PREFIX = "top."
TOP_FLOW_PREFIX = "top.flow."


def parameter_shapes(input_dim: int, hidden: Sequence[int], output_dim: int, affine: bool = False,
                     coupling: tuple[int, int] | None = None) -> dict[str, tuple[int, ...]]:
    """Name → shape of every tensor of an MLP generator, in forward order (with `coupling` = (layers, hidden), the
    "coupling" structure: an output layer of d − k rows, then the top block; with `affine`, the output map
    x = shift + root·f of a generator trained in whitened coordinates last)."""
    shapes: dict[str, tuple[int, ...]] = {}
    fan_in = input_dim
    for layer, width in enumerate(hidden):
        shapes[f"hidden.{layer}.weight"] = (width, fan_in)
        shapes[f"hidden.{layer}.bias"] = (width,)
        fan_in = width
    rows = output_dim - input_dim if coupling is not None else output_dim
    shapes["output.weight"] = (rows, fan_in)
    shapes["output.bias"] = (rows,)
    if coupling is not None:
        shapes[TOP_PREFIX + "shift"] = (input_dim,)
        shapes[TOP_PREFIX + "log_scale"] = (input_dim,)
        shapes.update(flow_shapes(input_dim, coupling[0], coupling[1], TOP_FLOW_PREFIX))
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


def has_coupling_top(tensors: dict[str, Tensor]) -> bool:
    """The tensors are a "coupling"-structure generator's (module docstring)."""
    return TOP_PREFIX + "log_scale" in tensors


class CouplingTop(nn.Module):
    """The top block of a "coupling" generator: t(u) = shift + exp(log_scale) ⊙ T(u) and log det ∂t/∂u =
    Σ log_scale + log det ∂T/∂u (> 0 determinant everywhere: T's couplings scale by exp(s) > 0). T starts as the
    identity (CouplingFlow zeroes each coupling's last layer), so t starts as u, rescaled by `GenerativeMethod`'s
    initial-scale match."""

    def __init__(self, dim: int, layers: int, hidden: int, generator: torch.Generator):
        super().__init__()
        self.flow = CouplingFlow(dim, layers, hidden, generator)
        self.shift = nn.Parameter(torch.zeros(dim))
        self.log_scale = nn.Parameter(torch.zeros(dim))

    def forward(self, u: Tensor) -> tuple[Tensor, Tensor]:
        y, log_det = self.flow(u)
        return self.shift + self.log_scale.exp() * y, log_det + self.log_scale.sum()

    def jacobian(self, u: Tensor) -> Tensor:
        """∂t/∂u at rows u [n, k], [n, k, k] (output i, input j), on detached weights:
        diag(exp(log_scale)) ∂T/∂u, T's in closed form (CouplingFlow.forward_jacobian)."""
        return self.log_scale.detach().exp().unsqueeze(-1) * self.flow.forward_jacobian(u, frozen=True)[1]


def coupling_top_forward(tensors: dict[str, Tensor], u: Tensor, flow: CouplingFlow | None = None
                         ) -> tuple[Tensor, Tensor]:
    """(t(u), log det ∂t/∂u) from a sampler's tensors (`flow`: their "top.flow.*" already built)."""
    if flow is None:
        flow = CouplingFlow.from_tensors(tensors, TOP_FLOW_PREFIX)
    y, log_det = flow(u)
    log_scale = tensors[TOP_PREFIX + "log_scale"]
    return tensors[TOP_PREFIX + "shift"] + log_scale.exp() * y, log_det + log_scale.sum()


def generator_forward(tensors: dict[str, Tensor], z: Tensor, *, input_dim: int, n_hidden: int,
                      activation: str, lam: float | Tensor, output_map: bool = True,
                      flow: CouplingFlow | None = None, top_flow: CouplingFlow | None = None) -> Tensor:
    """f(z) = W φ(z[:, :k]) + b + λz (λ·z only when λ ≠ 0, and then z has the output's width) — or, for the
    "coupling" structure (tensors with "top.*"; `top_flow`, when given, is their flow already built), f(z) =
    [t(z[:k]); W φ(z[:k]) + b + λ z[k:]]; then, unless `output_map` is False, the flow T when the tensors hold one
    ("flow.*"; `flow`, when given, is it already built: a sampler builds it once) and shift + root·(…) when they
    hold an affine output ("affine.shift", "affine.root")."""
    hidden = [(tensors[f"hidden.{i}.weight"], tensors[f"hidden.{i}.bias"]) for i in range(n_hidden)]
    features = mlp_features(hidden, z[:, :input_dim], activation)
    out = torch.nn.functional.linear(features, tensors["output.weight"], tensors["output.bias"])
    if has_coupling_top(tensors):
        top = coupling_top_forward(tensors, z[:, :input_dim], top_flow)[0]
        out = torch.cat([top, out + lam * z[:, input_dim:]], dim=1)
    elif isinstance(lam, Tensor) or lam != 0.0:
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
    """f(z) = g(z[:k]) + λz with g an MLP; noise z ∈ R^noise_dim, noise_dim = d when λ > 0, else k — or, with
    `structure="coupling"`, f(z) = [t(z[:k]); W φ(z[:k]) + b + λ z[k:]] (module docstring; λ > 0, k < d).

    `lam_trainable`: λ = exp(log_lambda) is a parameter (GPVI notes: optionally trained with its own
    optimiser); otherwise λ is a fixed float.
    """

    def __init__(self, *, input_dim: int, hidden: Sequence[int], output_dim: int, activation: str,
                 lam: float, lam_trainable: bool = False, generator: torch.Generator | None = None,
                 structure: str = "residual", coupling_layers: int = 4, coupling_hidden: int = 64):
        super().__init__()
        if structure not in STRUCTURES:
            raise ValueError(f"unknown generator structure {structure!r}; known: {', '.join(STRUCTURES)}")
        if structure == "coupling" and not (isinstance(lam, int | float) and lam > 0 and input_dim < output_dim):
            raise ValueError(f"the 'coupling' generator structure needs lambda > 0 and a noise prefix k smaller than "
                             f"d (got lambda={lam!r}, k={input_dim}, d={output_dim})")
        if structure == "coupling" and (coupling_layers < 1 or coupling_hidden < 1):
            raise ValueError("the coupling top block needs at least one layer of positive width")
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
        self.structure = structure
        self.coupling = structure == "coupling"
        self.coupling_layers, self.coupling_hidden = int(coupling_layers), int(coupling_hidden)
        self.noise_dim = self.output_dim if lam > 0 else self.input_dim
        widths = [self.input_dim, *self.hidden_sizes]
        # skip_init: nn.Linear's own reset would draw from (and so disturb) the global RNG.
        self.hidden = nn.ModuleList(skip_init(nn.Linear, a, b) for a, b in zip(widths[:-1], widths[1:], strict=True))
        rows = self.output_dim - self.input_dim if self.coupling else self.output_dim
        self.output = skip_init(nn.Linear, widths[-1], rows)
        if lam_trainable:
            self.log_lambda = nn.Parameter(torch.tensor(math.log(lam), dtype=torch.float64))
        else:
            self.register_buffer("lambda_value", torch.tensor(float(lam), dtype=torch.float64))
        generator = generator or torch.Generator().manual_seed(0)
        for layer in [*self.hidden, self.output]:
            init_linear_(layer.weight, layer.bias, generator)
        # drawn after g's layers: a residual generator's initialisation is unchanged by this option
        self.top = CouplingTop(self.input_dim, self.coupling_layers, self.coupling_hidden, generator) if self.coupling \
            else None

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
        """f(z) from φ(z[:k]) (`features`): W φ + b + λz, or [t(z[:k]); W φ + b + λ z[k:]] ("coupling")."""
        out = self.output(features)
        if self.top is not None:
            top = self.top(z[:, : self.input_dim])[0]
            return torch.cat([top, out + self.lam().to(out.dtype) * z[:, self.input_dim:]], dim=1)
        if self.noise_dim == self.output_dim and (self.lam_trainable or float(self.lambda_value) != 0.0):
            out = out + self.lam().to(out.dtype) * z
        return out

    def top_log_det(self, u: Tensor) -> Tensor:
        """log det ∂t/∂u at rows u [n, k] of a "coupling" generator (> 0 determinant: module docstring)."""
        if self.top is None:
            raise ValueError("only a 'coupling' generator has the top block t")
        return self.top(u)[1]

    def tensors(self) -> dict[str, Tensor]:
        """Name → detached tensor of g (and of the top block t, its coupling masks included), in the sampler's
        naming."""
        out = {name: p.detach() for name, p in self.named_parameters() if name != "log_lambda"}
        if self.top is not None:
            out.update({name: b.detach() for name, b in self.named_buffers() if name.startswith(TOP_FLOW_PREFIX)})
        return out
