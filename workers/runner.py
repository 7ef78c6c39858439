"""Run one job: claim it, resume from its checkpoint, heartbeat, report, checkpoint, store the result.

Every write is fenced by the lease (service.job_state): if the reaper has handed the job to another worker,
this one stops at the next step boundary without writing anything.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

from inference_core import errors
from inference_core.methods.base import Method
from inference_core.metrics.quality import with_sampler_certificate
from inference_core.samplers.certificate import sampler_quality
from inference_core.serialization import state_from_bytes, state_to_bytes
from inference_core.spec import AdmittedSpec, admit
from inference_core.targets import BuildContext, build_target
from inference_core.training import RunHooks, RunResult, resolve_device, run
from service import job_state
from service.arrays import npy_bytes
from service.datasets import dataset_loader
from service.errors import DomainError
from service.job_state import Lease
from service.logging_config import ContextThread, log_context
from service.models import Artifact, Job, Sampler
from service.repositories import Datasets
from service.samplers import artifact_row, store_sampler
from service.store import StoredBlob
from workers.context import WorkerContext, worker_context
from workers.dispatch import send_unsent
from workers.predictors import store_predictor
from workers.ranks import failure_from_store, is_distributed_failure, processes_of, rank_zero_group

logger = logging.getLogger("parvis.worker")

# Set by the worker's SIGTERM handling: the running job checkpoints and goes back to the queue.
PREEMPT = threading.Event()

T = TypeVar("T")

# What a database outage looks like from SQLAlchemy: the server unreachable or gone mid-statement
# (OperationalError, InterfaceError, a DisconnectionError from the pool's pre-ping), or no pooled connection
# freed in time (TimeoutError). Anything else is a real error and fails the job as before.
TRANSIENT_DB_ERRORS = (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.DisconnectionError, sa_exc.TimeoutError)


def is_transient_db_error(exc: BaseException) -> bool:
    return isinstance(exc, TRANSIENT_DB_ERRORS) or (isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated)


def clean_metrics(metrics: dict[str, Any]) -> dict[str, float | None]:
    """JSON-safe metrics: floats only, NaN/inf as null."""
    out: dict[str, float | None] = {}
    for name, value in metrics.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        out[name] = number if math.isfinite(number) else None
    return out


def json_safe(value: Any) -> Any:
    """A `quality` block for a JSON column: NaN/inf → null, tensors/numpy scalars → float, nested as given."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, bool | str) or value is None:
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    if not math.isfinite(number):
        return None
    return int(number) if isinstance(value, int) else number


CHECKPOINT_MEDIA_TYPE = "application/vnd.parvis.checkpoint+safetensors"


def checkpoint_key(job_id: str) -> str:
    return f"jobs/{job_id}/checkpoint.safetensors"


class LeaseClock:
    """When this attempt's lease runs out by the worker's own monotonic clock: the moment taken just before
    the last successful claim or renewal (whose `lease_expires_at` is computed after it), plus `lease_seconds`,
    less a safety margin for clock skew with the reapers and a write in flight. Past that moment another worker
    may own the job, so the attempt writes nothing more (docs/architecture.md, "Database outages")."""

    def __init__(self, lease_seconds: float, margin_seconds: float, start: float):
        self.lease_seconds = lease_seconds
        self.margin = min(margin_seconds, lease_seconds / 4)
        self._deadline = start + lease_seconds - self.margin
        self._lock = threading.Lock()

    def renewed(self, at: float) -> None:
        """A renewal issued at monotonic time `at` went through."""
        with self._lock:
            self._deadline = max(self._deadline, at + self.lease_seconds - self.margin)

    def remaining(self) -> float:
        with self._lock:
            return self._deadline - time.monotonic()

    def expired(self) -> bool:
        return self.remaining() <= 0


