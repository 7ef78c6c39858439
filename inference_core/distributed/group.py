"""One job as k ranks of a `torch.distributed` process group (issue 44): the group object the training loop and
the methods share (`RankGroup`), joining and leaving the process group, and the row split (`shard_bounds`).

Every collective a method needs is a method of `RankGroup` and is the identity (no communication, no copy) when
world_size == 1, so `SINGLE_RANK` costs nothing. Collectives run on the backend's device: CPU buffers for gloo
(the tests), the rank's CUDA device for NCCL (one device per rank, set by the caller before `run`); a tensor on
the other kind of device is copied there and back. Each collective waits at most the group's timeout (`timeout_s`):
a dead or stalled peer makes it raise (gloo: at once when the peer's connection closes, else at the timeout;
NCCL: its watchdog aborts the process at the timeout), never hang.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

#: the work objects of this process's last collectives, released by `leave_group` (see `RankGroup._collective`)
_HELD: list[Any] = []
#: how many works `_HELD` keeps: a released older work was completed, and dropped by the worker thread, at least
#: HELD_WORKS collectives ago
HELD_WORKS = 4


def shard_bounds(n: int, rank: int, world_size: int) -> tuple[int, int]:
    """Rows [start, stop) of rank `rank` when n rows are split into `world_size` contiguous blocks, the first
    n % world_size ranks one row more (e.g. n = 7, k = 3: [0, 3), [3, 5), [5, 7)). A rank may get no rows (n < k)."""
    if world_size < 1 or not 0 <= rank < world_size or n < 0:
        raise ValueError(f"shard_bounds needs n >= 0 and 0 <= rank < world_size, got n={n}, rank={rank}, "
                         f"world_size={world_size}")
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


@dataclass(frozen=True)
class RankGroup:
    """This process's place in a job's process group, and the collectives the methods use.

    `rank`, `world_size`; `is_root` is rank 0, the rank that reports, checkpoints and evaluates. `backend`
    ("gloo" or "nccl"; None for one rank), `timeout_s` (every collective's bound) and `device` (where the
    collectives' buffers live) come from `join_group`. With world_size 1 every collective returns its input.
    """

    rank: int = 0
    world_size: int = 1
    backend: str | None = None
    timeout_s: float | None = None
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"a rank group needs 0 <= rank < world_size, got rank={self.rank}, "
                             f"world_size={self.world_size}")

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    @property
    def ranked(self) -> bool:
        """True when there is more than one rank (the methods then take their ranked code paths)."""
        return self.world_size > 1

    def bounds(self, n: int) -> tuple[int, int]:
        """This rank's rows of n (`shard_bounds`)."""
        return shard_bounds(n, self.rank, self.world_size)

    # ---- collectives ---------------------------------------------------------------------------------------

    def _collective(self, start: Callable[[], Any], tensors: Sequence[Tensor]) -> None:
        """Run one asynchronous collective on `tensors` (`start()` returns its work) and wait for it, at most the
        group's timeout.

        The work object is kept (`_HELD`: the last HELD_WORKS of them, with their tensors) rather than dropped here.
        A gloo work is also referenced by the process group's worker thread, which drops its reference just after
        completing it; whichever reference goes last destroys the work and releases its tensors, and releasing a
        tensor that has a Python object takes the GIL. Were that the worker thread while the interpreter is
        finalising (a rank that returns and exits right after its last collective), the thread would be torn down
        inside a destructor and the process would abort ("terminate called without an active exception": 2-5
        exits in 40 on two busy cores, torch 2.13; the core dump shows ~AsyncAllreduceWork in
        ProcessGroupGloo::runLoop; none in 80 with the works held). Holding the work makes the worker's drop a plain
        decrement; `leave_group` releases the held works on this thread. Holding the tensors alone does not help
        (the work's release still takes the GIL), nor does waiting after each collective for the worker (its
        release needs the GIL this thread holds: up to a second a collective)."""
        work = start()
        _HELD.append(work)
        del _HELD[:-HELD_WORKS]
        if self.timeout_s is None or self.backend == "nccl":
            work.wait()  # NCCL: the stream waits, the CPU goes on; the process group's watchdog enforces the timeout
        else:
            work.wait(timeout=timedelta(seconds=self.timeout_s))

    def _to_comm(self, t: Tensor) -> Tensor:
        return t.to(self.device).contiguous()

    def all_gather_rows(self, t: Tensor, total: int | None = None) -> Tensor:
        """Every rank's rows of `t` [r, ...], concatenated in rank order: [Σ r, ...], on t's device.

        Ranks may hold different numbers of rows: with `total` (the rows of all ranks together, split by
        `shard_bounds`) the counts are known; without it they are exchanged first (one more small collective).
        The shards are padded to the largest, gathered, and trimmed."""
        if self.world_size == 1:
            return t
        if total is not None:
            counts = [stop - start for start, stop in (shard_bounds(total, r, self.world_size)
                                                        for r in range(self.world_size))]
            if counts[self.rank] != t.shape[0]:
                raise ValueError(f"rank {self.rank} holds {t.shape[0]} rows, its share of {total} is "
                                 f"{counts[self.rank]}")
        else:
            mine = torch.tensor([t.shape[0]], dtype=torch.int64, device=self.device)
            sizes = [torch.empty_like(mine) for _ in range(self.world_size)]
            self._collective(lambda: dist.all_gather(sizes, mine, async_op=True), [mine, *sizes])
            counts = [int(s) for s in sizes]
        widest = max(counts)
        local = self._to_comm(t)
        if local.shape[0] < widest:
            pad = local.new_zeros((widest - local.shape[0], *local.shape[1:]))
            local = torch.cat([local, pad])
        buffers = [torch.empty_like(local) for _ in range(self.world_size)]
        self._collective(lambda: dist.all_gather(buffers, local, async_op=True), [local, *buffers])
        out = torch.cat([buf[:count] for buf, count in zip(buffers, counts, strict=True)])
        return out.to(t.device)

    def all_reduce_sum_(self, tensors: Sequence[Tensor]) -> Sequence[Tensor]:
        """Sum each tensor over the ranks, in place (one collective per dtype: the tensors are flattened into one
        buffer). Returns `tensors`."""
        if self.world_size == 1 or not tensors:
            return tensors
        by_dtype: dict[torch.dtype, list[Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)
        for group in by_dtype.values():
            flat = torch.cat([t.detach().reshape(-1).to(self.device) for t in group])
            self._collective(lambda flat=flat: dist.all_reduce(flat, op=dist.ReduceOp.SUM, async_op=True), [flat])
            offset = 0
            with torch.no_grad():
                for t in group:
                    t.copy_(flat[offset: offset + t.numel()].view_as(t))
                    offset += t.numel()
        return tensors

    def all_reduce_sum(self, value: float) -> float:
        """A Python number summed over the ranks (float64)."""
        if self.world_size == 1:
            return value
        buf = torch.tensor([float(value)], dtype=torch.float64, device=self.device)
        self.all_reduce_sum_([buf])
        return float(buf)

    def _broadcast_bytes(self, data: bytes | None) -> bytes | None:
        """Rank 0's bytes (None: nothing) on every rank: a length, then, unless it is 0, the bytes."""
        length = torch.tensor([-1 if data is None else len(data)], dtype=torch.int64, device=self.device)
        if not self.is_root:
            length.zero_()
        self._collective(lambda: dist.broadcast(length, src=0, async_op=True), [length])
        size = int(length)
        if size < 0:
            return None
        if size == 0:
            return b""
        if self.is_root:
            buf = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(self.device)
        else:
            buf = torch.empty(size, dtype=torch.uint8, device=self.device)
        self._collective(lambda: dist.broadcast(buf, src=0, async_op=True), [buf])
        return bytes(buf.cpu().numpy().tobytes())

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's `obj` (JSON: no pickle crosses a process boundary) on every rank; the other ranks' argument is
        ignored."""
        if self.world_size == 1:
            return obj
        data = self._broadcast_bytes(json.dumps(obj).encode() if self.is_root else None)
        return json.loads(data)

    def agree_stop(self, reason: str | None) -> str | None:
        """Rank 0's stop reason (None: go on) on every rank, so that every rank stops before the same step; the
        other ranks' argument is ignored. One 8-byte broadcast a step while nobody stops."""
        if self.world_size == 1:
            return reason
        data = self._broadcast_bytes(reason.encode() if (self.is_root and reason) else None)
        return None if data is None else data.decode()

    def barrier(self) -> None:
        """Return once every rank has called it (a one-element all-reduce, bounded by the timeout)."""
        if self.world_size == 1:
            return
        self.all_reduce_sum_([torch.zeros(1, device=self.device)])


#: the group of a job run in one process: every collective is the identity
SINGLE_RANK = RankGroup()


def default_backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def join_group(store: dist.Store, rank: int, world_size: int, *, backend: str | None = None, timeout_s: float,
               device: torch.device | str | None = None) -> RankGroup:
    """Join the job's process group (`torch.distributed.init_process_group` on `store`) as `rank` of `world_size`.

    `device`: the job's device; default the current CUDA device where CUDA is available (set it per rank with
    `torch.cuda.set_device` first), else the CPU; pass "cpu" for a CPU job on a GPU host. `backend` defaults
    to "nccl" for a CUDA device and "gloo" for the CPU. `timeout_s` bounds every collective (and the joining
    itself). With world_size 1 no process group is created: SINGLE_RANK's collectives are the identity."""
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    if device is None:
        device = (torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available()
                  else torch.device("cpu"))
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    backend = backend or default_backend(device)
    comm = torch.device("cpu") if backend == "gloo" else device
    if world_size == 1:
        return RankGroup(rank=0, world_size=1, backend=None, timeout_s=timeout_s, device=comm)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=timeout_s))
    return RankGroup(rank=rank, world_size=world_size, backend=backend, timeout_s=timeout_s, device=comm)


def leave_group(group: RankGroup | None = None) -> None:
    """Destroy this process's default process group, if any: idempotent, and safe after a failed collective or a
    dead peer (errors while tearing down are swallowed)."""
    if group is not None and group.world_size == 1:
        return
    if _HELD:
        # the worker threads drop their references to the last works just after completing them (no GIL needed:
        # ours are still held); a moment without the GIL lets them, then the works are released on this thread
        time.sleep(0.01)
        _HELD.clear()
    try:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - a broken group cannot be left more cleanly than this
        pass
