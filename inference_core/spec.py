"""JobSpec (docs/api.md) and its admission: the one place a raw spec becomes a checked, normalised, immutable one.

`admit` validates a raw spec once per process: the API admits it before storing anything, the worker admits the
stored spec once more (its process trusts nothing it did not check) and hands the `AdmittedSpec` to
`inference_core.run`, which then validates nothing again. `validate_job_spec` is `admit` for library use.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError

from inference_core import errors
from inference_core.catalog import DATA_TARGET_KINDS, METHODS, OWN_INIT_KINDS, TARGET_KINDS, Method
from inference_core.datasets.columns import DatasetShape
from inference_core.datasets.resolve import dataset_ref_ids
from inference_core.memory import format_bytes, job_memory_bytes
from inference_core.schemas.common import StrictModel, find_nonfinite
from inference_core.schemas.kernels import EXACT_MAX_N, exact_median_over_particles
from inference_core.schemas.methods import PRECONDITION_MAX_DIM


@dataclass(frozen=True)
class Limits:
    """Caps enforced before any work is done (the service sets them from its settings)."""

    max_particles: int = 100_000
    max_steps: int = 1_000_000
    max_dim: int = 1_000_000
    #: Cap on a job's memory estimate (inference_core.memory); None: not checked (library use).
    max_job_memory_bytes: int | None = None
    #: Cap on the metric points a job stores (steps // metrics_interval + 1); None: not checked.
    max_metric_points: int | None = None
    #: Cap on `resources.processes`, the ranks one job runs as (PARVIS_MAX_PROCESSES_PER_JOB).
    max_processes: int = 8


class EvalSpec(StrictModel):
    """Diagnostics every `every` steps and at the end (inference_core.metrics.evaluation has the detail)."""

    every: int | None = Field(default=None, ge=1, description="diagnostics every this many steps")
    ksd: bool = Field(default=True, description="KSD² (U-statistic) with the IMQ kernel c = 1, β = -1/2")
    ksd_bandwidth: Literal["fixed", "median"] = Field(
        default="fixed", description="IMQ h: fixed h = 1 (Gorham & Mackey), or the particles' median heuristic"
    )
    mmd: bool = Field(default=True, description="MMD² to exact reference draws, where the target has a sampler")
    mmd_reference_samples: int = Field(default=1000, ge=2, le=100_000, description="reference draws (cached)")
    reference_seed: int = Field(default=0, ge=0, lt=2**63, description="seed of the reference draws/subsample")
    max_particles: int = Field(default=2000, ge=2, le=100_000,
                               description="O(n²) diagnostics use at most this many particles (fixed subsample)")


class ResourcesSpec(StrictModel):
    """What one job runs on: `processes` ranks of one torch.distributed process group (docs/architecture.md,
    "Multi-process jobs"): gloo on CPU, NCCL on CUDA with one device per rank, on one machine or across several."""

    processes: int = Field(default=1, ge=1, le=1024, description="ranks of the job's process group; methods with "
                           "`max_processes` 1 in /v1/methods refuse more (422 processes_unsupported)")


class JobSpec(StrictModel):
    model_config = ConfigDict(frozen=True)  # admitted specs are shared, never edited: model_copy makes variants

    method: str = Field(min_length=1, max_length=64)
    target: dict[str, Any]
    num_particles: int = Field(default=100, ge=1)
    steps: int = Field(default=1000, ge=1)
    seed: int = Field(default=0, ge=0, lt=2**63)
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="auto: the worker's GPU where it has one, but a job without a data set of at most 100 "
        "particles in d <= 32 on the CPU, where it runs faster (inference_core.training.prefers_cpu)")
    options: dict[str, Any] = Field(default_factory=dict)
    eval: EvalSpec = Field(default_factory=EvalSpec)
    name: str | None = Field(default=None, max_length=200)
    checkpoint_every: int | None = Field(default=None, ge=1, description="default: steps // 10, at most 1000")
    metrics_every: int | None = Field(default=None, ge=1, description="default: about 200 points per job")
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)

    @property
    def checkpoint_interval(self) -> int:
        return self.checkpoint_every or max(1, min(1000, self.steps // 10))

    @property
    def metrics_interval(self) -> int:
        return self.metrics_every or max(1, self.steps // 200)


def _loc_text(loc: tuple) -> str:
    return ".".join(str(part) for part in loc)


def _first_error(exc: ValidationError, prefix: tuple) -> tuple[str, tuple]:
    first = exc.errors(include_url=False)[0]
    loc = (*prefix, *first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    return (f"{_loc_text(loc)}: {message}" if loc else message), loc


def parse_target_spec(raw: Any, limits: Limits | None = None) -> Any:
    """Check a target spec on its own (also used by POST /v1/targets/validate); returns the schema object."""
    limits = limits or Limits()
    if not isinstance(raw, dict):
        raise errors.TargetInvalid("the target must be a JSON object with a 'kind'", loc=("target",))
    bad = find_nonfinite(raw)
    if bad is not None:
        raise errors.SpecInvalid(f"{_loc_text(('target', *bad))}: NaN and infinity are not allowed",
                                 loc=("target", *bad))
    kind_name = raw.get("kind")
    kind = TARGET_KINDS.get(kind_name) if isinstance(kind_name, str) else None
    if kind is None:
        raise errors.TargetUnknown(
            f"unknown target kind {kind_name!r}; known: {', '.join(sorted(TARGET_KINDS))}",
            loc=("target", "kind"),
        )
    try:
        target = kind.schema.model_validate(raw)
    except ValidationError as exc:
        detail, loc = _first_error(exc, ("target",))
        raise errors.TargetInvalid(detail, loc=loc) from None
    dim = getattr(target, "dim", None)
    if dim is not None and dim > limits.max_dim:
        raise errors.LimitExceeded(f"target dimension {dim} is over the cap of {limits.max_dim}", loc=("target",))
    return target


#: What admission asks about uploaded data sets: their shapes by id (a mapping, or a lookup of the ids a target
#: names, such as `service.repositories.Datasets.shapes`, which also refuses another tenant's or an expired one).
DataShapes = Mapping[str, DatasetShape] | Callable[[Sequence[str]], Mapping[str, DatasetShape]]


@dataclass(frozen=True)
class AdmittedSpec:
    """A job spec checked once (`admit`): the normalised JobSpec (target and options with defaults filled in), the
    schema objects its target and options were validated into, the method, the target's dimension (None only
    when it depends on an uploaded data set whose shape was not given), and the uploaded data sets it reads."""

    spec: JobSpec
    method: Method
    target: Any
    options: Any
    dim: int | None
    dataset_ids: tuple[str, ...]
    fingerprint: str

    def normalized(self) -> dict[str, Any]:
        """The JSON form stored with the job (a fresh copy; `fingerprint` is its sha256)."""
        return self.spec.model_dump(mode="json")


def validate_job_spec(raw: Any, limits: Limits | None = None) -> JobSpec:
    """`admit` without data-set shapes, for library use: the normalised spec."""
    return admit(raw, limits).spec


def admit(raw: Any, limits: Limits | None = None, data_shapes: DataShapes | None = None) -> AdmittedSpec:
    """Check a raw JobSpec once and return it admitted: spec, target, options, caps, the data sets' shapes (when
    given: the dimension of a model over an uploaded data set, an expression's columns) and the memory estimate.

    Raises an `errors.InferenceError` subclass whose `code` and `detail` go straight to the client.
    """
    limits = limits or Limits()
    if not isinstance(raw, dict):
        raise errors.SpecInvalid("the job spec must be a JSON object")
    bad = find_nonfinite(raw)
    if bad is not None:
        raise errors.SpecInvalid(f"{_loc_text(bad)}: NaN and infinity are not allowed", loc=bad)
    try:
        spec = JobSpec.model_validate(raw)
    except ValidationError as exc:
        detail, loc = _first_error(exc, ())
        raise errors.SpecInvalid(detail, loc=loc) from None

    method = METHODS.get(spec.method)
    if method is None:
        raise errors.MethodUnknown(
            f"unknown method {spec.method!r}; known: {', '.join(sorted(METHODS))}", loc=("method",)
        )
    target = parse_target_spec(spec.target, limits)
    if target.kind not in method.target_kinds:
        raise errors.MethodUnsupportedForTarget(
            f"method {method.name!r} does not accept target kind {target.kind!r}", loc=("method",)
        )
    try:
        options = method.schema.model_validate(spec.options)
    except ValidationError as exc:
        detail, loc = _first_error(exc, ("options",))
        raise errors.MethodOptionsInvalid(detail, loc=loc) from None

    if spec.num_particles > limits.max_particles:
        raise errors.LimitExceeded(
            f"num_particles {spec.num_particles} is over the cap of {limits.max_particles}", loc=("num_particles",)
        )
    if spec.steps > limits.max_steps:
        raise errors.LimitExceeded(f"steps {spec.steps} is over the cap of {limits.max_steps}", loc=("steps",))
    points = spec.steps // spec.metrics_interval + 1
    if limits.max_metric_points is not None and points > limits.max_metric_points:
        least = math.ceil(spec.steps / max(1, limits.max_metric_points - 1))
        raise errors.LimitExceeded(
            f"metrics every {spec.metrics_interval} steps for {spec.steps} steps is {points} metric points, over the "
            f"cap of {limits.max_metric_points} per job: set metrics_every to at least {least}",
            loc=("metrics_every",))
    _check_processes(method, spec.resources.processes, spec.num_particles, target.kind, limits)
    target, dim, dataset_ids = _size_target(target, limits, data_shapes)
    _check_precondition(options, target.kind, dim)
    if dim is not None:
        _check_memory(method, options, spec, dim, limits)
        _check_exact_median(options, spec.num_particles)
    normalized = spec.model_copy(update={"target": target.model_dump(mode="json"),
                                         "options": options.model_dump(mode="json")})
    return AdmittedSpec(spec=normalized, method=method, target=target, options=options, dim=dim,
                        dataset_ids=dataset_ids, fingerprint=spec_fingerprint(normalized.model_dump(mode="json")))


def admit_target(raw: Any, limits: Limits | None = None,
                 data_shapes: DataShapes | None = None) -> tuple[Any, int | None, tuple[str, ...]]:
    """A target spec on its own (POST /v1/targets/validate), checked as `admit` checks a job's: (the schema
    object, its dimension — None only when it depends on a data set whose shape was not given —, the uploaded
    data sets it reads)."""
    limits = limits or Limits()
    return _size_target(parse_target_spec(raw, limits), limits, data_shapes)


def _size_target(target: Any, limits: Limits,
                 data_shapes: DataShapes | None) -> tuple[Any, int | None, tuple[str, ...]]:
    dataset_ids = tuple(dataset_ref_ids(target.model_dump(mode="json")))
    shapes = _shapes_of(data_shapes, dataset_ids)
    dim = getattr(target, "dim", None)
    if dim is None:
        dim = _dim_from_data(target, shapes, limits)
    if shapes and callable(getattr(target, "check_dataset_shapes", None)):
        target.check_dataset_shapes(shapes)  # an expression over data-set columns
    return target, dim, dataset_ids


def _shapes_of(data_shapes: DataShapes | None, dataset_ids: tuple[str, ...]) -> dict[str, DatasetShape]:
    if not dataset_ids or data_shapes is None:
        return {}
    found = dict(data_shapes if isinstance(data_shapes, Mapping) else data_shapes(dataset_ids))
    for dataset_id in dataset_ids:
        if dataset_id not in found:
            raise errors.TargetInvalid(f"no dataset {dataset_id!r}", loc=("target", "dataset"))
    return found


def _dim_from_data(target: Any, shapes: Mapping[str, DatasetShape], limits: Limits) -> int | None:
    """The dimension of a model whose size follows from its uploaded data set's shape (`dim_for`)."""
    if not shapes or not hasattr(target, "dim_for"):
        return None
    dataset_id, shape = next(iter(shapes.items()))
    try:
        dim = target.dim_for(shape.n_features, shape.n_classes, shape.n_rows)
    except ValueError as exc:
        raise errors.TargetInvalid(f"target with dataset {dataset_id!r}: {exc}", loc=("target", "dataset")) from None
    if dim > limits.max_dim:
        raise errors.LimitExceeded(f"target dimension {dim} is over the cap of {limits.max_dim}", loc=("target",))
    return dim


