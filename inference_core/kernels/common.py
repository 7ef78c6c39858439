"""Shared helpers of the pairwise backends: argument checks, centring, memory planning, matmul precision."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Literal

import torch
from torch import Tensor

Precision = Literal["ieee", "tf32", "bf16"]
PRECISIONS: tuple[str, ...] = ("ieee", "tf32", "bf16")

#: Bytes the chunked backend may spend on n×m temporaries at once (override: PARVIS_PAIRWISE_MEMORY_BUDGET).
DEFAULT_MEMORY_BUDGET = 256 * 2**20
MEMORY_BUDGET_ENV = "PARVIS_PAIRWISE_MEMORY_BUDGET"
#: Preferred bytes of temporaries per block on CPU (cache-sized blocks; see plan_row_block).
CPU_BLOCK_TARGET = 8 * 2**20
MIN_TARGET_ROWS = 32


def check_points(name: str, x: object, *, d: int | None = None, device: torch.device | None = None) -> Tensor:
    """ValueError unless `x` is a finite-shaped 2-D floating tensor [n, d] (d fixed when given)."""
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape [n, d], got {tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating tensor, got {x.dtype}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name} must be non-empty, got shape {tuple(x.shape)}")
    if d is not None and x.shape[1] != d:
        raise ValueError(f"{name} must have {d} columns, got shape {tuple(x.shape)}")
    if device is not None and x.device != device:
        raise ValueError(f"{name} is on {x.device}, expected {device}")
    return x


def check_rows(name: str, v: object, n: int, *, like: Tensor) -> Tensor:
    """ValueError unless `v` is a floating [n, p] tensor on the same device/dtype as `like`."""
    if not isinstance(v, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(v).__name__}")
    if v.dim() != 2 or v.shape[0] != n:
        raise ValueError(f"{name} must have shape [{n}, p], got {tuple(v.shape)}")
    if v.device != like.device or v.dtype != like.dtype:
        raise ValueError(f"{name} must be {like.dtype} on {like.device}, got {v.dtype} on {v.device}")
    return v


def check_same_kind(a: Tensor, b: Tensor, names: tuple[str, str]) -> None:
    if a.device != b.device or a.dtype != b.dtype:
        raise ValueError(
            f"{names[0]} and {names[1]} must share dtype and device, got {a.dtype} on {a.device} "
            f"and {b.dtype} on {b.device}"
        )


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return precision


def centre(x: Tensor, y: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """Subtract the mean of the particles (of the union when y is given).

    Distances are translation invariant, so this changes nothing mathematically, but it removes the
    cancellation of ||x||² + ||y||² - 2x·y for clouds far from the origin (docs/implementation-notes.md, "Pairwise kernels": at offset 1e3 the
    raw Gram form errs by 130× the largest distance). The mean is detached: its gradient contribution is
    exactly zero by translation invariance.
    """
    if y is None:
        mu = x.detach().mean(0, keepdim=True)
        return x - mu, None
    n, m = x.shape[0], y.shape[0]
    mu = (x.detach().sum(0, keepdim=True) + y.detach().sum(0, keepdim=True)) / (n + m)
    return x - mu, y - mu


def needs_grad(*tensors: object) -> bool:
    """True when autograd would record an op on any of the tensors."""
    if not torch.is_grad_enabled():
        return False
    return any(isinstance(t, Tensor) and t.requires_grad for t in tensors)


def resolve_memory_budget(budget: int | None) -> int:
    """The byte budget for n×m temporaries: the argument, else $PARVIS_PAIRWISE_MEMORY_BUDGET, else 256 MiB."""
    if budget is None:
        env = os.environ.get(MEMORY_BUDGET_ENV)
        if env is None:
            return DEFAULT_MEMORY_BUDGET
        try:
            budget = int(env)
        except ValueError as exc:
            raise ValueError(f"{MEMORY_BUDGET_ENV} must be an integer number of bytes, got {env!r}") from exc
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"memory_budget must be a positive integer number of bytes, got {budget!r}")
    return budget


def plan_row_block(
    n: int, m: int, *, itemsize: int, temporaries: int, budget: int, target: int | None = None
) -> int:
    """Rows per block so that `temporaries` live [rows, m] matrices fit in `budget` bytes (FAISS-style tiling).

    `target` (bytes, optional) asks for smaller blocks when they are faster: on CPUs, blocks that stay in
    the last-level cache run 2-3× faster than one n×n pass (measured: n = 5000, d = 32: 58 ms with 16 MiB
    blocks, 117 ms with one 256 MiB block). The target never goes below MIN_TARGET_ROWS rows (thin GEMMs are
    slow) and the budget is never exceeded. At least one row (a single row of m entries is the irreducible
    cost), at most n.
    """
    per_row = max(1, temporaries * m * itemsize)
    rows = budget // per_row
    if target is not None:
        rows = min(rows, max(target // per_row, MIN_TARGET_ROWS))
    return max(1, min(n, rows))


def block_target(device: torch.device) -> int | None:
    """The speed target for block sizes on this device: cache-sized on CPU, none (the budget) on GPUs."""
    return CPU_BLOCK_TARGET if device.type == "cpu" else None


@contextlib.contextmanager
def matmul_precision(device: torch.device, precision: str) -> Iterator[None]:
    """Set TF32 for torch matmuls on CUDA from `precision` alone, restoring the global flag afterwards.

    Global TF32 flags must never leak into kernel sums silently (docs/implementation-notes.md, "Pairwise kernels", precision). CPUs have no TF32 units, so
    nothing is touched there.
    """
    if device.type != "cuda":
        yield
        return
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
