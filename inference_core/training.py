"""The only training loop (docs/architecture.md, "Training loop"; exposed as `inference_core.run`, kept out of a module named `run` so
the submodule never shadows that function): spec → target + method → steps, with hooks for the service.

`run(spec)` works in a notebook with no hooks at all. The worker passes `RunHooks` to report progress and
metrics, checkpoint, and stop on cancel/preemption between steps, and `resume_state` to continue from a
checkpoint.

With `group` (`inference_core.distributed`; a method of `RANKED_METHODS`) one job runs as the k ranks of a process
group, each rank calling `run` with the same spec: every rank builds the method from the same seed and shares the
steps' work (`Method.use_ranks`); rank 0 alone consults `should_stop` (its answer is agreed on every rank before
each step, so all stop at the same step), calls the other hooks with metrics of the whole job (`grad_evals`
summed over the ranks), writes checkpoints in exactly the one-rank format (the methods keep every rank's
parameters whole and identical, so a checkpoint resumes under any k) and evaluates; the other ranks return a
`RunResult` without final metrics or quality block.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from inference_core import errors
from inference_core.catalog import METHODS, resolve
from inference_core.distributed import RANKED_METHODS, RankGroup
from inference_core.methods.base import DTYPES, Method
from inference_core.metrics.evaluation import Evaluator
from inference_core.metrics.heldout import heldout_metrics
from inference_core.metrics.quality import quality_report
from inference_core.spec import AdmittedSpec, EvalSpec, JobSpec, Limits, admit, parse_target_spec
from inference_core.targets import BuildContext, build_target
from inference_core.targets.counting import EvaluationCounter


class RunHooks:
    """Callbacks from the run loop; every default does nothing."""

    def on_start(self, method: Method, total_steps: int) -> None: ...

    def on_step(self, step: int, total_steps: int, metrics: dict[str, float]) -> None: ...

    def on_metrics(self, step: int, metrics: dict[str, float]) -> None: ...

    def save_checkpoint(self, step: int, state: dict[str, Any]) -> None: ...

    def should_stop(self) -> str | None:
        """Return a reason ("cancelled", "preempted", ...) to stop before the next step."""
        return None


@dataclass
class RunResult:
    method: Method
    steps_completed: int
    stopped: str | None
    final_metrics: dict[str, float] = field(default_factory=dict)
    wall_time_s: float = 0.0
    quality: dict[str, Any] = field(default_factory=dict)
    evaluations_spent: int = 0  # target evaluations of the whole job, earlier attempts included

    @property
    def particles(self) -> Tensor:
        return self.method.particles()

    def checkpoint_state(self) -> dict[str, Any]:
        return checkpoint_state(self.method, self.evaluations_spent)


#: the job's target evaluations so far, kept in its checkpoints beside the method's state, so that `grad_evals`
#: after a resume counts the attempts before it (and the set-up, such as Pathfinder, that a resume redoes)
EVALUATIONS_KEY = "evaluations_spent"


def checkpoint_state(method: Method, evaluations_spent: int) -> dict[str, Any]:
    return {**method.state_dict(), EVALUATIONS_KEY: int(evaluations_spent)}


#: `device: "auto"` keeps a job this small on the CPU where there is a GPU too: no data set, at most this many
#: particles (the default; a generative method's batch; `auto` may move 3× as many), dimension at most this.
#: Measured on a lent H100 (2026-11-26, docs/benchmarks.md, "The inference core on CUDA"): the suite's jobs (100
#: particles, d ≤ 31; `auto`'s 300-particle ensembles and flow fits included) ran 2-3.4× slower on the GPU than on
#: the same machine's 16 CPU cores, 1-2.6× slower than on 2 cores elsewhere; whole 300-step svgd jobs at d = 10 took
#: 0.74 s on the CPU against 1.08 s on the GPU at 100 particles, about as long at 300 and 1.8-18× less on the GPU
#: from 1,000 (the step timings there agree).
CPU_PREFERRED_MAX_PARTICLES = 100
CPU_PREFERRED_MAX_DIM = 32


def prefers_cpu(spec: JobSpec, dim: int | None = None) -> bool:
    """A job a GPU would run slower than the CPU: a chain of small kernels (CPU_PREFERRED_MAX_PARTICLES). Targets
    over a data set (BNNs, regressions on an uploaded table) and targets whose dimension the spec does not give
    stay on the GPU. `dim`: the target's, when the caller has it (an admitted spec), else read from the spec."""
    if "dataset" in spec.target or spec.num_particles > CPU_PREFERRED_MAX_PARTICLES:
        return False
    if dim is None:
        dim = getattr(parse_target_spec(spec.target), "dim", None)
    return isinstance(dim, int) and dim <= CPU_PREFERRED_MAX_DIM


