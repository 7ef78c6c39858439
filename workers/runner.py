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
from typing import Any

from inference_core import errors
from inference_core.methods.base import Method
from inference_core.metrics.quality import with_sampler_certificate
from inference_core.samplers.certificate import sampler_quality
from inference_core.serialization import state_from_bytes, state_to_bytes
from inference_core.spec import AdmittedSpec, admit
from inference_core.targets import BuildContext, build_target
from inference_core.training import RunHooks, RunResult, run
from service import job_state
from service.arrays import npy_bytes
from service.datasets import dataset_loader
from service.errors import DomainError
from service.job_state import Lease
from service.logging_config import ContextThread, log_context
from service.models import Artifact, Job, Sampler
from service.repositories import Datasets
from service.samplers import artifact_row, store_sampler
from workers.context import WorkerContext, worker_context
from workers.dispatch import send_unsent
from workers.predictors import store_predictor

logger = logging.getLogger("parvis.worker")

# Set by the worker's SIGTERM handling: the running job checkpoints and goes back to the queue.
PREEMPT = threading.Event()


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


class Heartbeat(ContextThread):
    """Renews the lease every `heartbeat_seconds` and picks up cancel requests. A ContextThread: its log lines
    carry the job's `job_id` and `tenant` like the run's own."""

    def __init__(self, context: WorkerContext, lease: Lease):
        super().__init__(name=f"heartbeat-{lease.job_id}", daemon=True)
        self.context = context
        self.lease = lease
        self.lost = threading.Event()
        self.cancel = threading.Event()
        self.stopped = threading.Event()

    def run(self) -> None:
        settings = self.context.settings
        while not self.stopped.wait(settings.heartbeat_seconds):
            try:
                with self.context.sessions() as session:
                    ours, cancel = job_state.renew_lease(session, self.lease, settings.lease_seconds)
            except Exception:  # noqa: BLE001 - a DB blip is retried next beat; the lease has slack
                logger.warning("heartbeat failed for %s", self.lease.job_id, exc_info=True)
                continue
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

    # -- stop flags ---------------------------------------------------------------------------------
    def should_stop(self) -> str | None:
        if self.heartbeat.lost.is_set():
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

    def flush(self, progress: dict[str, Any]) -> None:
        with self.context.sessions() as session:
            ok = job_state.record_progress(session, self.lease, progress, dict(self.latest), self.pending_points,
                                           self.tenant_id)
        self.pending_points = []
        if not ok:
            self.heartbeat.lost.set()

    # -- checkpoints ------------------------------------------------------------------------------------
    def save_checkpoint(self, step: int, state: dict[str, Any]) -> None:
        blob = self.context.store.put(checkpoint_key(self.lease.job_id), state_to_bytes(state))
        self.flush(self.progress(step))
        with self.context.sessions() as session:
            if job_state.record_checkpoint(session, self.lease, step):
                job_state.add_artifact(session, artifact_row(blob, self.tenant_id, "checkpoint", CHECKPOINT_MEDIA_TYPE,
                                                             job_id=self.lease.job_id))
                session.commit()
            else:
                self.heartbeat.lost.set()


def run_job_by_id(job_id: str) -> None:
    context = worker_context()
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    with context.sessions() as session:
        lease = job_state.claim_job(session, job_id, owner, context.settings.lease_seconds)
        if lease is None:
            logger.info("job %s not claimable (taken, finished or cancelled); skipping", job_id)
            return
        job = session.get(Job, job_id)
        session.expunge(job)
    with log_context(job_id=job_id, tenant=job.tenant_id):  # every line logged while it runs names the job
        logger.info("job %s claimed (attempt %d) by %s", job_id, lease.attempt, owner)
        JobExecution(context, lease, job).execute()


class JobExecution:
    def __init__(self, context: WorkerContext, lease: Lease, job: Job):
        self.context = context
        self.lease = lease
        self.job = job

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
        with self.context.sessions() as session:
            if not job_state.start_attempt(session, self.lease, resumed_from):
                return
        heartbeat = Heartbeat(self.context, self.lease)
        hooks = ServiceHooks(self.context, self.lease, self.job, heartbeat)
        heartbeat.start()
        try:
            self.admitted = admitted = self._admit()
            context = BuildContext(load_dataset=dataset_loader(self.context.sessions, self.context.store,
                                                               self.job.tenant_id))
            result = run(admitted, hooks=hooks, resume_state=resume, context=context)
        except errors.InferenceError as exc:
            logger.info("job %s failed: %s: %s", self.job.id, exc.code, exc.detail)
            self._finish(hooks, "failed", error=(exc.code, exc.detail))
            return
        except Exception:  # noqa: BLE001 - never crash the worker; the job records a generic failure
            logger.exception("job %s: unexpected error", self.job.id)
            self._finish(hooks, "failed", error=("internal_error",
                                                 "the worker hit an unexpected error while running this job"))
            return
        finally:
            heartbeat.stop()
        self._conclude(hooks, result)

    def _admit(self) -> AdmittedSpec:
        """The stored spec, admitted once in this process (the API admitted it too, in its own): the shapes of
        its uploaded data sets come from the tenant's records, expired ones included (the job was submitted
        before the expiry; the sweeper keeps data sets a live job uses)."""
        with self.context.sessions() as session:
            datasets = Datasets(session, self.job.tenant_id)
            try:
                return admit(self.job.spec, data_shapes=lambda ids: datasets.shapes(ids, live_only=False))
            except DomainError as exc:  # a data set deleted meanwhile
                raise errors.TargetInvalid(exc.detail, loc=exc.loc) from None

    def _conclude(self, hooks: ServiceHooks, result: RunResult) -> None:
        if result.stopped == "lease_lost":
            logger.warning("job %s: lease lost; another worker owns it now, exiting without writes", self.job.id)
        elif result.stopped == "cancelled":
            self._finish(hooks, "cancelled")
        elif result.stopped == "preempted":
            hooks.save_checkpoint(result.steps_completed, result.checkpoint_state())
            with self.context.sessions() as session:
                released = job_state.release_job(session, self.lease)
            if released:  # if the send fails, the job stays unsent and a maintenance loop sends it
                send_unsent(self.context.sessions, self.context.sender, self.context.settings, job_ids=[self.job.id])
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

    def _finish(self, hooks: ServiceHooks, status: str, *, error: tuple[str, str] | None = None,
                artifacts: list[Artifact] = (), sampler: Sampler | None = None,  # type: ignore[assignment]
                quality: dict[str, Any] | None = None) -> None:
        # a method with a convergence rule (auto) may succeed before total_steps: report where it stopped
        progress = hooks.progress(max(hooks.last_step, hooks.first_step) if status == "succeeded" else hooks.last_step)
        if status == "succeeded":
            progress["fraction"] = 1.0
        progress["eta_s"] = 0.0 if status == "succeeded" else None
        with self.context.sessions() as session:
            if hooks.pending_points:
                job_state.record_progress(session, self.lease, progress, dict(hooks.latest), hooks.pending_points,
                                          self.job.tenant_id)
                hooks.pending_points = []
            done = job_state.finish_job(session, self.lease, status, progress=progress, metrics=dict(hooks.latest),
                                        error=error, artifacts=list(artifacts), sampler=sampler,
                                        quality=quality)
        if done:
            logger.info("job %s %s", self.job.id, status)
        else:
            logger.warning("job %s: could not record %s (lease lost)", self.job.id, status)
