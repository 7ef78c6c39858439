"""GPVI's helper networks. Initialised from a `torch.Generator` (never the global RNG), so a method's
construction is a pure function of its seed. The plain MLP (the amortised KSD critic, the helpers' trunk) is
`inference_core.networks.MLP`, re-exported here."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from inference_core.networks import MLP, init_linear_, seeded_linear

__all__ = ["MLP", "FlatReluMLP", "MatrixHelper", "PairwiseHelper"]


class PairwiseHelper(nn.Module):
    """h_η(z'[:k], w) ≈ (A(z') + λI)^{-T} w (GPVI Appendix B.1; ALF's InverseMVPAlgorithm network).

    Each input gets its own linear layer + ReLU of width `width`; the two are concatenated (2·width) and
    go through `layers` ReLU layers of width 2·width and a linear output of size k.

    The target is linear in w, so the network sees the unit vector w/‖w‖ and its output is scaled by ‖w‖
    (exact for a perfect helper): ∇k spans orders of magnitude over the pairs, and on raw w the ReLU layers
    see mostly small perturbations around their biases, which slows the learning of (A + λI)^{-T} (about 2×
    more helper steps to fit it at a fixed near-singular generator).
    """

    def __init__(self, k: int, width: int, layers: int, generator: torch.Generator):
        super().__init__()
        self.noise_branch = seeded_linear(k, width, generator)
        self.vector_branch = seeded_linear(k, width, generator)
        self.trunk = MLP([2 * width] + [2 * width] * layers + [k], "relu", generator)

    def forward(self, z_prefix: Tensor, w: Tensor) -> Tensor:
        norm = torch.linalg.vector_norm(w, dim=-1, keepdim=True)
        unit = w / norm.clamp_min(torch.finfo(w.dtype).tiny)  # w = 0 (an underflowed kernel) gives y = 0
        hidden = torch.cat([torch.relu(self.noise_branch(z_prefix)), torch.relu(self.vector_branch(unit))], dim=-1)
        return norm * self.trunk(hidden)


class FlatReluMLP(nn.Module):
    """relu(... relu(x W_0ᵀ + b_0) ...) W_Lᵀ + b_L whose weights and biases are views of ONE flat parameter,
    with the backward written out (as ALF's ReluMLP does): a training step is a few GEMMs plus one optimiser
    update on a single tensor, not an autograd graph and per-tensor optimiser work. That overhead dominates
    small helpers trained once per generator step (GPVI's matrix helper).

    `forward` builds no graph and keeps the layer inputs; `backward_into_grad(dL/dout)` then writes dL/dθ into
    `self.flat.grad`. Initialisation as `seeded_linear` (layer by layer, from `generator`)."""

    def __init__(self, widths: Sequence[int], generator: torch.Generator):
        super().__init__()
        self.shapes = [(b, a) for a, b in zip(widths[:-1], widths[1:], strict=True)]
        self.flat = nn.Parameter(torch.empty(sum(o * i + o for o, i in self.shapes)))
        self._views: dict[str, tuple[int, list]] = {}
        for weight, bias in self.layers():
            init_linear_(weight, bias, generator)
        self._inputs: list[Tensor] = []

    def layers(self, flat: Tensor | None = None) -> list[tuple[Tensor, Tensor]]:
        """[(W_l, b_l)] as views of `flat` (default: the parameter; its `.grad` gives the gradient views)."""
        flat = self.flat if flat is None else flat
        pieces = torch.split(flat, [n for o, i in self.shapes for n in (o * i, o)])
        return [(pieces[2 * at].view(o, i), pieces[2 * at + 1]) for at, (o, i) in enumerate(self.shapes)]

    def _cached(self, slot: str, flat: Tensor, build: Callable[[Tensor], list]) -> list:
        """`build(flat)`, kept and reused while `flat` keeps its storage (the views pin it, so an equal data
        pointer means the same buffer): a small helper's step is op-bound, and each view is an op."""
        cached = self._views.get(slot)
        if cached is None or cached[0] != flat.data_ptr():
            cached = (flat.data_ptr(), build(flat))
            self._views[slot] = cached
        return cached[1]

    def _forward_layers(self) -> list[tuple[Tensor, Tensor, Tensor]]:
        """[(W_l, W_lᵀ, b_l)] as views of the detached parameter."""
        return self._cached("param", self.flat, lambda flat: [(w, w.T, b) for w, b in self.layers(flat.detach())])

    def forward(self, x: Tensor) -> Tensor:
        with torch.no_grad():
            self._inputs = []
            layers = self._forward_layers()
            last = len(layers) - 1
            for depth, (_, weight_t, bias) in enumerate(layers):
                self._inputs.append(x)
                x = torch.addmm(bias, x, weight_t)
                if depth < last:
                    x = x.relu_()
            return x

    def backward_into_grad(self, grad_output: Tensor) -> None:
        """θ.grad = dL/dθ for dL/dout `grad_output` at the inputs of the last `forward` (overwritten, not
        accumulated, so no zero_grad is needed)."""
        flat = self.flat
        if flat.grad is None or flat.grad.shape != flat.shape or flat.grad.dtype != flat.dtype:
            flat.grad = torch.zeros_like(flat)
        delta = grad_output
        with torch.no_grad():
            layers = self._forward_layers()
            grads = self._cached("grad", flat.grad, self.layers)
            for depth in range(len(layers) - 1, -1, -1):
                grad_weight, grad_bias = grads[depth]
                inputs = self._inputs[depth]
                torch.mm(delta.T, inputs, out=grad_weight)
                torch.sum(delta, 0, out=grad_bias)
                if depth > 0:  # through relu: its output (this layer's input) is positive exactly where it passed
                    delta = torch.ops.aten.threshold_backward(torch.mm(delta, layers[depth][0]), inputs, 0)


class MatrixHelper(nn.Module):
    """P_η(z'[:k]) ≈ (A(z') + λI)^{-T}, a k×k matrix per noise point (the `matrix` helper): a ReLU MLP
    k → width × layers → k², no graph (train with `backward_into_grad(dL/dP)`, see gpvi_math.matrix_helper_loss).

    The output layer starts at zero weight and identity bias, so P starts at I.
    """

    def __init__(self, k: int, width: int, layers: int, generator: torch.Generator):
        super().__init__()
        self.k = k
        self.net = FlatReluMLP([k] + [width] * layers + [k * k], generator)
        with torch.no_grad():
            last_weight, last_bias = self.net.layers()[-1]
            last_weight.zero_()
            last_bias.copy_(torch.eye(k).reshape(-1))

    def forward(self, z_prefix: Tensor) -> Tensor:
        return self.net(z_prefix).reshape(*z_prefix.shape[:-1], self.k, self.k)

    def backward_into_grad(self, grad_P: Tensor) -> None:
        self.net.backward_into_grad(grad_P.reshape(-1, self.k * self.k))
