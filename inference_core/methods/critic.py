"""The critic network of the learned Stein discrepancy (KSD / "minmax" ParVI): an MLP f: R^d → R^d.

No BatchNorm (ALF's default has it): it couples the particles of a batch, so f(x_i) would depend on the
other particles, the trace of ∇f would no longer be per-particle and Hutchinson's estimate would be biased
(notes/gpvi_reference_implementation.md, lesson 10). Rows are independent, which the exact trace relies on.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh, "softplus": nn.Softplus,
                                           "silu": nn.SiLU}
#: `trace="auto"` computes the exact Jacobian trace up to this dimension, Hutchinson above.
EXACT_TRACE_MAX_DIM = 16


class CriticMLP(nn.Module):
    """Linear → activation → ... → Linear, d → hidden... → d; PyTorch's default Linear initialisation
    (U(±1/√fan_in) for weights and biases) drawn from the given generator, so it is reproducible."""

    def __init__(self, dim: int, hidden: list[int], activation: str, generator: torch.Generator,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        if dim < 1 or not hidden or any(w < 1 for w in hidden):
            raise ValueError("the critic needs dim ≥ 1 and at least one hidden layer of width ≥ 1")
        widths = [dim, *hidden, dim]
        layers: list[nn.Module] = []
        for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
            linear = nn.Linear(fan_in, fan_out)
            bound = 1.0 / math.sqrt(fan_in)
            with torch.no_grad():
                nn.init.uniform_(linear.weight, -bound, bound, generator=generator)
                nn.init.uniform_(linear.bias, -bound, bound, generator=generator)
            layers.append(linear)
            if i < len(widths) - 2:
                layers.append(ACTIVATIONS[activation]())
        self.net = nn.Sequential(*layers).to(device=device, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


def jacobian_trace(fx: Tensor, x: Tensor, method: str, probe: Tensor | None = None) -> Tensor:
    """tr ∇_x f(x) per row, [n], differentiable (create_graph) so the critic can be trained through it.

    `exact`: d backward passes, Σ_k ∂f_k/∂x_k (rows are independent, so ∂(Σ_i f_ik)/∂x_i = ∂f_ik/∂x_i).
    `hutchinson`: εᵀ (∂f/∂x) ε with one probe ε [n, d] (E[εεᵀ] = I gives an unbiased estimate).
    """
    if method == "exact":
        d = x.shape[1]
        trace = fx.new_zeros(fx.shape[0])
        for k in range(d):
            (grad,) = torch.autograd.grad(fx[:, k].sum(), x, create_graph=True)
            trace = trace + grad[:, k]
        return trace
    if method == "hutchinson":
        if probe is None or probe.shape != fx.shape:
            raise ValueError("Hutchinson's estimator needs a probe of the shape of f(x)")
        (vjp,) = torch.autograd.grad(fx, x, grad_outputs=probe, create_graph=True)
        return (vjp * probe).sum(1)
    raise ValueError(f"trace method must be 'exact' or 'hutchinson', got {method!r}")


def stein_critic_loss(critic: nn.Module, x: Tensor, score: Tensor, l2_weight: float, trace: str,
                      probe: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The critic's loss (to MINIMISE) and its Stein term:

        loss = −(1/n) Σ_i [∇log p(x_i)·f(x_i) + tr ∇f(x_i)] + l2_weight · (1/n) Σ_i ||f(x_i)||²,

    i.e. the critic maximises the Stein discrepancy E_q[A_p f] regularised by E_q||f||² (Hu et al. 2018,
    "Stein neural sampler"; Grathwohl et al. 2020; ALF `_critic_train_step` with entropy weight 1). Its
    maximiser is f* = (∇log p − ∇log q) / (2·l2_weight), the Wasserstein gradient direction.
    Returns (loss, mean Stein term).
    """
    x = x.detach().requires_grad_(True)
    fx = critic(x)
    stein = (score.detach() * fx).sum(1) + jacobian_trace(fx, x, trace, probe)
    stein_mean = stein.mean()
    return -stein_mean + l2_weight * fx.square().sum(1).mean(), stein_mean.detach()
