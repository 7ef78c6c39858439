"""Multi-process jobs (docs/architecture.md, "Multi-process jobs"): one job run as k ranks of a torch.distributed
process group (`resources.processes`).

The worker that claims the job is rank 0. It opens a c10d TCPStore, publishes its address in the job's record
(`rendezvous`, fenced by the lease), starts as many ranks as it offers on its own machine as child processes
(`python -m workers.rank`), and sends one `parvis.run_rank` message for each rank left, which any other worker
(another machine) claims: that worker reads the address from the job's record and joins. Rank 0 alone talks to
the database (progress, metrics, checkpoints, the result); the other ranks only compute.

Faults: every collective and the rendezvous wait at most `rank_timeout_seconds`. A rank that fails writes its
error into the store before it exits; rank 0 then ends the attempt — as the job's own failure when the rank hit
one (a diverged shard), otherwise as `rank_failed`, retried from the last checkpoint while attempts remain.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from inference_core import errors
from service import job_state
from service.job_state import Lease
from service.models import Job
from service.queue import RUN_RANK_TASK
from service.settings import Settings
from workers.context import WorkerContext

logger = logging.getLogger("parvis.worker")

#: the store key under which rank r leaves its error (JSON {"code", "detail"}) before it exits
FAILED_KEY = "parvis/failed/{rank}"


@dataclass(frozen=True)
class Rendezvous:
    """Where an attempt's ranks meet: the TCPStore rank 0 serves, for which attempt, world size and the step
    every rank resumes from (None: from the start)."""

    host: str
    port: int
    attempt: int
    world: int
    resume_step: int | None
    backend: str = "gloo"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Rendezvous:
        return cls(str(raw["host"]), int(raw["port"]), int(raw["attempt"]), int(raw["world"]),
                   None if raw.get("resume_step") is None else int(raw["resume_step"]), str(raw.get("backend", "gloo")))


def processes_of(spec: dict[str, Any]) -> int:
    return int((spec.get("resources") or {}).get("processes") or 1)


def local_rank_capacity(settings: Settings) -> int:
    """The ranks of one job this worker runs on its own machine: the setting, else one per CUDA device, else one
    per CPU core."""
    if settings.worker_local_ranks:
        return settings.worker_local_ranks
    import torch

    if torch.cuda.is_available():
        return torch.cuda.device_count()
    return os.cpu_count() or 1


def advertised_host(settings: Settings) -> str:
    return settings.worker_address or socket.gethostname()


def open_store(host: str, port: int, world: int, *, master: bool, timeout_s: float) -> Any:
    import torch.distributed as dist

    return dist.TCPStore(host, port, world, master, timeout=timedelta(seconds=timeout_s), wait_for_workers=False)


def use_local_device(local_rank: int) -> None:
    """One CUDA device per rank on a machine (NCCL); nothing to do on the CPU."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank % torch.cuda.device_count())


def report_failure(store: Any, rank: int, exc: BaseException) -> None:
    """Leave this rank's error where rank 0 looks for it (best effort: the store may be gone)."""
    if isinstance(exc, errors.InferenceError):
        record = {"code": exc.code, "detail": exc.detail}
    else:
        record = {"code": errors.RankFailed.code, "detail": f"rank {rank} failed ({type(exc).__name__})"}
    try:
        store.set(FAILED_KEY.format(rank=rank), json.dumps(record))
    except Exception:  # noqa: BLE001 - rank 0 then reports a plain rank failure
        logger.debug("could not leave rank %d's error in the store", rank, exc_info=True)


def failure_from_store(store: Any, world: int) -> errors.InferenceError:
    """What ended a multi-process attempt, seen from rank 0 after a collective failed: a rank's own error (the
    job's fault: a diverged shard, a non-finite target) or `RankFailed` (a rank died or went silent)."""
    for rank in range(1, world):
        key = FAILED_KEY.format(rank=rank)
        try:
            if not store.check([key]):
                continue
            record = json.loads(store.get(key))
        except Exception:  # noqa: BLE001 - the store went with the failure
            break
        if record["code"] == errors.RankFailed.code:
            return errors.RankFailed(record["detail"])
        error = errors.InferenceError(f"rank {rank}: {record['detail']}")
        error.code = record["code"]
        return error
    return errors.RankFailed(f"a rank of this {world}-process job stopped answering (died or timed out)")