def _check_processes(method: Method, processes: int, num_particles: int, target_kind: str, limits: Limits) -> None:
    """`resources.processes`: at most the service's cap, more than 1 only for a method that runs as ranks (the
    catalog's `shares`), and no more ranks than the particles or batch rows they share."""
    if processes == 1:
        return
    if processes > limits.max_processes:
        raise errors.ProcessesOverCap(
            f"resources.processes {processes} is over this service's cap of {limits.max_processes} ranks per job",
            loc=("resources", "processes"))
    if method.shares is None:
        raise errors.ProcessesUnsupported(
            f"method {method.name!r} runs as one process (its `max_processes` in /v1/methods is 1): "
            f"resources.processes must be 1", loc=("resources", "processes"))
    if method.shares == "data":  # the rows shared are the data set's minibatch (their count checked at the start)
        if target_kind not in DATA_TARGET_KINDS:
            raise errors.ProcessesUnsupported(
                f"method {method.name!r} shares a data target's rows among ranks; a {target_kind} target has none: "
                "resources.processes must be 1", loc=("resources", "processes"))
        return
    if processes > num_particles:
        raise errors.ProcessesUnsupported(
            f"{processes} ranks would share {num_particles} {'draws a step' if method.shares == 'batch' else method.shares}: "
            "every rank needs at least one", loc=("resources", "processes"))