class Heartbeat(ContextThread):
    """Renews the lease every `heartbeat_seconds` and picks up cancel requests. A ContextThread: its log lines
    carry the job's `job_id` and `tenant` like the run's own. While the database is unreachable it retries every
    `db_retry_seconds`; once the lease has run out by its own clock (`LeaseClock`) it gives the lease up."""

    def __init__(self, context: WorkerContext, lease: Lease, clock: LeaseClock | None = None):
        super().__init__(name=f"heartbeat-{lease.job_id}", daemon=True)
        self.context = context
        self.lease = lease
        settings = context.settings
        self.clock = clock or LeaseClock(settings.lease_seconds, settings.lease_safety_margin_seconds,
                                         time.monotonic())
        self.lost = threading.Event()
        self.cancel = threading.Event()
        self.stopped = threading.Event()

    def holds_lease(self) -> bool:
        """Whether this attempt may still write: its lease was never refused and has not run out by the clock.
        Once false it stays false."""
        if self.lost.is_set():
            return False
        if self.clock.expired():
            if not self.lost.is_set():
                logger.warning("job %s: lease not renewed in time (database unreachable?); another worker may own "
                               "the job now: stopping without further writes", self.lease.job_id)
            self.lost.set()
            return False
        return True

    def run(self) -> None:
        settings = self.context.settings
        wait = settings.heartbeat_seconds
        failing_since: float | None = None
        while not self.stopped.wait(wait):
            if not self.holds_lease():
                return
            issued = time.monotonic()
            try:
                with self.context.sessions() as session:
                    ours, cancel = job_state.renew_lease(session, self.lease, settings.lease_seconds)
            except Exception as exc:  # noqa: BLE001 - a DB blip is retried soon; the lease has slack
                if failing_since is None:
                    failing_since = issued
                    logger.warning("heartbeat failed for %s (%s); retrying every %.1f s for the %.0f s left on "
                                   "the lease", self.lease.job_id, type(exc).__name__, settings.db_retry_seconds,
                                   self.clock.remaining(), exc_info=not is_transient_db_error(exc))
                wait = min(settings.heartbeat_seconds, settings.db_retry_seconds)
                continue
            wait = settings.heartbeat_seconds
            if self.stopped.is_set():
                return  # the job's final write came first: a refusal now says nothing
            if ours:
                self.clock.renewed(issued)
                if failing_since is not None:
                    logger.info("job %s: lease renewed after %.1f s of failed heartbeats", self.lease.job_id,
                                time.monotonic() - failing_since)
                    failing_since = None
            if cancel and not self.cancel.is_set():
                logger.info("job %s: cancel requested; stopping at the next step", self.lease.job_id)
                self.cancel.set()
            if not ours:
                logger.warning("job %s: lease renewal refused; another worker owns the job now", self.lease.job_id)
                self.lost.set()
                return

    def stop(self) -> None:
        self.stopped.set()