def is_distributed_failure(exc: BaseException) -> bool:
    """A collective or store operation that failed because a peer died or went silent."""
    import torch.distributed as dist

    if isinstance(exc, dist.DistError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(
        marker in text for marker in ("Connection closed by peer", "Connection reset", "Timed out", "timed out",
                                      "Gloo", "gloo", "NCCL", "Socket"))


class RankLauncher:
    """Rank 0's side: serve the store, publish the rendezvous, start the local ranks and send messages for the
    rest; on exit stop every local rank it started."""

    def __init__(self, context: WorkerContext, lease: Lease, job: Job, world: int, resume_step: int | None,
                 backend: str):
        self.context = context
        self.backend = backend
        self.lease = lease
        self.job = job
        self.world = world
        self.resume_step = resume_step
        self.children: list[subprocess.Popen] = []
        self.store: Any = None

    @property
    def settings(self) -> Settings:
        return self.context.settings

    def start(self) -> Rendezvous | None:
        """The store served and the rendezvous published (None: the lease is not ours any more)."""
        host = advertised_host(self.settings)
        self.store = open_store(host, 0, self.world, master=True, timeout_s=self.settings.rank_timeout_seconds)
        rendezvous = Rendezvous(host, int(self.store.port), self.lease.attempt, self.world, self.resume_step,
                                self.backend)
        with self.context.sessions() as session:
            if not job_state.publish_rendezvous(session, self.lease, rendezvous.to_json()):
                return None
        # The embedded shape is one machine by definition: every rank runs here, however many cores it has.
        local = self.world if self.settings.embedded_broker else min(self.world, local_rank_capacity(self.settings))
        for rank in range(1, local):
            self.children.append(subprocess.Popen(  # noqa: S603 - our own module, arguments we made
                [sys.executable, "-m", "workers.rank", self.job.id, str(self.lease.attempt), str(rank), str(rank)],
                env={**os.environ, "PARVIS_RANK_HOST": host, "PARVIS_RANK_PORT": str(rendezvous.port),
                     "PARVIS_RANK_WORLD": str(local)}))
        for rank in range(local, self.world):
            self.context.sender.send_task(RUN_RANK_TASK, args=[self.job.id, self.lease.attempt, rank],
                                          queue=self.settings.queue)
        logger.info("job %s: %d ranks (%d here, %d by rank messages) meet at %s:%d", self.job.id, self.world,
                    local, self.world - local, host, rendezvous.port)
        return rendezvous

    def stop(self) -> None:
        """Let the local ranks finish their last collective, then end any that did not."""
        deadline = time.monotonic() + 10.0
        for child in self.children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        self.children = []


@contextmanager
def rank_zero_group(context: WorkerContext, lease: Lease, job: Job, resume_step: int | None,
                    backend: str) -> Iterator[tuple[Any, Any]]:
    """(the process group, its store) of a multi-process job as its rank 0, on `backend` (gloo for CPU jobs, nccl
    for CUDA ones); (None, None) inside: the lease was lost before the rendezvous. Raises `errors.RankFailed`
    when the others never join."""
    from inference_core.distributed import join_group, leave_group

    world = processes_of(job.spec)
    launcher = RankLauncher(context, lease, job, world, resume_step, backend)
    group = None
    try:
        if launcher.start() is None:
            yield None, None
            return
        use_local_device(0)
        try:
            group = join_group(launcher.store, 0, world, backend=backend,
                               timeout_s=context.settings.rank_timeout_seconds)
        except Exception as exc:
            if not is_distributed_failure(exc):
                raise
            raise errors.RankFailed(f"the {world - 1} other ranks did not join within "
                                    f"{context.settings.rank_timeout_seconds:.0f} s") from exc
        yield group, launcher.store
    finally:
        if group is not None:
            leave_group(group)
        launcher.stop()


def run_rank(job_id: str, attempt: int, rank: int, local_rank: int = 0,
             address: tuple[str, int] | None = None) -> None:
    """A rank other than 0: join the attempt's group, train the job's share, write nothing to the database.
    A message for an attempt that is over (the job moved on) is dropped."""
    from inference_core.distributed import join_group, leave_group
    from inference_core.serialization import state_from_bytes
    from inference_core.targets import BuildContext
    from inference_core.training import run
    from service.datasets import dataset_loader
    from workers.context import worker_context
    from workers.runner import admit_stored_spec, checkpoint_key

    context = worker_context()
    with context.sessions() as session:
        job = session.get(Job, job_id)
        if job is None or job.status != "running" or job.attempt != attempt or not job.rendezvous:
            logger.info("rank %d of job %s attempt %d: the attempt is over; nothing to do", rank, job_id, attempt)
            return
        session.expunge(job)
    rendezvous = Rendezvous.from_json(job.rendezvous)
    if rendezvous.attempt != attempt:
        return
    host, port = address or (rendezvous.host, rendezvous.port)
    settings = context.settings
    store = open_store(host, port, rendezvous.world, master=False, timeout_s=settings.rank_timeout_seconds)
    use_local_device(local_rank)
    group = join_group(store, rank, rendezvous.world, backend=rendezvous.backend,
                       timeout_s=settings.rank_timeout_seconds)
    try:
        resume = None
        if rendezvous.resume_step is not None:
            resume = state_from_bytes(context.store.get(checkpoint_key(job_id)))
            if int(resume["step"]) != rendezvous.resume_step:
                raise errors.RankFailed(f"rank {rank} found the checkpoint of step {resume['step']}, not "
                                        f"{rendezvous.resume_step}")
        admitted = admit_stored_spec(context, job)
        loader = dataset_loader(context.sessions, context.store, job.tenant_id)
        run(admitted, resume_state=resume, context=BuildContext(load_dataset=loader), group=group)
        logger.info("rank %d of job %s attempt %d done", rank, job_id, attempt)
    except Exception as exc:
        report_failure(store, rank, exc)
        raise
    finally:
        leave_group(group)
