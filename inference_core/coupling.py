"""Affine coupling flows (Real NVP: Dinh, Sohl-Dickstein & Bengio 2017, "Density estimation using Real NVP",
eq. 7-8): y = z ⊙ m + (1 − m) ⊙ (z ⊙ exp(s(z ⊙ m)) + t(z ⊙ m)) with a random half mask m per layer, log det =
Σ (1 − m) ⊙ s. `auto` fits one as its neural transport (preconditioning/transport.py) and the generative methods'
`precondition: "flow"` train in its latent space; a sampler stores it (FLOW_PREFIX tensors) and draws through it.
Here, outside `methods`, so that the samplers the API loads need no training code.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

#: |s| ≤ SCALE_BOUND per coupling (a soft clamp): one layer changes a scale by at most e^SCALE_BOUND, so an early
#: Adam step cannot send exp(s) to overflow; eight layers still span e^±24.
SCALE_BOUND = 3.0


class AffineCoupling(nn.Module):
    def __init__(self, mask: Tensor, hidden: int, generator: torch.Generator):
        super().__init__()
        dim = mask.numel()
        self.register_buffer("mask", mask)
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, 2 * dim))
        with torch.no_grad():  # torch's default U(±1/√fan_in), but from `generator`: a resumed job refits the same flow
            for layer in (self.net[0], self.net[2]):
                bound = 1 / math.sqrt(layer.in_features)
                for parameter in (layer.weight, layer.bias):
                    parameter.copy_((torch.rand(parameter.shape, generator=generator) * 2 - 1) * bound)
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)

    def _linears(self, frozen: bool) -> list[tuple[Tensor, Tensor]]:
        """(weight, bias) of the net's three linear layers (tanh between them); `frozen`: without their gradient."""
        layers = [layer for layer in self.net if isinstance(layer, nn.Linear)]
        return [(layer.weight.detach(), layer.bias.detach()) if frozen else (layer.weight, layer.bias)
                for layer in layers]

    def _hidden(self, fixed: Tensor, frozen: bool) -> tuple[Tensor, Tensor, Tensor]:
        """The net at the fixed half: its two tanh layers' outputs h1, h2 [n, H] and its raw output [n, 2d]."""
        (w1, b1), (w2, b2), (w3, b3) = self._linears(frozen)
        h1 = torch.tanh(nn.functional.linear(fixed, w1, b1))
        h2 = torch.tanh(nn.functional.linear(h1, w2, b2))
        return h1, h2, nn.functional.linear(h2, w3, b3)

    def _bounded(self, raw: Tensor) -> tuple[Tensor, Tensor]:
        """(log scale, shift) from the net's raw output: |s| ≤ SCALE_BOUND by a tanh, zero on the fixed half."""
        free = 1 - self.mask
        log_scale, shift = raw.chunk(2, dim=-1)
        return free * SCALE_BOUND * torch.tanh(log_scale / SCALE_BOUND), free * shift

    def conditioner(self, fixed: Tensor, frozen: bool = False) -> tuple[Tensor, Tensor]:
        """(log scale, shift) from the fixed half; `frozen` reads the weights without their gradient (STL)."""
        return self._bounded(self._hidden(fixed, frozen)[2])

    def forward_jacobian(self, z: Tensor, frozen: bool = True) -> tuple[Tensor, Tensor]:
        """(y, (∂y/∂z)ᵀ) at rows z [n, d]: the layer's output and its Jacobian TRANSPOSED, [n, d, d] (input j, output
        i), in closed form: ∂y/∂z = diag(exp(s)) + diag(z ⊙ exp(s)) ∂s/∂z + ∂t/∂z, the conditioner's Jacobian pushed
        forward through its tanh layers (diag(1 − h²) W per layer) from the fixed columns (u = z ⊙ m). Carried
        transposed so that each layer is one folded GEMM [n·d, H] @ Wᵀ (features_and_jacobian's layout);
        torch.func's vmap(jacfwd) of the same map was ~6× slower on the CPU."""
        (w1, _), (w2, _), (w3, _) = self._linears(frozen)
        h1, h2, raw = self._hidden(z * self.mask, frozen)
        tangent = (w1 * self.mask).T * (1 - h1.square()).unsqueeze(-2)         # (∂h1/∂z)ᵀ [n, d, H]
        tangent = (tangent @ w2.T) * (1 - h2.square()).unsqueeze(-2)           # (∂h2/∂z)ᵀ
        d_raw_scale, d_raw_shift = (tangent @ w3.T).chunk(2, dim=-1)           # [n, d, d] each, transposed
        log_scale, shift = self._bounded(raw)
        scale, free = torch.exp(log_scale), 1 - self.mask
        # ∂y_i/∂raw_i through s_i = B tanh(raw_i / B): z_i e^{s_i} (1 − (s_i / B)²) on the free half
        row_weight = (z * scale * free * (1 - (log_scale / SCALE_BOUND).square())).unsqueeze(-2)
        jacobian_t = d_raw_scale * row_weight + d_raw_shift * free + torch.diag_embed(scale)
        return z * scale + shift, jacobian_t

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        log_scale, shift = self.conditioner(z * self.mask)
        return z * torch.exp(log_scale) + shift, log_scale.sum(-1)

    def inverse(self, y: Tensor, frozen: bool = False) -> tuple[Tensor, Tensor]:
        """z with forward(z) = y (the fixed half is unchanged, so it gives the same conditioner), and the forward
        log-det at z."""
        log_scale, shift = self.conditioner(y * self.mask, frozen)
        return (y - shift) * torch.exp(-log_scale), log_scale.sum(-1)


