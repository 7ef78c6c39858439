"""Where the API computes: a bounded thread pool for `/sample` draws, `/predict` answers (app/api/routes/
predict.py) and the start-up warm-up, so CPU work never runs on the event loop nor in the request threadpool
that polls need, and at most `sample_concurrency` of them run at once (the rest wait in the pool's queue,
holding no thread and no database connection).

`.npy` answers are streamed (negotiation.array_response). The draws themselves are computed in one call:
pushing the noise through the network in row chunks changes float32 matmul rounding (measured: up to 6e-5
at d = 1000), and draws must stay bit-identical to `inference_core.samplers` for the same (n, seed)."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np

logger = logging.getLogger("parvis.api")
T = TypeVar("T")

#: Bytes per value of each answer format, for the `max_sample_bytes` estimate before any work. JSON writes a
#: float32 widened to float64 as up to ~20 characters with its separator.
BYTES_PER_VALUE = {"npy": 4, "json": 20}


def default_concurrency() -> int:
    return 2 * (os.cpu_count() or 1)


class ComputePool:
    """A fixed-size thread pool for CPU work of the API; `warm` is set once torch and the samplers module
    are imported (readiness reports it)."""

    def __init__(self, workers: int):
        self.workers = max(1, workers)
        self.executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="parvis-compute")
        self.warm = threading.Event()
        self.warm_error: str | None = None

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.wrap_future(self.executor.submit(fn, *args))

    def start_warm_up(self) -> None:
        self.executor.submit(self._warm_up)

    def _warm_up(self) -> None:
        try:
            import torch

            import inference_core.samplers  # noqa: F401 - the import is the warm-up

            # Parallelism comes from concurrent requests; one intra-op thread each keeps them from
            # oversubscribing the cores (and the polls' threads) under load.
            torch.set_num_threads(1)
        except Exception as exc:  # noqa: BLE001 - readiness reports it; /sample would raise it again
            self.warm_error = f"{type(exc).__name__}: {exc}"
            logger.exception("warm-up failed")
        finally:
            self.warm.set()

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


def values_per_draw(config: dict[str, Any], x: list[list[float]] | None) -> int:
    """Numbers one draw contributes to the answer: the output dimension, or len(x) for function samplers."""
    if x is not None:
        return len(x)
    generator = config.get("generator", {})
    return int(generator.get("output_dim", config.get("target", {}).get("dim", 0)) or 0)


def one_intra_op_thread() -> None:
    """One torch intra-op thread for the calling thread (per thread under OpenMP, so every thread that computes
    calls this first): parallelism comes from concurrent requests, and an answer must not depend on how many
    threads happened to split its matmuls (float32 rounding differs, and /sample and /predict are seeded and
    bit-identical)."""
    import torch

    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def draw(generator: Any, n: int, seed: int, x: list[list[float]] | None) -> np.ndarray:
    one_intra_op_thread()
    values = generator.sample(n, seed) if x is None else generator.sample(n, seed, x)
    return values.numpy()
