"""Radial kernel functions k(x, y) = f(r²), r² = ||x - y||², as small immutable objects.

Every pairwise primitive takes its kernel in the place of a bandwidth: a plain `h` (float or 0-dim tensor)
means `RBF(h)`; pass `IMQ(c, beta, h)` for the inverse multiquadric. Only f and its first two derivatives
in r² are needed by the primitives:

* ∇_x k(x, y) = 2 f'(r²) (x - y), so the SVGD repulsion weight is g = -2 f'(r²) ≥ 0 and
  ∇_{x_j} k(x_j, x_i) = g_ij (x_i - x_j);
* tr ∇_x ∇_y k(x, y) = -4 f''(r²) r² - 2 d f'(r²) (used by the Stein kernel of `ksd2`).

Convention (docs/architecture.md, "Kernels"): h is the divisor in exp(-r²/h), NOT the 2h² of Liu & Wang's code, and GPVI's
RBF carries the minus sign its paper drops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

Scalar = float | Tensor


def _check_scalar(name: str, value: object, *, positive: bool) -> None:
    """ValueError unless `value` is a finite (positive) number or a one-element floating tensor.

    Tensors are only checked for their value on the CPU: reading a CUDA scalar would synchronise the
    device on every step.
    """
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got a bool")
    if isinstance(value, Tensor):
        if value.numel() != 1 or not value.is_floating_point():
            raise ValueError(f"{name} must be a one-element floating tensor, got shape {tuple(value.shape)}")
        if value.device.type != "cpu":
            return
        value = float(value.detach())
    if not isinstance(value, int | float):
        raise ValueError(f"{name} must be a float or a 0-dim tensor, got {type(value).__name__}")
    if not math.isfinite(value) or (positive and value <= 0):
        raise ValueError(f"{name} must be finite{' and > 0' if positive else ''}, got {value}")


def _as_float(value: Scalar) -> float:
    return float(value.detach()) if isinstance(value, Tensor) else float(value)


@dataclass(frozen=True)
class RBF:
    """Gaussian kernel k(x, y) = exp(-||x - y||² / h) (SVGD, Liu & Wang 2016; GPVI eq. 13 with the minus).

    `h` may be a tensor requiring grad (e.g. exp(log_h)): dense and chunked backends differentiate through it.
    """

    h: Scalar
    name: ClassVar[str] = "rbf"

    def __post_init__(self) -> None:
        _check_scalar("h", self.h, positive=True)

    def f(self, sq: Tensor) -> Tensor:
        return torch.exp(-sq / self.h)

    def f_and_g(self, sq: Tensor) -> tuple[Tensor, Tensor]:
        """(k, g) with g = -2 f'(r²) = (2/h) k, the weight of ∇_{x_j} k(x_j, x_i) = g (x_i - x_j)."""
        k = torch.exp(-sq / self.h)
        return k, (2.0 / self.h) * k

    def derivatives(self, sq: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(f, f', f'') at r² = sq: f' = -f/h, f'' = f/h²."""
        k = torch.exp(-sq / self.h)
        return k, -k / self.h, k / (self.h * self.h)

    def f0(self) -> float:
        """k(x, x)."""
        return 1.0

    def df0(self) -> Scalar:
        """f'(0)."""
        return -1.0 / self.h


@dataclass(frozen=True)
class IMQ:
    """Inverse multiquadric k(x, y) = (c² + ||x - y||² / h)^β, β < 0 (Gorham & Mackey 2017, Thm 8).

    With the defaults c = 1, β = -1/2, h = 1 this is the kernel of the KSD convergence-control results, the
    periodic sample-quality diagnostic of every job. `h` rescales distances so the bandwidth rules apply too.
    """

    c: Scalar = 1.0
    beta: Scalar = -0.5
    h: Scalar = 1.0
    name: ClassVar[str] = "imq"

    def __post_init__(self) -> None:
        _check_scalar("c", self.c, positive=True)
        _check_scalar("beta", self.beta, positive=False)
        checkable = not isinstance(self.beta, Tensor) or self.beta.device.type == "cpu"
        if checkable and _as_float(self.beta) >= 0:
            raise ValueError(f"IMQ beta must be < 0, got {_as_float(self.beta)}")
        _check_scalar("h", self.h, positive=True)

    def _base(self, sq: Tensor) -> Tensor:
        return self.c * self.c + sq / self.h

    def f(self, sq: Tensor) -> Tensor:
        return self._base(sq) ** self.beta

    def f_and_g(self, sq: Tensor) -> tuple[Tensor, Tensor]:
        """(k, g) with g = -2 f'(r²) = (-2β/h) b^(β-1) ≥ 0."""
        base = self._base(sq)
        k = base**self.beta
        return k, (-2.0 * self.beta / self.h) * k / base

    def derivatives(self, sq: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(f, f', f'') at r² = sq: f' = (β/h) b^(β-1), f'' = (β(β-1)/h²) b^(β-2), b = c² + r²/h."""
        base = self._base(sq)
        k = base**self.beta
        d1 = (self.beta / self.h) * k / base
        d2 = ((self.beta - 1.0) / self.h) * d1 / base
        return k, d1, d2

    def f0(self) -> Scalar:
        return (self.c * self.c) ** self.beta

    def df0(self) -> Scalar:
        return (self.beta / self.h) * (self.c * self.c) ** (self.beta - 1.0)


Kernel = RBF | IMQ
KernelLike = float | Tensor | RBF | IMQ


def as_kernel(h: KernelLike) -> Kernel:
    """A kernel object from what the primitives accept in place of `h`: RBF(h) for a number or tensor."""
    if isinstance(h, RBF | IMQ):
        return h
    if isinstance(h, Tensor | float | int) and not isinstance(h, bool):
        return RBF(h)
    raise ValueError(f"h must be a bandwidth (float or 0-dim tensor) or a kernel RBF/IMQ, got {type(h).__name__}")