class ServiceHooks(RunHooks):
    """Connects the run loop to the database: throttled progress, metric points, checkpoints, stop flags."""

    def __init__(self, context: WorkerContext, lease: Lease, job: Job, heartbeat: Heartbeat):
        self.context = context
        self.lease = lease
        self.tenant_id = job.tenant_id
        self.job_started = job.started_at
        self.heartbeat = heartbeat
        self.pending_points: list[tuple[int, float, dict[str, Any]]] = []
        self.latest: dict[str, float | None] = {}
        self.last_write = 0.0
        self.attempt_started = time.monotonic()
        self.total_steps = int(job.spec["steps"])
        self.first_step = 0
        self.last_step = 0
        # What earlier attempts reported: shown progress never goes back below it (docs/api.md, "progress").
        self.reported_step = int((job.progress or {}).get("step") or 0)
        self.resumed_from: int | None = None
        # The last checkpoint saved whose step the database has not recorded yet (its bytes are in the store).
        self.pending_checkpoint: tuple[int, StoredBlob] | None = None
        self.db_down_since: float | None = None  # monotonic time of the first failed write of an outage

    # -- stop flags ---------------------------------------------------------------------------------
    def should_stop(self) -> str | None:
        # An unreachable database stops nothing while the lease, as last renewed, may still be ours.
        if not self.heartbeat.holds_lease():
            return "lease_lost"
        if self.heartbeat.cancel.is_set():
            return "cancelled"
        if PREEMPT.is_set():
            return "preempted"
        return None

    # -- progress and metrics -------------------------------------------------------------------------
    def on_start(self, method: Method, total_steps: int) -> None:
        self.first_step = self.last_step = method.step_count
        if self.first_step > 0 or self.reported_step > 0:  # a re-run: from a checkpoint, or from 0 without one
            self.resumed_from = self.first_step

    def _wall_time(self) -> float:
        return (job_state.utcnow() - self.job_started).total_seconds() if self.job_started else 0.0

    def progress(self, step: int) -> dict[str, Any]:
        """`step` is where this attempt is, shown as no less than what an earlier attempt reported: a resumed
        attempt re-does the steps past its checkpoint while the shown step holds, and says where it resumed."""
        total = self.total_steps
        done = step - self.first_step
        elapsed = time.monotonic() - self.attempt_started
        eta = elapsed / done * (total - step) if done > 0 else None
        shown = max(step, self.reported_step)
        return {"step": shown, "total_steps": total, "fraction": shown / total if total else 1.0, "eta_s": eta,
                "resumed_from_step": self.resumed_from}

    def on_step(self, step: int, total_steps: int, metrics: dict[str, float]) -> None:
        self.last_step = step
        self.latest.update(clean_metrics(metrics))
        now = time.monotonic()
        if now - self.last_write >= self.context.settings.progress_interval_seconds:
            self.flush(self.progress(step))
            self.last_write = now

    def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.pending_points.append((step, self._wall_time(), clean_metrics(metrics)))

    def flush(self, progress: dict[str, Any]) -> bool:
        """Write the progress, the metric points gathered since the last write and a checkpoint not recorded
        yet, each fenced by the lease. With the database unreachable they stay buffered for the next write
        (the points are bounded by `max_metric_points_per_job`): False, and the run goes on. A refused write
        (the lease is another worker's) marks the lease lost."""
        if not self.heartbeat.holds_lease():
            return False
        written = 0
        try:
            with self.context.sessions() as session:
                ok = job_state.record_progress(session, self.lease, progress, dict(self.latest),
                                               self.pending_points, self.tenant_id)
                if ok:
                    written = len(self.pending_points)
                    self.pending_points = []
                    ok = self.record_pending_checkpoint(session)
        except Exception as exc:
            if not is_transient_db_error(exc):
                raise
            self._write_failed(exc)
            return False
        if not ok:
            self.heartbeat.lost.set()
            return False
        if self.db_down_since is not None:
            logger.info("job %s: database back after %.1f s; buffered progress written (%d metric points)",
                        self.lease.job_id, time.monotonic() - self.db_down_since, written)
            self.db_down_since = None
        return True

    def record_pending_checkpoint(self, session: Session) -> bool:
        if self.pending_checkpoint is None:
            return True
        step, blob = self.pending_checkpoint
        if not job_state.record_checkpoint(session, self.lease, step):
            return False
        job_state.add_artifact(session, artifact_row(blob, self.tenant_id, "checkpoint", CHECKPOINT_MEDIA_TYPE,
                                                     job_id=self.lease.job_id))
        session.commit()
        self.pending_checkpoint = None
        return True

    def _write_failed(self, exc: BaseException) -> None:
        if self.db_down_since is None:
            self.db_down_since = time.monotonic()
            logger.warning("job %s: database unreachable (%s); progress and metrics are buffered and the run goes "
                           "on while the lease lasts (%.0f s)", self.lease.job_id, type(exc).__name__,
                           self.heartbeat.clock.remaining())
        else:
            logger.debug("job %s: database still unreachable", self.lease.job_id, exc_info=True)

    def write_within_lease(self, what: str, write: Callable[[Session], T]) -> T | None:
        """`write(session)` retried through database errors every `db_retry_seconds` for as long as the lease
        may be ours: its result, or None if it never got through (the lease ran out: the reaper takes over)."""
        failures = 0
        while self.heartbeat.holds_lease():
            try:
                with self.context.sessions() as session:
                    return write(session)
            except Exception as exc:
                if not is_transient_db_error(exc):
                    raise
                failures += 1
                logger.log(logging.WARNING if failures == 1 else logging.DEBUG,
                           "job %s: could not %s (database unreachable: %s); retrying for the %.0f s left on the "
                           "lease", self.lease.job_id, what, type(exc).__name__, self.heartbeat.clock.remaining())
            time.sleep(max(0.0, min(self.context.settings.db_retry_seconds, self.heartbeat.clock.remaining())))
        return None

    # -- checkpoints ------------------------------------------------------------------------------------
    def save_checkpoint(self, step: int, state: dict[str, Any]) -> None:
        """The state goes to the artifact store; the database records its step with the next write that gets
        through (at once, unless the database is unreachable)."""
        if not self.heartbeat.holds_lease():
            return
        blob = self.context.store.put(checkpoint_key(self.lease.job_id), state_to_bytes(state))
        self.pending_checkpoint = (step, blob)
        self.flush(self.progress(step))


