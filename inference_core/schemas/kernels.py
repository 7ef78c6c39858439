"""Kernel and bandwidth options shared by every kernel-based method (see inference_core.kernels)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from inference_core.schemas.common import StrictModel

BandwidthRuleName = Literal["median", "median_subsampled", "fixed", "scaled", "running_average"]


#: The exact median materialises n² squared distances; refuse beyond this many (512 MiB in float32) ...
EXACT_MAX_ENTRIES = 2**27
#: ... so at most this many particles (11,585): more are refused when a job is submitted (spec.py).
EXACT_MAX_N = math.isqrt(EXACT_MAX_ENTRIES)


class BandwidthOptions(StrictModel):
    """How the bandwidth h in k(x, y) = exp(-||x - y||² / h) is chosen each step.

    h is the divisor of the squared distance (NOT the 2h² of Liu & Wang's code). Rules:

    * `median`: exact median of the squared pairwise distances / divisor(n). Without the diagonal the median
      runs over the n(n-1)/2 distinct pairs; with it, over the full n×n matrix, zero diagonal included (the
      convention of the original SVGD code, ALF and NumPyro). h = 1 if the median is 0. Exact selection needs
      all n² distances in memory, so a job with more than 11,585 particles is refused when submitted
      (`method_options_invalid`): use `median_subsampled` there.
    * `median_subsampled`: the same over a fixed, seeded subset of `subsample_size` particles (deterministic
      given `seed`); the divisor still uses the full n. For large n.
    * `fixed`: h = `value`.
    * `scaled`: h = `factor` × the `median` rule.
    * `running_average`: an exponential moving average of the `average_of` rule:
      h_t = momentum · h_{t-1} + (1 - momentum) · rule_t, h_0 = rule_0. Its state is checkpointed.

    Divisors: `log_n` = log n, `log_n_plus_1` = log(n + 1) (Pyro, original code), `log_n_squared` = log(n²)
    = 2 log n (ALF's GPVI), `none` = 1.
    """

    rule: BandwidthRuleName = "median"
    divisor: Literal["log_n", "log_n_plus_1", "log_n_squared", "none"] = "log_n"
    include_diagonal: bool = False
    value: float | None = Field(default=None, gt=0, description="h for rule=fixed")
    factor: float = Field(default=1.0, gt=0, le=1e6, description="multiplier for rule=scaled")
    subsample_size: int = Field(default=2048, ge=2, le=65536, description="particles used by median_subsampled")
    seed: int = Field(default=0, ge=0, le=2**63 - 1, description="seed of the median_subsampled subset")
    momentum: float = Field(default=0.9, ge=0, lt=1, description="running_average: weight of the past")
    average_of: Literal["median", "median_subsampled", "scaled"] = Field(
        default="median", description="the rule whose value running_average smooths"
    )

    @model_validator(mode="after")
    def _fixed_needs_value(self) -> BandwidthOptions:
        if self.rule == "fixed" and self.value is None:
            raise ValueError("rule 'fixed' needs a bandwidth `value` > 0")
        if self.rule != "fixed" and self.value is not None:
            raise ValueError("`value` is only used by rule 'fixed'")
        return self


class KernelOptions(StrictModel):
    """The kernel of a method: RBF exp(-r²/h), or IMQ (c² + r²/h)^β (β < 0) whose h also comes from the rule
    (use rule=fixed, value=1 for the plain (c² + r²)^β of Gorham & Mackey).

    `backend`: auto | dense | chunked | triton | keops (see inference_core.kernels.dispatch).
    `precision`: ieee | tf32 | bf16 for the kernel-times-matrix product on CUDA; distances stay float32.
    """

    name: Literal["rbf", "imq"] = "rbf"
    bandwidth: BandwidthOptions = Field(default_factory=BandwidthOptions)
    imq_c: float = Field(default=1.0, gt=0, le=1e6)
    imq_beta: float = Field(default=-0.5, lt=0, ge=-10)
    backend: Literal["auto", "dense", "chunked", "triton", "keops"] = "auto"
    precision: Literal["ieee", "tf32", "bf16"] = "ieee"


class SpeedupBandwidthRuleOptions(BandwidthOptions):
    """`kernel.bandwidth` of the speed-up methods (Kang, "Speedup methods for SVGD"): the rules above, used where
    `source` is `kernel`, and by default (`source: "cross_median"`, Kang's code) h = median of the n×m squared
    distances between all n particles and the m subset/induced points / `cross_divisor`(n) with the FULL n
    (default log(n + 1)); h = 1 if that median is 0. The paper's exp(-d²/2h̃²) with h̃² = 0.5·med/log(n+1) is our
    exp(-d²/h), h = 2h̃². `kernel`: the rule (`rule`, `divisor`, ...) applied to all n particles (O(n²) unless
    median_subsampled/fixed)."""

    source: Literal["cross_median", "kernel"] = Field(
        default="cross_median", description="cross_median (Kang's code) or the kernel rule over all n particles")
    cross_divisor: Literal["log_n", "log_n_plus_1", "log_n_squared", "none"] = Field(
        default="log_n_plus_1", description="divisor of the cross median (formerly options.bandwidth.divisor)")


class SpeedupKernelOptions(KernelOptions):
    """`kernel` of the speed-up methods: the kernel options with `SpeedupBandwidthRuleOptions`."""

    bandwidth: SpeedupBandwidthRuleOptions = Field(default_factory=SpeedupBandwidthRuleOptions)


def exact_median_over_particles(options: object) -> bool:
    """Whether a method's options (any schema) make it take the exact median over all its particles: a `kernel`
    whose bandwidth rule is `median`, `scaled` or a `running_average` of either, unless a speed-up method takes
    its cross median instead (`kernel.bandwidth.source`). All n² distances in memory, so at most EXACT_MAX_N particles."""
    kernel = getattr(options, "kernel", None)
    if not isinstance(kernel, KernelOptions):
        return False
    bandwidth = kernel.bandwidth
    if isinstance(bandwidth, SpeedupBandwidthRuleOptions) and bandwidth.source == "cross_median":
        return False
    return (bandwidth.average_of if bandwidth.rule == "running_average" else bandwidth.rule) in ("median", "scaled")
