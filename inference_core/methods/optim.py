"""Optimisers for particles and generators: Adam, SGD, and the AdaGrad-with-momentum rule of the original
SVGD code (Liu & Wang 2016, `python/svgd.py`: history g² on the first step, then α·hist + (1−α)·g²)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from inference_core.schemas.methods import OptimizerOptions


class AdagradMomentum(torch.optim.Optimizer):
    """x ← x − lr · g / (eps + sqrt(hist)), hist = g² on the first step, then α·hist + (1 − α)·g².

    This is the descent form of the original code's ascent on φ (our gradient is −φ).
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float = 1e-3, alpha: float = 0.9, eps: float = 1e-6):
        if lr <= 0 or not 0 < alpha < 1 or eps <= 0:
            raise ValueError("AdagradMomentum needs lr > 0, 0 < alpha < 1 and eps > 0")
        super().__init__(params, {"lr": lr, "alpha": alpha, "eps": eps})

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001 - torch.optim signature
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                grad = param.grad
                state = self.state[param]
                if "history" not in state:
                    state["history"] = grad * grad
                else:
                    state["history"].mul_(group["alpha"]).addcmul_(grad, grad, value=1 - group["alpha"])
                param.addcdiv_(grad, state["history"].sqrt().add_(group["eps"]), value=-group["lr"])
        return None


def build_optimizer(params: Iterable[torch.Tensor], options: OptimizerOptions) -> torch.optim.Optimizer:
    if options.name == "adam":
        return torch.optim.Adam(params, lr=options.lr, betas=options.betas)
    if options.name == "sgd":
        return torch.optim.SGD(params, lr=options.lr, momentum=options.momentum)
    if options.name == "adagrad_momentum":
        return AdagradMomentum(params, lr=options.lr, alpha=options.alpha, eps=options.eps)
    raise ValueError(f"unknown optimizer {options.name!r}")
