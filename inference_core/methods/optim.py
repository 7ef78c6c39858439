"""The one optimiser module: every parameter update of every method goes through here.

* `build_optimizer`: Adam, SGD, or the AdaGrad-with-momentum rule of the original SVGD code (Liu & Wang
  2016, `python/svgd.py`: history g² on the first step, then α·hist + (1−α)·g²) for particles;
* `adagrad_momentum_ascent`: the same rule as a pure function on plain tensors (the ascent on the induced
  points and log-bandwidth of adversarial induced-points SVGD, Kang's code);
* `make_optimizer` / `optimizer_step` / `zero_grads`: the small networks of the generative methods
  (generator, λ, GPVI's helper, KSD's critic). These networks are small, and at small batch sizes a training
  step is a chain of small tensor operations (GPVI at n = 100 in 2-D: about 150 of them). torch.optim's
  per-call machinery (profiler ranges, hook checks, state grouping) then costs more than the update itself:
  ~30 µs per `Adam.step` against ~6 µs for its two kernels. `optimizer_step` calls those kernels directly for
  the configuration `make_optimizer` builds — bit-identical to `optimizer.step()` (the same fused kernel on
  the same arguments; tested) — and falls back to `step()` for anything else.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor
from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks

from inference_core.schemas.methods import OptimizerOptions


class AdagradMomentum(torch.optim.Optimizer):
    """x ← x − lr · g / (eps + sqrt(hist)), hist = g² on the first step, then α·hist + (1 − α)·g².

    This is the descent form of the original code's ascent on φ (our gradient is −φ). The in-place updates
    round differently from `adagrad_momentum_ascent` (same rule): each keeps the rounding of its recorded runs.
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


def adagrad_momentum_ascent(
    param: Tensor, grad: Tensor, history: Tensor | None, lr: float, alpha: float, eps: float
) -> tuple[Tensor, Tensor]:
    """One ASCENT step of the AdaGrad-with-momentum rule of Kang's and Liu's code on a plain tensor (no
    torch.optim state): hist = g² on the first step, then α·hist + (1 − α)·g²; param + lr·g/(eps + √hist).
    Returns (param, hist)."""
    history = grad * grad if history is None else alpha * history + (1.0 - alpha) * grad * grad
    return param + lr * grad / (eps + history.sqrt()), history


def cosine_lr_factor(step: int, total: int, final: float) -> float:
    """The learning-rate multiplier of 0-based step `step` of `total` under a half-cosine decay: 1 at step 0,
    falling to `final` at step `total` (and staying there past it)."""
    progress = min(max(step / total, 0.0), 1.0)
    return final + (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * progress))


def make_optimizer(params: Iterable[torch.Tensor], options: OptimizerOptions) -> torch.optim.Optimizer:
    """`methods.optim.build_optimizer`, except that Adam is torch's fused implementation (one kernel for all
    tensors: the generator, helper and critic are small networks whose unfused Adam costs more than their
    forward pass). Same update rule; its own rounding, deterministic."""
    params = list(params)
    fusable = all(p.dtype in (torch.float32, torch.float64) and p.device.type in ("cpu", "cuda") for p in params)
    if options.name == "adam" and fusable:
        return torch.optim.Adam(params, lr=options.lr, betas=options.betas, fused=True)
    return build_optimizer(params, options)


class _DirectAdam:
    """What `optimizer_step` needs of a plain fused Adam with state for every parameter, gathered once: the
    parameters and their state tensors (valid while the optimizer keeps this state and group: a
    load_state_dict replaces both, and then a fresh plan is made)."""

    def __init__(self, optimizer: torch.optim.Adam):
        self.state, self.group = optimizer.state, optimizer.param_groups[0]
        self.params = list(self.group["params"])
        states = [self.state[p] for p in self.params]
        self.exp_avgs = [state["exp_avg"] for state in states]
        self.exp_avg_sqs = [state["exp_avg_sq"] for state in states]
        self.steps = [state["step"] for state in states]

    def current(self, optimizer: torch.optim.Optimizer) -> bool:
        return optimizer.state is self.state and optimizer.param_groups[0] is self.group


def _direct_plan(optimizer: torch.optim.Optimizer) -> _DirectAdam | None:
    """A plan when `optimizer` is a plain fused Adam (one group; no AMSGrad/maximise/differentiable/capturable/
    decoupled decay) whose parameters, of one device and dtype, all have state; else None."""
    if type(optimizer) is not torch.optim.Adam or len(optimizer.param_groups) != 1:
        return None
    group = optimizer.param_groups[0]
    plain = group["fused"] and not (group["amsgrad"] or group["maximize"] or group["differentiable"]
                                    or group["capturable"] or group["decoupled_weight_decay"])
    params = group["params"]
    if not plain or any(p not in optimizer.state for p in params) or len({(p.device, p.dtype) for p in params}) != 1:
        return None
    return _DirectAdam(optimizer)


def optimizer_step(optimizer: torch.optim.Optimizer) -> None:
    """`optimizer.step()`; for a plain fused Adam with state for all its parameters (every step after the
    first), no hooks, a float lr and every gradient present, its kernels are called directly (see the module
    docstring)."""
    plan = getattr(optimizer, "_direct_adam", None)
    if plan is None or not plan.current(optimizer):
        plan = _direct_plan(optimizer)
        optimizer._direct_adam = plan  # type: ignore[attr-defined]
    group = optimizer.param_groups[0]
    hooked = (optimizer._optimizer_step_pre_hooks or optimizer._optimizer_step_post_hooks
              or _global_optimizer_pre_hooks or _global_optimizer_post_hooks)
    grads = None if plan is None else [p.grad for p in plan.params]
    if plan is None or hooked or not isinstance(group["lr"], float) or any(g is None for g in grads):
        optimizer.step()
        return
    beta1, beta2 = group["betas"]
    torch._foreach_add_(plan.steps, 1)
    torch._fused_adam_(plan.params, grads, plan.exp_avgs, plan.exp_avg_sqs, [], plan.steps, amsgrad=False,
                       lr=group["lr"], beta1=beta1, beta2=beta2, weight_decay=group["weight_decay"],
                       eps=group["eps"], maximize=False, grad_scale=None, found_inf=None)


def zero_grads(optimizer: torch.optim.Optimizer) -> None:
    """`optimizer.zero_grad(set_to_none=False)` as one foreach kernel over the existing gradients (no
    profiler range; parameters without a gradient keep None, as there)."""
    grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    for grad in grads:
        if grad.grad_fn is not None:  # a gradient with a graph is detached first, as zero_grad does
            grad.detach_()
    if grads:
        torch._foreach_zero_(grads)