#: the flow's tensors in a sampler's weights.safetensors: "flow." + the names of `CouplingFlow.state_dict()`
FLOW_PREFIX = "flow."


def flow_shapes(dim: int, layers: int, hidden: int, prefix: str = FLOW_PREFIX) -> dict[str, tuple[int, ...]]:
    """Name → shape of every tensor of a `CouplingFlow` as a sampler stores it (`prefix` included: FLOW_PREFIX
    for the output flow, samplers.generator's TOP_FLOW_PREFIX for a coupling generator's top block)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for layer in range(layers):
        base = f"{prefix}layers.{layer}."
        shapes[base + "mask"] = (dim,)
        for index, (out, fan_in) in zip((0, 2, 4), ((hidden, dim), (hidden, hidden), (2 * dim, hidden)), strict=True):
            shapes[f"{base}net.{index}.weight"] = (out, fan_in)
            shapes[f"{base}net.{index}.bias"] = (out,)
    return shapes


class CouplingFlow(nn.Module):
    """T(z) and log|det ∂T/∂z| for rows z [n, d]; masks drawn from `generator` (half the coordinates fixed)."""

    def __init__(self, dim: int, layers: int, hidden: int, generator: torch.Generator):
        super().__init__()
        self.dim, self.hidden = dim, hidden
        masks = []
        for _ in range(layers):
            mask = torch.zeros(dim)
            mask[torch.randperm(dim, generator=generator)[: dim // 2]] = 1.0
            masks.append(mask)
        self.layers = nn.ModuleList(AffineCoupling(mask, hidden, generator) for mask in masks)

    def tensors(self, prefix: str = FLOW_PREFIX) -> dict[str, Tensor]:
        """The flow as a sampler stores it: float32 CPU copies named `prefix` + state-dict name."""
        return {prefix + name: value.detach().to("cpu", torch.float32) for name, value in self.state_dict().items()}

    @classmethod
    def from_tensors(cls, tensors: dict[str, Tensor], prefix: str = FLOW_PREFIX) -> CouplingFlow:
        """The flow `tensors(prefix)` stored (other keys of `tensors` ignored), in their dtype, weights frozen."""
        own = {name[len(prefix):]: value for name, value in tensors.items() if name.startswith(prefix)}
        layers = sum(name.endswith(".mask") for name in own)
        dim, hidden = own["layers.0.mask"].numel(), own["layers.0.net.0.weight"].shape[0]
        flow = cls(dim, layers, hidden, torch.Generator().manual_seed(0))
        flow.load_state_dict(own)
        flow.requires_grad_(False)
        return flow.to(own["layers.0.mask"].dtype)

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        log_det = torch.zeros(z.shape[0], dtype=z.dtype, device=z.device)
        for layer in self.layers:
            z, layer_log_det = layer(z)
            log_det = log_det + layer_log_det
        return z, log_det

    def forward_jacobian(self, z: Tensor, frozen: bool = True) -> tuple[Tensor, Tensor]:
        """(T(z), ∂T/∂z [n, d, d], output i, input j): each coupling's closed-form Jacobian
        (`AffineCoupling.forward_jacobian`, transposed), chained by batched d×d products, (J₂J₁)ᵀ = J₁ᵀJ₂ᵀ."""
        jacobian_t = None
        for layer in self.layers:
            z, layer_t = layer.forward_jacobian(z, frozen)
            jacobian_t = layer_t if jacobian_t is None else jacobian_t @ layer_t
        assert jacobian_t is not None  # a flow has at least one coupling
        return z, jacobian_t.transpose(-1, -2)

    def log_density(self, x: Tensor, frozen: bool = False) -> Tensor:
        """log q(x) of T_#N(0, I) at rows x, by the inverse: log N(T⁻¹(x); 0, I) − log|det ∂T/∂z| there."""
        log_det = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
        for layer in reversed(self.layers):
            x, layer_log_det = layer.inverse(x, frozen)
            log_det = log_det + layer_log_det
        return -0.5 * x.square().sum(-1) - 0.5 * x.shape[-1] * math.log(2 * math.pi) - log_det