def admit_stored_spec(context: WorkerContext, job: Job) -> AdmittedSpec:
    """The stored spec, admitted once in this process (the API admitted it too, in its own): the shapes of its
    uploaded data sets come from the tenant's records, expired ones included (the job was submitted before the
    expiry; the sweeper keeps data sets a live job uses)."""
    with context.sessions() as session:
        datasets = Datasets(session, job.tenant_id)
        try:
            return admit(job.spec, limits=context.settings.limits(),
                         data_shapes=lambda ids: datasets.shapes(ids, live_only=False))
        except DomainError as exc:  # a data set deleted meanwhile
            raise errors.TargetInvalid(exc.detail, loc=exc.loc) from None


def run_job_by_id(job_id: str) -> None:
    context = worker_context()
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    claimed_at = time.monotonic()  # before the claim: its lease runs `lease_seconds` from a moment after this
    with context.sessions() as session:
        lease = job_state.claim_job(session, job_id, owner, context.settings.lease_seconds)
        if lease is None:
            logger.info("job %s not claimable (taken, finished or cancelled); skipping", job_id)
            return
        job = session.get(Job, job_id)
        session.expunge(job)
    with log_context(job_id=job_id, tenant=job.tenant_id):  # every line logged while it runs names the job
        logger.info("job %s claimed (attempt %d) by %s", job_id, lease.attempt, owner)
        JobExecution(context, lease, job, claimed_at=claimed_at).execute()


