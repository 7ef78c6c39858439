"""A run-loop hook for resume tests: stop before step `step + 1`, keeping every checkpoint as serialised bytes
(as the worker stores them)."""

from __future__ import annotations

from typing import Any

from inference_core.serialization import state_to_bytes
from inference_core.training import RunHooks


class StopAt(RunHooks):
    def __init__(self, step: int):
        self.step = step
        self.current = 0
        self.checkpoints: dict[int, bytes] = {}

    def on_step(self, step: int, total_steps: int, metrics: dict[str, float]) -> None:
        self.current = step

    def save_checkpoint(self, step: int, state: dict[str, Any]) -> None:
        self.checkpoints[step] = state_to_bytes(state)

    def should_stop(self) -> str | None:
        return "preempted" if self.current >= self.step else None
