"""Errors raised by the inference core, each with a stable machine `code`.

The service maps `code` straight into problem bodies (docs/api.md) and job `error.code`, so codes are a contract:
add new ones, never rename.
"""

from __future__ import annotations


class InferenceError(Exception):
    """Base class: `code` is stable, `detail` is a message fit for a client (no paths, no tracebacks)."""

    code = "inference_error"

    def __init__(self, detail: str, *, loc: tuple[str | int, ...] = ()):
        super().__init__(detail)
        self.detail = detail
        self.loc = loc


class SpecInvalid(InferenceError):
    """A JobSpec field is malformed (generic validation failure)."""

    code = "spec_invalid"


class TargetInvalid(InferenceError):
    code = "target_invalid"


class TargetUnknown(InferenceError):
    code = "target_kind_unknown"


class MethodUnknown(InferenceError):
    code = "method_unknown"


class MethodOptionsInvalid(InferenceError):
    code = "method_options_invalid"


class MethodUnsupportedForTarget(InferenceError):
    code = "method_unsupported_for_target"


class LimitExceeded(InferenceError):
    """A value is above a configured cap (particles, steps, dimension, ...)."""

    code = "limit_exceeded"


class TargetNonFinite(InferenceError):
    """The target's log-density or score is NaN/inf at the initial particles: fail fast, never train."""

    code = "target_nonfinite"


class Diverged(InferenceError):
    """Particles or the update became non-finite during training."""

    code = "diverged"


class DeviceUnavailable(InferenceError):
    code = "device_unavailable"


class ProcessesUnsupported(SpecInvalid):
    """A job asked to run as more than one rank of a process group with a method that cannot share its work
    (`inference_core.distributed.RANKED_METHODS` lists the ones that can)."""

    code = "processes_unsupported"


class ProcessesOverCap(InferenceError):
    """`resources.processes` above the service's cap (PARVIS_MAX_PROCESSES_PER_JOB)."""

    code = "processes_over_cap"


class RankFailed(InferenceError):
    """A rank of a multi-process job died or stopped answering: the attempt ends and the job is retried from its
    last checkpoint (not a fault of the job's spec)."""

    code = "rank_failed"