def _check_precondition(options: Any, kind: str, dim: int | None) -> None:
    """`precondition: "pathfinder"` (the particle methods) at submit: not for targets with an initialisation of their
    own (OWN_INIT_KINDS), nor beyond PRECONDITION_MAX_DIM where the dimension is known (the method checks again)."""
    if getattr(options, "precondition", None) != "pathfinder":
        return
    if kind in OWN_INIT_KINDS or dim is not None and dim > PRECONDITION_MAX_DIM:
        raise errors.MethodOptionsInvalid(
            f"precondition 'pathfinder' takes targets without an initialisation of their own (not network weights) "
            f"of dimension up to {PRECONDITION_MAX_DIM} (dense Pathfinder Hessians); a {kind!r} target"
            + (f" of dimension {dim}" if dim is not None else "") + " is not one", loc=("options", "precondition"))


def _check_exact_median(options: Any, num_particles: int) -> None:
    """A kernel bandwidth by the exact median over all particles (`kernel.bandwidth`, unless a speed-up method
    takes its cross median instead) holds their n² distances: refused beyond EXACT_MAX_N particles at submit,
    not by the worker mid-run."""
    if num_particles > EXACT_MAX_N and exact_median_over_particles(options):
        raise errors.MethodOptionsInvalid(
            f"the bandwidth rule {options.kernel.bandwidth.rule!r} takes the exact median of all n² pairwise distances, "
            f"which is refused beyond {EXACT_MAX_N:,} particles ({num_particles:,} asked for): use rule "
            "'median_subsampled' (the median over a fixed subset), or fewer particles",
            loc=("options", "kernel", "bandwidth", "rule"))


def _check_memory(method: Method, options: Any, spec: JobSpec, dim: int, limits: Limits) -> None:
    if limits.max_job_memory_bytes is None:
        return
    # MMD's exact reference draws [m, d] (float64), for targets that have them.
    has_reference = TARGET_KINDS[spec.target["kind"]].has_reference
    reference = spec.eval.mmd_reference_samples if spec.eval.mmd and has_reference else 0
    estimate = job_memory_bytes(method.name, method.family, options, spec.num_particles, dim, reference)
    if estimate > limits.max_job_memory_bytes:
        raise errors.LimitExceeded(
            f"the job's memory estimate is {format_bytes(estimate)} ({estimate} bytes for {spec.num_particles} "
            f"particles of dimension {dim} with {method.name}), over the cap of "
            f"{format_bytes(limits.max_job_memory_bytes)} ({limits.max_job_memory_bytes} bytes): "
            "use fewer particles or a smaller target", loc=("num_particles",))


def spec_fingerprint(raw: Any) -> str:
    """sha256 of the canonical JSON of a spec (sorted keys, no spaces): idempotency compares these."""
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()
