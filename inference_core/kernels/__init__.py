"""Pairwise kernel math: the single home of kernels, bandwidth rules and the pairwise primitives.

Kernels are passed in the place of a bandwidth: `h` (float or 0-dim tensor) means RBF exp(-r²/h);
`IMQ(c, beta, h)` is the inverse multiquadric. Every primitive takes `backend="auto"|"dense"|"chunked"|
"triton"|"keops"` and `precision="ieee"|"tf32"|"bf16"`; see `dispatch` for the selection rules and
docs/implementation-notes.md ("Pairwise kernels", "Median heuristic") for the design.

    h = median_heuristic(x)                     # or bandwidth_rule_from_options(opts)(x)
    phi = svgd_direction(x, score, h)           # ascent direction: x <- x + eps * phi
"""

from torch import Tensor

from inference_core.kernels.bandwidth import (
    BandwidthRule,
    FixedRule,
    MedianRule,
    RunningAverageRule,
    ScaledRule,
    bandwidth_rule_from_options,
    median_heuristic,
    median_sq_dist,
)
from inference_core.kernels.common import plan_row_block
from inference_core.kernels.dispatch import (
    BACKEND_ENV,
    BACKENDS,
    kernel_grad_sum,
    kernel_matmul,
    ksd2,
    mmd2,
    resolve_backend,
    svgd_direction,
)
from inference_core.kernels.functions import IMQ, RBF, Kernel, KernelLike, as_kernel
from inference_core.kernels.solve import SolveInfo, kernel_solve
from inference_core.schemas.kernels import KernelOptions

__all__ = [
    "BACKENDS",
    "BACKEND_ENV",
    "IMQ",
    "RBF",
    "BandwidthRule",
    "FixedRule",
    "Kernel",
    "KernelLike",
    "MedianRule",
    "RunningAverageRule",
    "ScaledRule",
    "SolveInfo",
    "as_kernel",
    "bandwidth_rule_from_options",
    "kernel_from_options",
    "kernel_grad_sum",
    "kernel_matmul",
    "kernel_solve",
    "ksd2",
    "median_heuristic",
    "median_sq_dist",
    "mmd2",
    "plan_row_block",
    "resolve_backend",
    "svgd_direction",
]


def kernel_from_options(options: KernelOptions, h: float | Tensor) -> Kernel:
    """The kernel object a `KernelOptions` describes, with bandwidth h (from its bandwidth rule)."""
    if not isinstance(options, KernelOptions):
        raise ValueError(f"options must be KernelOptions, got {type(options).__name__}")
    if options.name == "imq":
        return IMQ(options.imq_c, options.imq_beta, h)
    return RBF(h)