def resolve_device(spec: JobSpec, cuda_available: bool | None = None, dim: int | None = None) -> torch.device:
    """The job's device: `cuda` (DeviceUnavailable without one), `cpu`, or for `auto` the GPU where there is one,
    unless the job is small enough to run faster on the CPU (`prefers_cpu`)."""
    available = torch.cuda.is_available() if cuda_available is None else cuda_available
    if spec.device == "cuda" and not available:
        raise errors.DeviceUnavailable("device 'cuda' was asked for but no CUDA device is available")
    if spec.device == "cuda" or (spec.device == "auto" and available and not prefers_cpu(spec, dim)):
        return torch.device("cuda")
    return torch.device("cpu")


def build_method(spec: JobSpec | AdmittedSpec, context: BuildContext | None = None, counted: bool = False) -> Any:
    """Validated spec → target + method: non-finite starting particles redrawn (`methods.start`), then the
    fail-fast finiteness check. With `counted`, (method, EvaluationCounter) counting the target evaluations
    from before the method is built (Pathfinder's count in). An admitted spec's target and options are used as
    they are (validated once, by `admit`); a JobSpec's are validated here."""
    if isinstance(spec, AdmittedSpec):
        target_spec, options, dim, spec = spec.target, spec.options, spec.dim, spec.spec
    else:
        target_spec, options, dim = spec.target, METHODS[spec.method].schema.model_validate(spec.options), None
    device = resolve_device(spec, dim=dim)
    method_info = METHODS[spec.method]
    dtype = DTYPES[getattr(options, "dtype", "float32")]
    base = context or BuildContext()
    target = build_target(target_spec, BuildContext(dtype=dtype, device=device, load_dataset=base.load_dataset))
    counter = EvaluationCounter(target)
    method = resolve(method_info.builder)(target, options, spec.num_particles, spec.seed, device)
    with counter.paused():  # checks of the start, not the method's own work
        method.redraw_nonfinite_start()
        check_target_finite(method)
    return (method, counter) if counted else method


def check_target_finite(method: Method) -> None:
    """Evaluate log p and its score at the initial particles; non-finite values fail the job at once."""
    if not method.particles_in_target_space:
        return
    x = method.particles()
    batch = method.target.sample_batch(torch.Generator().manual_seed(0))
    log_p = method.target.log_prob(x, batch)
    score = method.target.score(x, batch)
    bad_lp = int((~torch.isfinite(log_p)).sum())
    bad_score = int((~torch.isfinite(score).all(-1)).sum())
    if bad_lp or bad_score:
        raise errors.TargetNonFinite(
            f"the target is not finite at the initial particles: log-density non-finite at {bad_lp} and "
            f"score non-finite at {bad_score} of {x.shape[0]} particles"
        )


def evaluate(method: Method, spec: EvalSpec | None = None, evaluator: Evaluator | None = None) -> dict[str, float]:
    """Diagnostics of the particles (inference_core.metrics.evaluation): moment errors against the target's
    exact reference where it has one, IMQ KSD², and MMD² to cached exact reference draws where it has a
    sampler. Pass the run's `evaluator` to reuse its cached reference draws. Methods whose particles are not
    in the target's parameter space report their own `fit_metrics()`."""
    if not method.particles_in_target_space:
        return method.fit_metrics()
    return (evaluator or Evaluator(spec))(method)


