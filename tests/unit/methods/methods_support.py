"""Naive float64 references shared by the method tests: explicit loops over pairs, kernel derivatives by
autograd on one pair at a time. Deliberately independent of inference_core.kernels and the methods."""

from __future__ import annotations

import numpy as np
import torch

F64 = torch.float64


def rbf(h: float):
    def k(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.exp(-((a - b) ** 2).sum() / h)

    return k


def imq(c: float, beta: float, h: float):
    def k(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (c * c + ((a - b) ** 2).sum() / h) ** beta

    return k


def grad_first(k, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """∇_a k(a, b) by autograd on this one pair."""
    a = a.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(k(a, b.detach()), a)
    return g


def gram(k, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.stack([torch.stack([k(x[i], y[j]) for j in range(y.shape[0])]) for i in range(x.shape[0])])


def stein_kernel(k, a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
    """u_p(a, b) = sa·sb k + sa·∇_b k + sb·∇_a k + tr ∇_a ∇_b k (speed-up paper eq. 6), derivatives by autograd."""
    d = a.shape[0]
    z = torch.cat([a, b]).detach().requires_grad_(True)

    def kz(v: torch.Tensor) -> torch.Tensor:
        return k(v[:d], v[d:])

    value = kz(z)
    hess = torch.autograd.functional.hessian(kz, z.detach())
    (grad,) = torch.autograd.grad(value, z)
    ga, gb = grad[:d], grad[d:]
    return value.detach() * (sa @ sb) + sa @ gb + sb @ ga + torch.trace(hess[:d, d:])


def blr_data(n: int = 50, d: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """GPVI §4.2: X ~ N(0, I), β_i ~ U(0, 1) + 5, y = Xβ + N(0, 1)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    beta = rng.uniform(size=d) + 5.0
    return X, X @ beta + rng.normal(size=n)