class JobExecution:
    def __init__(self, context: WorkerContext, lease: Lease, job: Job, *, claimed_at: float | None = None):
        """`claimed_at`: the monotonic time taken just before the claim (default: now, just after it)."""
        self.context = context
        self.lease = lease
        self.job = job
        settings = context.settings
        self.clock = LeaseClock(settings.lease_seconds, settings.lease_safety_margin_seconds,
                                time.monotonic() if claimed_at is None else claimed_at)

    def _load_checkpoint(self) -> dict[str, Any] | None:
        if self.job.checkpoint_step is None:
            return None
        try:
            return state_from_bytes(self.context.store.get(checkpoint_key(self.job.id)))
        except Exception:  # noqa: BLE001 - a missing or damaged checkpoint means starting over, not failing
            logger.warning("job %s: checkpoint unreadable, starting from step 0", self.job.id, exc_info=True)
            return None

    def execute(self) -> None:
        resume = self._load_checkpoint()
        resumed_from = int(resume["step"]) if resume is not None else None
        heartbeat = Heartbeat(self.context, self.lease, self.clock)
        hooks = ServiceHooks(self.context, self.lease, self.job, heartbeat)
        started = hooks.write_within_lease("start the attempt",
                                           lambda session: job_state.start_attempt(session, self.lease, resumed_from))
        if not started:  # not ours any more, or the database never answered within the lease: the reaper's
            return
        heartbeat.start()
        try:  # the heartbeat runs until the final write (storing the result and certifying a sampler take time)
            try:
                self.admitted = admitted = admit_stored_spec(self.context, self.job)
                context = BuildContext(load_dataset=dataset_loader(self.context.sessions, self.context.store,
                                                                   self.job.tenant_id))
                if processes_of(self.job.spec) == 1:
                    result = run(admitted, hooks=hooks, resume_state=resume, context=context)
                else:
                    result = self._run_ranks(admitted, hooks, resume, context, resumed_from)
                    if result is None:  # the lease went before the ranks met: the reaper's now
                        return
            except errors.RankFailed as exc:
                logger.warning("job %s: %s", self.job.id, exc.detail)
                self._retry(hooks, (exc.code, exc.detail))
                return
            except errors.InferenceError as exc:
                logger.info("job %s failed: %s: %s", self.job.id, exc.code, exc.detail)
                self._finish(hooks, "failed", error=(exc.code, exc.detail))
                return
            except Exception as exc:  # noqa: BLE001 - never crash the worker; the job records a generic failure
                if is_transient_db_error(exc):  # not the job's fault (set-up reads: the spec's data sets)
                    logger.warning("job %s: database unreachable while setting up (%s); giving the job back",
                                   self.job.id, type(exc).__name__)
                    self._release(hooks)
                    return
                logger.exception("job %s: unexpected error", self.job.id)
                self._finish(hooks, "failed", error=("internal_error",
                                                     "the worker hit an unexpected error while running this job"))
                return
            self._conclude(hooks, result)
        finally:
            heartbeat.stop()

    def _run_ranks(self, admitted: AdmittedSpec, hooks: ServiceHooks, resume: dict[str, Any] | None,
                   context: BuildContext, resumed_from: int | None) -> RunResult | None:
        """This worker as rank 0 of a multi-process job (workers.ranks): the others are started or sent for, the
        run goes on with the group, and a peer's failure becomes that peer's error or `RankFailed`."""
        backend = "nccl" if resolve_device(admitted.spec, dim=admitted.dim).type == "cuda" else "gloo"
        with rank_zero_group(self.context, self.lease, self.job, resumed_from, backend) as (group, store):
            if group is None:
                return None
            try:
                return run(admitted, hooks=hooks, resume_state=resume, context=context, group=group)
            except Exception as exc:
                if isinstance(exc, errors.InferenceError) or not is_distributed_failure(exc):
                    raise
                raise failure_from_store(store, group.world_size) from exc

    def _conclude(self, hooks: ServiceHooks, result: RunResult) -> None:
        if result.stopped == "lease_lost":
            logger.warning("job %s: lease lost; another worker owns it now, exiting without writes", self.job.id)
        elif result.stopped == "cancelled":
            self._finish(hooks, "cancelled")
        elif result.stopped == "preempted":
            hooks.save_checkpoint(result.steps_completed, result.checkpoint_state())
            if self._release(hooks):
                logger.info("job %s preempted at step %d and requeued", self.job.id, result.steps_completed)
        else:
            particles = result.particles.detach().cpu().numpy()
            blob = self.context.store.put(f"jobs/{self.job.id}/particles.npy", npy_bytes(particles))
            artifacts = [artifact_row(blob, self.job.tenant_id, "particles", "application/x-npy", job_id=self.job.id)]
            sampler = self._store_sampler(result, artifacts)
            if sampler is None:  # particles of a BNN: what /v1/jobs/{id}/predict needs
                predictor = store_predictor(self.context.store, result.method, tenant_id=self.job.tenant_id,
                                            job_id=self.job.id)
                if predictor is not None:
                    artifacts.append(predictor)
            hooks.latest.update(clean_metrics(result.final_metrics))
            quality = result.quality if sampler is None else with_sampler_certificate(
                result.quality, sampler.quality, result.method)
            self._finish(hooks, "succeeded", artifacts=artifacts, sampler=sampler, quality=json_safe(quality))

    def _store_sampler(self, result: RunResult, artifacts: list[Artifact]) -> Sampler | None:
        """A generative method's trained generator, stored next to the job's particles."""
        trained = result.method.sampler()
        if trained is None:
            return None
        record, rows = store_sampler(self.context.store, trained, tenant_id=self.job.tenant_id,
                                     job_id=self.job.id, method=self.job.method)
        record.expires_at = self.job.expires_at  # retention: a sampler lives as long as its job
        record.quality = json_safe(self._certify(trained, result.method.target_space_checks))
        artifacts.extend(rows)
        return record

    def _certify(self, trained: Any, target_space_checks: bool = True) -> dict[str, Any]:
        """The sampler's quality report (issue 16), against the job's target rebuilt in float64 on the CPU with
        the worker's dataset loader (data targets included: the worker has their data). Never fails the job."""
        try:
            import torch

            target = build_target(self.admitted.target, BuildContext(
                dtype=torch.float64, load_dataset=dataset_loader(self.context.sessions, self.context.store,
                                                                 self.job.tenant_id)))
            return sampler_quality(trained, target, seed=int(self.job.spec.get("seed", 0)),
                                   target_space_checks=target_space_checks)
        except Exception as exc:  # noqa: BLE001 - a report that cannot be made is said so, not fatal
            logger.warning("job %s: sampler quality report failed", self.job.id, exc_info=True)
            return {"verdict": None, "reason": f"the quality report could not be computed ({type(exc).__name__})"}

    def _retry(self, hooks: ServiceHooks, error: tuple[str, str]) -> None:
        """End an attempt that failed through no fault of the job (a rank died): what is buffered and the last
        checkpoint recorded, then back to the queue with the attempt spent (every rank resumes from that
        checkpoint), or failed with `error` once the job's attempts are spent."""
        hooks.heartbeat.stop()

        def retry(session: Session) -> str | None:
            if hooks.pending_points:
                if not job_state.record_progress(session, self.lease, hooks.progress(hooks.last_step),
                                                 dict(hooks.latest), hooks.pending_points, self.job.tenant_id):
                    return None
                hooks.pending_points = []
            if not hooks.record_pending_checkpoint(session):
                return None
            return job_state.retry_attempt(session, self.lease, error, self.job.max_attempts)

        status = hooks.write_within_lease("end the attempt", retry)
        logger.info("job %s: attempt %d ended (%s): %s", self.job.id, self.lease.attempt, error[0], status)
        if status == "queued":
            try:
                send_unsent(self.context.sessions, self.context.sender, self.context.settings, job_ids=[self.job.id])
            except Exception:  # noqa: BLE001 - the job is queued and unsent: a maintenance loop sends it
                logger.warning("job %s: could not send the retried job now; a maintenance pass will", self.job.id,
                               exc_info=True)

    def _release(self, hooks: ServiceHooks) -> bool:
        """Give the job back to the queue (not a failure: the attempt is returned), with what is buffered and
        the checkpoint record. If the send fails, the job stays unsent and a maintenance loop sends it."""
        hooks.heartbeat.stop()  # no renewal after the release

        def release(session: Session) -> bool:
            if hooks.pending_points:
                if not job_state.record_progress(session, self.lease, hooks.progress(hooks.last_step),
                                                 dict(hooks.latest), hooks.pending_points, self.job.tenant_id):
                    return False
                hooks.pending_points = []
            return hooks.record_pending_checkpoint(session) and job_state.release_job(session, self.lease)

        released = hooks.write_within_lease("give the job back", release)
        if not released:
            logger.warning("job %s: could not give the job back (lease lost); the reaper requeues it", self.job.id)
            return False
        try:
            send_unsent(self.context.sessions, self.context.sender, self.context.settings, job_ids=[self.job.id])
        except Exception:  # noqa: BLE001 - the job is queued and unsent: a maintenance loop sends it
            logger.warning("job %s: could not send the requeued job now; a maintenance pass will", self.job.id,
                           exc_info=True)
        return True

    def _finish(self, hooks: ServiceHooks, status: str, *, error: tuple[str, str] | None = None,
                artifacts: list[Artifact] = (), sampler: Sampler | None = None,  # type: ignore[assignment]
                quality: dict[str, Any] | None = None) -> None:
        # a method with a convergence rule (auto) may succeed before total_steps: report where it stopped
        progress = hooks.progress(max(hooks.last_step, hooks.first_step) if status == "succeeded" else hooks.last_step)
        if status == "succeeded":
            progress["fraction"] = 1.0
        progress["eta_s"] = 0.0 if status == "succeeded" else None
        hooks.heartbeat.stop()  # no renewal races the final write; it is retried until the lease would run out

        def finish(session: Session) -> bool:
            if hooks.pending_points:
                if not job_state.record_progress(session, self.lease, progress, dict(hooks.latest),
                                                 hooks.pending_points, self.job.tenant_id):
                    return False
                hooks.pending_points = []
            return job_state.finish_job(session, self.lease, status, progress=progress, metrics=dict(hooks.latest),
                                        error=error, artifacts=list(artifacts), sampler=sampler, quality=quality)

        done = hooks.write_within_lease(f"record {status}", finish)
        if done:
            logger.info("job %s %s", self.job.id, status)
        else:
            logger.warning("job %s: could not record %s (lease lost)", self.job.id, status)