def run(
    spec: dict[str, Any] | JobSpec | AdmittedSpec,
    *,
    hooks: RunHooks | None = None,
    resume_state: dict[str, Any] | None = None,
    context: BuildContext | None = None,
    limits: Limits | None = None,
    group: RankGroup | None = None,
) -> RunResult:
    """Train from a job spec; returns when all steps are done or a hook asks to stop. A raw spec or JobSpec is
    admitted here (inference_core.spec.admit); an AdmittedSpec (the worker's) is not checked again.

    `group`: this process's rank in the job's process group (`inference_core.distributed.join_group`; None or one
    rank: the single-process run). Every rank passes the same spec and `resume_state` (a one-rank-format state);
    `errors.ProcessesUnsupported` for more than one rank with a method outside `RANKED_METHODS`."""
    if isinstance(spec, AdmittedSpec):
        admitted = spec
    else:
        admitted = admit(spec.model_dump(mode="json") if isinstance(spec, JobSpec) else spec, limits)
    job = admitted.spec
    ranked = group is not None and group.world_size > 1
    if ranked and job.method not in RANKED_METHODS:
        raise errors.ProcessesUnsupported(
            f"method {job.method!r} runs as one process only; methods that can share a job among ranks: "
            f"{', '.join(sorted(RANKED_METHODS))}", loc=("method",))
    root = not ranked or group.is_root
    hooks = (hooks or RunHooks()) if root else RunHooks()
    method, counter = build_method(admitted, context, counted=True)
    if ranked:
        method.use_ranks(group)
    if resume_state is not None:
        resume_state = dict(resume_state)
        spent = int(resume_state.pop(EVALUATIONS_KEY, 0))
        if root:  # the job's count: the ranks' counts are summed
            counter.count += spent
        method.load_state_dict(resume_state)
    method.plan(job.steps)
    started = time.perf_counter()
    hooks.on_start(method, job.steps)
    stopped: str | None = None
    eval_every = job.eval.every
    evaluator = Evaluator(job.eval)
    while method.step_count < job.steps and not method.converged:
        stopped = group.agree_stop(hooks.should_stop()) if ranked else hooks.should_stop()
        if stopped:
            break
        metrics = method.step()
        step = method.step_count
        count = int(group.all_reduce_sum(counter.count)) if ranked else counter.count
        if not root:
            continue
        metrics["grad_evals"] = float(count)
        if eval_every and step % eval_every == 0:
            with counter.paused():
                metrics.update(evaluate(method, evaluator=evaluator))
        hooks.on_step(step, job.steps, metrics)
        if step % job.metrics_interval == 0 or step == job.steps:
            hooks.on_metrics(step, metrics)
        if step % job.checkpoint_interval == 0 and step < job.steps:
            hooks.save_checkpoint(step, checkpoint_state(method, count))
    if ranked:
        counter.count = int(group.all_reduce_sum(counter.count))
        if not root:  # rank 0 evaluates and reports; the others' results are not used
            return RunResult(method, method.step_count, stopped, {}, time.perf_counter() - started, {},
                             counter.count)
    final: dict[str, float] = {}
    quality: dict[str, Any] = {}
    if stopped is None:
        with counter.paused():
            # Held-out metrics (test RMSE/LL, accuracy/NLL) when the data has a test part; see metrics.heldout.
            final = {**evaluate(method, evaluator=evaluator), **heldout_metrics(method),
                     **method.summary_metrics(), "grad_evals": float(counter.count)}
            if method.converged_step is not None:
                final["converged_step"] = float(method.converged_step)
            quality = quality_report(method, final)
    return RunResult(method, method.step_count, stopped, final, time.perf_counter() - started, quality, counter.count)
